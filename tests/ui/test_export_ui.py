"""Export from the page: either slot as one zip of a Hugging Face checkpoint folder, and no message that names a
folder of the server."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace
from pathlib import Path

import gradio as gr
import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM

from evaluation.exports import folder as exports, llama_quantize
from evaluation.exports.texts import default_export_name
from evaluation.measure.memory import folder_bytes
from evaluation.serving.backend import Backend
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify
from evaluation.serving.downloads import Downloads
from ui.inputs import Policy
from ui.session import Session

from conftest import folder_free, handlers_on, stand_in_backend, tiny_gemma, tiny_model

LAYERS = 6
WEIGHTS_AND_TOKENIZER = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


@pytest.fixture(scope="module")
def served(tiny_tokenizer):
    backend = Backend(data_dir="", device="cpu")
    spec = backend.models.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama")
    session = Session().for_model(spec, backend.models.load(spec)).with_block(1, 3, "by hand")
    session = replace(session, editing="B").with_cut(Recipe((Sparsify.of("magnitude", 0.5),)))
    return backend, session


def exporting(page, backend, tmp_path, shared: bool):
    downloads = Downloads(shared, tmp_path / "gradio" / "layercut-exports" if shared else tmp_path / "exports",
                          tmp_path / "gradio")
    return handlers_on(page, backend, Policy(shared=shared), downloads=downloads).cut


def unzipped(archive: str, into: Path) -> Path:
    with zipfile.ZipFile(archive) as found:
        found.extractall(into)
        (top,) = {name.split("/")[0] for name in found.namelist()}
    return into / top


@pytest.mark.parametrize("shared", [False, True])
def test_either_slot_exports_as_one_zip_that_loads_and_no_message_names_a_server_folder(served, page, tmp_path,
                                                                                       shared):
    backend, session = served
    cuts, box = exporting(page, backend, tmp_path, shared), page.cut.export
    for slot, name in (("A", "cut-a"), ("B", "sparse-b")):
        shown = cuts.export(session, name, slot)
        (archive,), message = shown[box.files], shown[box.status]
        assert isinstance(archive, str) and Path(archive).name == f"{name}.zip"
        folder = unzipped(archive, tmp_path / f"unzipped-{slot}-{shared}")
        assert folder.name == name and WEIGHTS_AND_TOKENIZER <= {p.name for p in folder.iterdir()}
        assert Recipe.from_json(json.loads((folder / exports.MARKER).read_text())["recipe"]) == session.cut(slot)
        reloaded = AutoModelForCausalLM.from_pretrained(folder).eval()
        ids = torch.arange(12).unsqueeze(0)
        expected = backend.models.model(session.spec, session.cut(slot))
        torch.testing.assert_close(reloaded(ids).logits, expected(ids).logits)
        assert message.startswith(f"Saved **{slot}** as `{name}.zip`") and "from_pretrained" in message
        assert str(tmp_path) not in message  # the commands name the folder as unzipped, relative: nothing else
        assert "/" not in folder_free(message)
        assert message.count(f"pretrained=./{name},") == 2  # the scale-out commands, lm-eval's and vLLM's
    assert "mergekit" in cuts.export(session, "cut-a", "A")[box.status]  # a depth cut: the tools' configs too
    default = cuts.export(session, "", None)  # the edited slot, under the default name
    name = default_export_name("tiny-llama", session.cut("B"))
    assert Path(default[box.files][0]).name == f"{name}.zip"
    assert default[box.status].startswith(f"Saved **B** as `{name}")


def test_an_empty_slot_or_an_unknown_one_is_a_message(served, page, tmp_path):
    backend, session = served
    cuts = exporting(page, backend, tmp_path, False)
    with pytest.raises(gr.Error, match="B is empty: choose a cut for it first"):
        cuts.export(session.with_cut(None), "x", "B")
    with pytest.raises(gr.Error, match="Export one of A, B, not 'C'"):
        cuts.export(session, "x", "C")


def test_a_removed_export_takes_its_zip_along(served, page, tmp_path):
    backend, session = served
    cuts = exporting(page, backend, tmp_path, False)
    archive = Path(cuts.export(session, "gone", "A")[page.cut.export.files][0])
    folder = archive.with_suffix("")
    size = exports.export_bytes(folder)
    assert size == folder_bytes(folder) + archive.stat().st_size > 2 * archive.stat().st_size - 4096
    assert exports.remove_export(folder) == size
    assert not folder.exists() and not archive.exists()


def test_the_export_slot_follows_the_edited_slot(page):
    cuts = handlers_on(page, stand_in_backend(default_calibration=None)).cut
    assert cuts.export_follows("B")["value"] == "B" and cuts.export_follows("Z") == gr.update()
    wired = {fn.api_name: fn for fn in page.demo.fns.values()}["export_follows"]
    assert [b._id for b in wired.inputs] == [page.cut.slot._id] and [b._id for b in wired.outputs] == [
        page.cut.export.slot._id]


@pytest.mark.parametrize("shared", [False, True])
def test_a_gguf_type_adds_the_model_as_one_gguf_offered_beside_the_zip(served, page, tmp_path, shared):
    backend, session = served
    cuts, box = exporting(page, backend, tmp_path, shared), page.cut.export
    shown = cuts.export(session, "cut-gguf", "A", "Q8_0")
    archive, single = shown[box.files]
    assert Path(single).name == "cut-gguf.Q8_0.gguf" and Path(single).parent == Path(archive).with_suffix("")
    assert "`cut-gguf.Q8_0.gguf` (the model as one GGUF file" in shown[box.status]
    assert "/" not in folder_free(shown[box.status])
    back = AutoModelForCausalLM.from_pretrained(Path(single).parent, gguf_file=Path(single).name, dtype=torch.float32)
    ids = torch.arange(12).unsqueeze(0)
    expected = backend.models.model(session.spec, session.cut("A"))(ids).logits
    assert (back(ids).logits - expected).abs().max() < 0.05 * expected.abs().max()
    with pytest.raises(gr.Error, match="GGUF type 'Q3_K' is not one LayerCut writes"):
        cuts.export(session, "x", "A", "Q3_K")


def test_a_cut_llama_cpp_would_run_wrong_says_why_it_has_no_prune_layers_argument(page, tmp_path, tiny_tokenizer):
    backend = Backend(data_dir="", device="cpu")
    spec = backend.models.adopt(tiny_gemma(transformers.Gemma3TextConfig, 13), tiny_tokenizer, name="tiny-gemma3")
    session = Session().for_model(spec, backend.models.load(spec)).with_block(2, 5, "by hand")
    shown = exporting(page, backend, tmp_path, False).export(session, "gemma-cut", "A")
    message = shown[page.cut.export.status]
    assert "No llama.cpp `--prune-layers` argument: llama.cpp derives Gemma 3's attention from the layer index" in \
        message and "the llama.cpp `--prune-layers` argument," not in message
    with pytest.raises(gr.Error, match="No GGUF for this model: llama.cpp derives Gemma 3's attention"):
        exporting(page, backend, tmp_path, False).export(session, "gemma-gguf", "A", "F16")


@pytest.mark.skipif(llama_quantize.why_not() is not None, reason="llama-cpp-python is not installed")
def test_a_k_quant_is_offered_as_llama_cpps_and_written_by_it_in_the_export_job(served, page, tmp_path):
    backend, session = served
    assert ("Q4_K_M (llama.cpp)", "Q4_K_M") in page.cut.export.gguf.choices
    assert ("Q4_0 (LayerCut)", "Q4_0") in page.cut.export.gguf.choices
    cuts, box = exporting(page, backend, tmp_path, False), page.cut.export
    reports = []
    shown = cuts.export(session, "cut-k", "A", "Q4_K_M", progress=lambda fraction, desc: reports.append(desc))
    archive, single = shown[box.files]
    assert Path(single).name == "cut-k.Q4_K_M.gguf" and "`cut-k.Q4_K_M.gguf`" in shown[box.status]
    card = (unzipped(archive, tmp_path / "k") / exports.CARD).read_text()
    assert "llama.cpp's own quantizer (`llama_model_quantize`" in card and "made it Q4_K_M" in card
    assert "with an importance matrix from 4,096 tokens of the calibration text (builtin)" in card  # the server's
    assert any(str(report).startswith("llama.cpp quantizing to Q4_K_M: ") for report in reports)  # the job's bar
