"""Display helpers for app.py: figures, the layer-range control, a clickable Plotly view, texts, event handlers."""
