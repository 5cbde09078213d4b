"""LayerCut's web UI: pick a model and method, see the importance map, drag a cut, compare.

The page is built tab by tab in ``ui.page`` (``build_demo()``: every event with an ``api_name``, handled by
``evaluation.serving.backend.Backend``; no model code lives here). Each visitor's comparison (model, analysis,
cuts A and B, results) lives in its own ``gr.State``. This file only launches it (``ui.launch``, which the
installed ``layercut`` command runs too): ``python app.py [--model NAME] [--shared]`` (host/port from
GRADIO_SERVER_NAME / _PORT); a Hugging Face Space runs it so.
"""

from __future__ import annotations

from ui.launch import launch_options, main
from ui.page import build_demo

__all__ = ["build_demo", "launch_options", "main"]


if __name__ == "__main__":
    main()
