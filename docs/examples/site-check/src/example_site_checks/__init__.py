"""A site's own checks for gpuenv verify."""
