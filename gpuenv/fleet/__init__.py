"""Fleet health checks: verify many nodes, compare them, remember every GPU."""
