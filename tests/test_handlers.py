"""Handlers on a session whose model is still loading: a message, never a stale cut or "Error"."""

from types import SimpleNamespace

import gradio as gr
import pytest

from ui.handlers import Handlers
from ui.session import Session


@pytest.fixture
def handlers():
    return Handlers(SimpleNamespace(default_calibration=None))


@pytest.mark.parametrize("event, args", [("set_cut", ([1, 3],)), ("best_block", (3,)), ("named_cut", ("10%",))])
def test_a_cut_while_a_model_loads_is_a_message(handlers, event, args):
    with pytest.raises(gr.Error, match="still loading"):
        getattr(handlers, event)(Session().while_loading("org/model"), *args)


def test_nothing_of_the_previous_model_shows_while_another_loads(handlers):
    _range, banner, heat, bars, curve, named, _slot, session = handlers._cut_outputs(
        Session().while_loading("org/model"))
    assert "Loading org/model" in banner and session.info is None and session.result is None
    assert not [t for t in heat.data if t.type == "heatmap"] and not bars.data
    assert named["visible"] is False and curve["visible"] is False
