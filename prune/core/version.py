"""LayerCut's version: in every cache key, so an upgrade measures afresh (pyproject.toml says the same)."""

__version__ = "0.3.0"
