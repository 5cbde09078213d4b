"""Quantization in the app: Build puts int8 or int4 after the edited slot's recipe (or alone), the memory tab shows
the real bytes, and nothing may follow it."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest

from evaluation.serving.backend import Backend
from evaluation.measure.memory import weight_bytes
from prune.core.storage import is_quantized
from prune.depth.step import DepthCut
from prune.quantize.step import Quantize
from ui.session import Session

from conftest import REPO, handlers_on, tiny_model

LAYERS = 6
CAL_INPUTS = ("text", (REPO / "assets" / "calibration.txt").read_text()[:4000], None, 4, 32)


@pytest.fixture
def visitor(tiny_tokenizer, page):
    backend = Backend(data_dir="", device="cpu")
    spec = backend.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama")
    return handlers_on(page, backend), Session().for_model(spec, backend.load(spec))


def test_build_quantizes_the_edited_slots_cut_and_the_memory_tab_shows_the_real_bytes(visitor, page):
    handlers, session = visitor
    session = replace(session.with_block(1, 3, "by hand"), editing="B").with_block(1, 3, "by hand")
    first, last = list(handlers.steps.build(session, "int8", None, "unstructured", True, *CAL_INPUTS))
    assert "will own" in first[page.header.analysis_md]
    recipe = last[page.view.session].cut("B")
    assert recipe.steps == (DepthCut.block(LAYERS, 1, 3), Quantize.of(8))
    backend = handlers.context.backend
    quantized, cut = backend.model(session.spec, recipe), backend.model(session.spec, session.cut("A"))
    assert is_quantized(quantized.model.layers[0].mlp.down_proj.weight)
    assert weight_bytes(quantized) < weight_bytes(cut)
    table = handlers.speed.memory(last[page.view.session])[page.speed.memory_table]
    rows = table["value"].set_index("Metric")
    kept = rows.filter(like="% of original").astype(float)  # the columns: A the cut, B the cut in int8
    assert kept.loc["parameters"].tolist() == [kept.loc["parameters"].iloc[0]] * 2  # int8 keeps every parameter
    assert kept.loc["weight memory"].iloc[1] < kept.loc["weight memory"].iloc[0] / 1.5  # its bytes: int8 and scales
    assert kept.loc["checkpoint size on disk"].iloc[1] < kept.loc["checkpoint size on disk"].iloc[0]


def test_nothing_follows_quantization_and_int4_alone_is_built_from_the_original(visitor, page):
    handlers, session = visitor
    *_, last = list(handlers.steps.build(session, "int4", None, "unstructured", False, *CAL_INPUTS))
    session = last[page.view.session]
    assert session.cut("A").steps == (Quantize.of(4),)
    with pytest.raises(gr.Error, match="last step of a recipe") as err:
        list(handlers.steps.build(session, "wanda", 50, "unstructured", True, *CAL_INPUTS))
    assert "\n" not in str(err.value)
