"""gpuenv: take GPU servers from bare to certified for PyTorch work."""

__version__ = "0.1.0"
