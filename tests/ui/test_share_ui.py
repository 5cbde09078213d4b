"""Sharing a comparison: saved as a small file, opened again on the embedded default model (its model loaded,
A and B set, the results shown), and anything wrong with a file one line that changes nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest

from evaluation.exports.comparison_file import Comparison
from evaluation.measure.measurement import Measurement
from evaluation.serving.backend import Backend
from evaluation.core.pool import ModelSpec
from prune.core.calibration import Calibration
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify
from evaluation.serving.downloads import Downloads
from ui.inputs import Policy
from ui.session import Session

from conftest import handlers_on, stand_in_backend, tiny_model

RESULTS = (Measurement("arc_easy acc", 61.5, "%", spread=2.1, spread_kind="stderr", group="benchmarks"),
           Measurement("arc_easy acc", 48.0, "%", model="A", group="benchmarks"),
           Measurement("arc_easy acc", 55.5, "%", model="B", group="benchmarks"))


@pytest.fixture(scope="module")
def backend():
    """A CPU backend that has loaded the embedded default model."""
    served = Backend(data_dir="", device="cpu")
    served.models.load(ModelSpec())
    return served


def sharing(page, backend, tmp_path, shared=False):
    downloads = Downloads(shared, tmp_path / "exports", tmp_path / "gradio")
    return handlers_on(page, backend, Policy(shared=shared), downloads=downloads).share


def compared(backend) -> Session:
    """The default model with A = [20, 26) by hand, B = Wanda 50 % (edited) and three results."""
    spec = ModelSpec(token="hf_secret_token_never_saved")
    session = Session().for_model(spec, backend.models.load(spec)).with_block(20, 26, "by hand")
    session = replace(session, editing="B").with_cut(Recipe((Sparsify.of("wanda", 0.5),), origin="wanda"))
    return session.with_results(list(RESULTS))


def test_a_saved_comparison_opens_the_same_page_from_another_model(page, backend, tmp_path, tiny_tokenizer):
    shares, box = sharing(page, backend, tmp_path), page.cut.share
    session = compared(backend)
    saved = shares.save(session)
    path = Path(saved[box.saved])
    assert path.name == "layercut-comparison.json" and path.parent == tmp_path / "exports"
    assert "hf_secret_token" not in path.read_text() and path.stat().st_size < 4096
    assert saved[box.status].startswith("Saved **SmolLM2-135M-Instruct** · **A**: cut 20–25 · **B**: wanda 50% ·")
    assert str(tmp_path) not in saved[box.status]

    spec = backend.models.adopt(tiny_model("llama", 4), tiny_tokenizer, name="tiny-llama")  # the visitor is elsewhere
    elsewhere = Session().for_model(spec, backend.models.load(spec)).with_block(1, 2, "by hand")
    shown = shares.open(elsewhere, str(path), "", False)
    opened = shown[page.view.session]
    assert opened.spec == ModelSpec() and opened.info.num_layers == 30 and opened.editing == "B"
    assert opened.cuts == session.cuts and opened.cuts[0].origin == "by hand"
    assert [m.to_dict() for m in opened.results] == [m.to_dict() for m in RESULTS]
    assert opened.result is None  # another model's analysis is not carried over
    assert shown[page.header.model]["value"] == "SmolLM2-135M-Instruct"
    assert "**A**: layers 20–25" in shown[page.view.banner] and "Wanda, 50 %" in shown[page.view.banner]
    row = shown[page.benchmarks.results.table]["value"].to_dict("records")
    assert row == [{"Metric": "arc_easy acc", "Unit": "%", "Original": "61.5 ± 2.1", "A: cut 20–25": "48.0",
                    "Degradation (A)": "13.5", "Score kept % (A)": "78.0", "B: wanda 50%": "55.5",
                    "Degradation (B)": "6.0", "Score kept % (B)": "90.2"}]  # 48 / 61.5 = 78.05 %, 55.5 / 61.5 = 90.24 %
    assert shown[page.cut.share.status].startswith("Opened **SmolLM2-135M-Instruct**")


def test_opening_on_the_same_model_loads_nothing_and_keeps_its_analysis(page, backend, tmp_path):
    session = compared(backend)
    path = sharing(page, backend, tmp_path).save(session)[page.cut.share.saved]
    never = stand_in_backend(default_calibration=None, rates=lambda spec: None,
                             load=lambda *a, **k: pytest.fail("loaded again"))
    shares = sharing(page, never, tmp_path)
    here = replace(Session().for_model(ModelSpec(), session.info), origin="angular on the built-in text")
    opened = shares.open(here, path, "", False)[page.view.session]
    assert opened.origin == "angular on the built-in text" and opened.cuts == session.cuts


def _file(tmp_path, text: str) -> str:
    path = tmp_path / "comparison.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ("{oops", "This file is not a saved LayerCut comparison: it is not JSON."),
    ('{"steps": []}', "This file is not a saved LayerCut comparison."),
    (Comparison("SmolLM2-135M-Instruct", recipes={"A": Recipe.block(12, 2, 4), "B": None}).to_json(),
     "A's recipe was made for a 12-layer model; SmolLM2-135M-Instruct has 30 layers."),
    (Comparison("a" * 300, recipes={"A": Recipe.block(30, 2, 4)}).to_json(), "The model name is too long"),
])
def test_a_malformed_file_is_one_line_and_the_comparison_stays(page, backend, tmp_path, text, message):
    shares = sharing(page, backend, tmp_path)
    with pytest.raises(gr.Error) as refused:
        shares.open(compared(backend), _file(tmp_path, text), "", False)
    assert message in refused.value.message and "\n" not in refused.value.message


def test_a_shared_server_opens_only_models_it_allows(page, tmp_path):
    never = stand_in_backend(default_calibration=None, rates=lambda spec: None,
                             load=lambda *a, **k: pytest.fail("a refused model was loaded"))
    shares = sharing(page, never, tmp_path, shared=True)
    text = Comparison("/srv/private/model", recipes={"A": Recipe.block(30, 2, 4)}).to_json()
    with pytest.raises(gr.Error, match="is not a model this server can load"):
        shares.open(Session(), _file(tmp_path, text), "", False)
    with pytest.raises(gr.Error, match="trust remote code is off here"):
        shares.open(Session(), _file(tmp_path, Comparison("org/model", recipes={}).to_json()), "", True)
    with pytest.raises(gr.Error, match="Choose a saved comparison"):
        shares.open(Session(), None, "", False)


def test_what_could_not_be_opened_again_is_not_saved(page, backend, tmp_path):
    shares = sharing(page, backend, tmp_path)
    own = Calibration(source="text", text="notes " * 200, n_samples=4, seq_len=32)
    session = compared(backend).with_cut(Recipe((Sparsify.of("wanda", 0.5, calibration=own),)))
    with pytest.raises(gr.Error, match="cannot be saved to open again: B was calibrated on a text of its own"):
        shares.save(session)
    with pytest.raises(gr.Error, match="Nothing to save yet"):
        shares.save(session.with_cut(None).with_cut(None, "A"))
    assert not (tmp_path / "exports" / "layercut-comparison.json").exists()


def test_a_shared_server_refuses_a_saved_recipe_that_calibrates_on_a_server_file(page, backend, tmp_path):
    secret = tmp_path / "server-only.txt"
    secret.write_text("a server's own text " * 200)
    reads = Recipe((Sparsify.of("wanda", 0.5, calibration=Calibration(source="file", path=str(secret))),))
    text = Comparison(ModelSpec().name, recipes={"A": reads}).to_json()
    shares = sharing(page, backend, tmp_path, shared=True)
    with pytest.raises(gr.Error) as refused:
        shares.open(Session(), _file(tmp_path, text), "", False)
    assert str(secret) not in refused.value.message and "\n" not in refused.value.message
    assert sharing(page, backend, tmp_path).open(Session(), _file(tmp_path, text), "", False)  # a personal machine
