"""Expert pruning: a mixture of experts loses its least salient experts (REAP and its baselines)."""
