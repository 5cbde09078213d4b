"""Attention and MLP drops (He et al. 2024): a layer keeps its residual path, loses a block."""
