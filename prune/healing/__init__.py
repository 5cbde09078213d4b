"""Healing: a short retraining after a compression (LoRA or the last layers)."""
