"""Number boxes and sliders that hand the value to the handler as typed, so 2.5 or "abc" gets a clear message.

``gr.Number(precision=0)`` rounds 2.5 to 2 without a word, and a non-number (or, for a slider, an
empty value or one out of its range) fails inside Gradio with its bare "Error"; the handlers check
every number once (``ui.inputs``) and say what is wrong.
"""

from __future__ import annotations

import gradio as gr


class NumberInput(gr.Number):
    """gr.Number that checks nothing itself: the handler says what is wrong with the value."""

    def preprocess(self, payload):
        return payload

    def api_info(self) -> dict:
        return {"type": "number"}

    def get_block_name(self) -> str:
        return "number"  # the built-in number box in the browser


class SliderInput(gr.Slider):
    """gr.Slider that checks nothing itself: the handler says what is wrong with the value."""

    def preprocess(self, payload):
        return payload

    def api_info(self) -> dict:
        return {"type": "number"}

    def get_block_name(self) -> str:
        return "slider"  # the built-in slider in the browser
