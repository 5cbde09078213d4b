"""Low-rank decomposition in feature or weight space, and the surgical rank search."""
