"""Measuring: the one result shape, speed, memory, streamed generation, sparse kernels."""
