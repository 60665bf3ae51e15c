"""Tenzro Train reference trainer: the DiLoCo inner loop in PyTorch, talking to a node over JSON-RPC."""

__version__ = "0.1.0"
