"""Exports: a derived model as a Hugging Face folder, its model card and hand-offs."""
