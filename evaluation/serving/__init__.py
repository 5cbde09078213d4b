"""Serving: the backend every tab and the CLI call, its jobs, model pool, variant cache, results."""
