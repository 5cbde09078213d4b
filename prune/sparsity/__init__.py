"""Sparsity: magnitude, Wanda and SparseGPT, unstructured or N:M."""
