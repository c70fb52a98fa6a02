"""`gpuenv tune power`: the power limit that gives the most work per joule, measured with the NLP
training step at each cap, and the original limits always put back. See docs/power.md."""
