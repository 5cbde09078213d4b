"""Explaining a cut: agreement and divergence with the original, the logit lens."""
