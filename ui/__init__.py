"""The web UI: the page built tab by tab (``ui.page``), the handlers' shared machinery (``ui.handlers``), and
display helpers: figures, the layer-range control, a clickable Plotly view, texts, checked inputs, the session."""
