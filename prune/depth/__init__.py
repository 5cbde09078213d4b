"""Depth pruning: layer importance by six methods, the choice of layers or a block, the cut."""
