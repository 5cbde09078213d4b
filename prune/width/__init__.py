"""Width pruning: fewer attention heads and MLP channels, matrices that really shrink."""
