"""Sweeps: every cut of K layers, sparsity levels, the rank search's splits."""
