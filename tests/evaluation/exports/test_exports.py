"""Exports on tiny real models: reload, mergekit/llama.cpp texts checked by recomputing the cut, safety."""

import copy
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import tiny_model
from evaluation.exports import texts as export_texts, folder as exports
from evaluation.measure.measurement import ORIGINAL, PRUNED, Measurement
from prune.core.storage import num_params
from prune.core.errors import InvalidInput
from prune.depth.step import DepthCut
from prune.core.step import Step
from prune.core.recipe import Recipe, recipe_of

BASE = "org/tiny-llama"


@pytest.fixture(scope="module")
def base():
    return tiny_model("llama", 6)


def _logits(model):
    ids = torch.arange(3, 19).view(1, 16)  # [1, 16]
    with torch.no_grad():
        return model(input_ids=ids).logits


def _export(base, tokenizer, recipe, target, **kw):
    return exports.export(recipe.apply(base), tokenizer, recipe, base_name=BASE, num_layers=6, target=target, **kw)


def _layers_from_yaml(text):
    """Base layers in output order, read from a mergekit passthrough config (end exclusive)."""
    config = yaml.safe_load(text)
    assert config["merge_method"] == "passthrough"
    out = []
    for piece in config["slices"]:
        (source,) = piece["sources"]
        assert source["model"] == BASE
        start, end = source["layer_range"]
        out += list(range(start, end))
    return out, config


def _hidden(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_export_reloads_as_the_derived_model(base, tiny_tokenizer, tmp_path):
    recipe = Recipe.block(6, 2, 4, origin="angular on the built-in text")
    derived = recipe.apply(base)
    path = exports.export(derived, tiny_tokenizer, recipe, base_name=BASE, num_layers=6, target=tmp_path / "cut")
    reloaded = AutoModelForCausalLM.from_pretrained(path).eval()
    assert torch.equal(_logits(reloaded), _logits(derived))
    assert reloaded.config.layercut == recipe.to_json()
    assert recipe_of(reloaded) == recipe
    assert AutoTokenizer.from_pretrained(path)("hello world")["input_ids"] == tiny_tokenizer("hello world")["input_ids"]
    marker = json.loads((path / exports.MARKER).read_text())
    assert Recipe.from_json(marker["recipe"]) == recipe and marker["base_model"] == BASE
    assert _hidden(tmp_path) == []
    assert 0 < exports.model_files_bytes(path) < sum(p.stat().st_size for p in path.iterdir())


@pytest.mark.parametrize("removed, slices", [((2, 3), 2), ((1, 4), 3), ((4, 5), 1), ((0,), 1)])
def test_mergekit_config_keeps_exactly_the_kept_layers(base, tiny_tokenizer, tmp_path, removed, slices):
    recipe = Recipe.cut(6, removed)
    path = _export(base, tiny_tokenizer, recipe, tmp_path / "cut")
    order, config = _layers_from_yaml((path / export_texts.MERGEKIT_FILE).read_text())
    assert order == [i for i in range(6) if i not in removed]
    assert len(config["slices"]) == slices and config["dtype"] == "float32"
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    assert reloaded.config.num_hidden_layers == len(order)
    for new, old in enumerate(order):  # output layer k is base layer order[k], as mergekit would build it
        assert torch.equal(reloaded.model.layers[new].mlp.down_proj.weight, base.model.layers[old].mlp.down_proj.weight)


def test_llama_argument_lists_exactly_the_removed_layers(base, tiny_tokenizer, tmp_path):
    path = _export(base, tiny_tokenizer, Recipe.cut(6, [4, 1]), tmp_path / "cut")
    lines = (path / export_texts.LLAMA_FILE).read_text().splitlines()
    assert lines[0].startswith("#") and "llama-quantize --prune-layers 1,4 " in lines[0]
    (argument,) = [line for line in lines if not line.startswith("#")]
    flag, ids = argument.split(" ")
    assert flag == "--prune-layers" and [int(i) for i in ids.split(",")] == [1, 4]


def test_chained_cuts_are_written_in_the_base_numbering(base, tiny_tokenizer, tmp_path):
    recipe = Recipe((DepthCut.of(6, [1]), DepthCut.of(5, [3])))  # the second cut's layer 3 is base layer 4
    assert export_texts.base_layers_removed(recipe) == (1, 4)
    assert export_texts.llama_prune_argument(recipe) == "--prune-layers 1,4"
    path = _export(base, tiny_tokenizer, recipe, tmp_path / "cut")
    order, _ = _layers_from_yaml((path / export_texts.MERGEKIT_FILE).read_text())
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    assert order == [0, 2, 3, 5]
    for new, old in enumerate(order):
        q_proj = reloaded.model.layers[new].self_attn.q_proj.weight
        assert torch.equal(q_proj, base.model.layers[old].self_attn.q_proj.weight)


def test_model_card_says_what_was_cut_how_and_with_what_result(base, tiny_tokenizer, tmp_path):
    recipe = Recipe.block(6, 2, 4, origin="angular, 8 calibration texts")
    scores = [Measurement("arc_easy acc", 61.25, "%", model=ORIGINAL, group="benchmarks"),
              Measurement("arc_easy acc", 47.5, "%", model=PRUNED, group="benchmarks")]
    derived = recipe.apply(base)
    path = exports.export(derived, tiny_tokenizer, recipe, base_name=BASE, num_layers=6, target=tmp_path / "cut",
                          scores=scores, origin="a local folder")
    card = (path / exports.CARD).read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == BASE and {"layercut", "pruned"} <= set(front["tags"])
    for text in (recipe.describe(), "angular, 8 calibration texts", "a local folder", "| 61.2 | 47.5 |",
                 "AutoModelForCausalLM.from_pretrained", "merge_method: passthrough", "--prune-layers 2,3",
                 f"{num_params(base):,} → {num_params(derived):,}"):
        assert text in card, text


@dataclass(frozen=True, eq=False)
class _Reweighted(Step):
    """A stand-in for a future non-depth step on the step protocol (not registered: the global registry stays clean)."""

    kind: ClassVar[str] = "test-reweighted"
    factor: float = 1.0

    def apply(self, model, tokenizer=None, progress=None):
        return copy.deepcopy(model)

    def describe(self):
        return f"reweighted by {self.factor}"

    def short(self):
        return f"×{self.factor}"


def test_a_recipe_that_is_not_a_depth_cut_gets_a_card_but_no_tool_configs(base, tiny_tokenizer, tmp_path):
    recipe = Recipe((_Reweighted(),))
    path = exports.export(recipe.apply(base), tiny_tokenizer, recipe, base_name=BASE, num_layers=6,
                          target=tmp_path / "other")
    assert not (path / export_texts.MERGEKIT_FILE).exists() and not (path / export_texts.LLAMA_FILE).exists()
    assert "no mergekit or llama.cpp equivalent" in (path / exports.CARD).read_text()
    with pytest.raises(InvalidInput, match="Only depth cuts"):
        export_texts.mergekit_yaml(recipe, BASE)
    with pytest.raises(InvalidInput, match="Only depth cuts"):
        export_texts.llama_prune_argument(recipe)


def test_names_are_checked_never_changed():
    for good in ("cut", "SmolLM2-135M-Instruct-minus-6-layers", "a.b_c-d", "x" * 80):
        assert exports.check_export_name(good) == good
    for bad in ("", ".hidden", "..", "a/b", "../x", "a b", "x" * 81, "naïve", "cut\n"):
        with pytest.raises(InvalidInput, match="letters, digits"):
            exports.check_export_name(bad)
    name = export_texts.default_export_name("HuggingFaceTB/SmolLM2-135M-Instruct", Recipe.block(30, 20, 26))
    assert name == "SmolLM2-135M-Instruct-minus-6-layers-20-25"
    scattered = export_texts.default_export_name("x" * 200, Recipe.cut(30, range(0, 30, 2)))
    assert exports.check_export_name(scattered) == scattered


def test_a_bad_target_name_or_the_original_is_refused(base, tiny_tokenizer, tmp_path):
    with pytest.raises(InvalidInput, match="not a valid export name"):
        _export(base, tiny_tokenizer, Recipe.cut(6, [1]), tmp_path / ".sneaky")
    with pytest.raises(InvalidInput, match="Nothing to export"):
        exports.export(base, tiny_tokenizer, Recipe(), base_name=BASE, num_layers=6, target=tmp_path / "orig")
    with pytest.raises(InvalidInput, match="not derived by this recipe"):
        exports.export(Recipe.cut(6, [1]).apply(base), tiny_tokenizer, Recipe.cut(6, [2]), base_name=BASE,
                       num_layers=6, target=tmp_path / "mismatch")
    assert list(tmp_path.iterdir()) == []


def test_a_foreign_folder_is_never_overwritten_but_an_earlier_export_is(base, tiny_tokenizer, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    (tmp_path / "file").write_text("keep me too")
    for target in (foreign, tmp_path / "file"):
        with pytest.raises(InvalidInput, match="not a LayerCut export"):
            _export(base, tiny_tokenizer, Recipe.cut(6, [1]), target)
    assert (foreign / "notes.txt").read_text() == "keep me" and (tmp_path / "file").read_text() == "keep me too"
    (tmp_path / "empty").mkdir()
    _export(base, tiny_tokenizer, Recipe.cut(6, [1]), tmp_path / "empty")
    (tmp_path / "empty" / "stale.txt").write_text("from the first export")
    path = _export(base, tiny_tokenizer, Recipe.cut(6, [2, 3]), tmp_path / "empty")
    assert recipe_of(AutoModelForCausalLM.from_pretrained(path)) == Recipe.cut(6, [2, 3])
    assert not (path / "stale.txt").exists() and _hidden(tmp_path) == []


def test_a_failure_while_saving_leaves_no_staging_folder_and_the_earlier_export(base, tiny_tokenizer, tmp_path,
                                                                                 monkeypatch):
    earlier = _export(base, tiny_tokenizer, Recipe.cut(6, [1]), tmp_path / "cut")
    before = (earlier / exports.MARKER).read_text()
    real = exports.save_checkpoint

    def save_then_fail(model, tokenizer, folder, **options):
        real(model, tokenizer, folder, **options)
        assert any(folder.iterdir())  # a half-made export exists at this point
        raise OSError("disk full")

    monkeypatch.setattr(exports, "save_checkpoint", save_then_fail)
    for target in (tmp_path / "cut", tmp_path / "new"):
        with pytest.raises(OSError, match="disk full"):
            _export(base, tiny_tokenizer, Recipe.cut(6, [2]), target)
    assert _hidden(tmp_path) == [] and not (tmp_path / "new").exists()
    assert (earlier / exports.MARKER).read_text() == before


def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_leftovers_of_dead_exports_are_removed_and_nothing_else(tmp_path):
    dead = tmp_path / f".cut-{_dead_pid()}-0123abcd{exports.PARTIAL}"
    running = tmp_path / f".cut-{os.getpid()}-89abcdef{exports.PARTIAL}"
    for folder in (dead, running, tmp_path / ".config", tmp_path / "cut"):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    dead_zip = tmp_path / f".cut.zip-{_dead_pid()}-4567abcd{exports.PARTIAL}"  # a zip whose writer died
    dead_zip.write_bytes(b"PK")
    assert exports.remove_leftovers(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, ".config", "cut"])
    assert exports.remove_leftovers(tmp_path / "absent") == 0


def _fake_export(root, name, size, age):
    folder = root / name
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * size)
    (folder / exports.MARKER).write_text("{}")
    os.utime(folder / exports.MARKER, (age, age))
    return folder


def test_bound_folder_removes_the_oldest_exports_only(tmp_path):
    oldest, middle, newest = (_fake_export(tmp_path, n, 1000, t) for n, t in (("a", 100), ("b", 200), ("c", 300)))
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "data.bin").write_bytes(b"\0" * 1000)
    assert exports.bound_folder(tmp_path, 10**6) == []
    limit = 3100  # four folders of ~1000 bytes: one export must go
    assert exports.bound_folder(tmp_path, limit, keep=newest) == [oldest]
    assert exports.bound_folder(tmp_path, 1, keep=middle) == [newest]  # never the kept one, never a foreign one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "mine"]


def test_the_saved_config_carries_this_recipe_even_from_a_variant_cached_under_another_origin(base, tiny_tokenizer,
                                                                                            tmp_path):
    cached = Recipe.cut(6, [1], origin="first visitor: angular").apply(base)
    recipe = Recipe.cut(6, [1], origin="second visitor: taylor")
    path = exports.export(cached, tiny_tokenizer, recipe, base_name=BASE, num_layers=6, target=tmp_path / "cut")
    assert AutoModelForCausalLM.from_pretrained(path).config.layercut == recipe.to_json()
    assert cached.config.layercut["origin"] == "first visitor: angular"  # the cached model is left alone


def test_a_failed_rename_into_place_restores_the_earlier_export(base, tiny_tokenizer, tmp_path, monkeypatch):
    earlier = _export(base, tiny_tokenizer, Recipe.cut(6, [1]), tmp_path / "cut")
    before = (earlier / exports.MARKER).read_text()
    real = os.replace

    def replace(src, dst):
        if str(src).endswith(exports.PARTIAL) and dst == earlier:
            raise OSError("rename failed")
        return real(src, dst)

    monkeypatch.setattr(exports.os, "replace", replace)
    with pytest.raises(OSError, match="rename failed"):
        _export(base, tiny_tokenizer, Recipe.cut(6, [2]), earlier)
    assert (earlier / exports.MARKER).read_text() == before and _hidden(tmp_path) == []


def test_an_export_zips_into_one_file_holding_its_folder(base, tiny_tokenizer, tmp_path):
    path = _export(base, tiny_tokenizer, Recipe.block(6, 2, 4), tmp_path / "cut")
    archive = exports.zipped(path)
    assert archive == tmp_path / "cut.zip" and _hidden(tmp_path) == []
    import zipfile

    with zipfile.ZipFile(archive) as found:
        names = found.namelist()
        assert sorted(names) == sorted(f"cut/{p.name}" for p in path.iterdir())
        assert found.read("cut/config.json") == (path / "config.json").read_bytes()
    (tmp_path / "plain").mkdir()
    with pytest.raises(InvalidInput, match="'plain' is not a LayerCut export"):
        exports.zipped(tmp_path / "plain")


def test_a_patched_cut_reloads_exactly_and_its_hand_offs_say_they_build_the_plain_cut(base, tiny_tokenizer, tmp_path):
    from prune.core.calibration import Calibration
    from prune.patch.step import Patch

    recipe = Recipe.block(6, 2, 4).then(Patch.of("lstsq", Calibration(n_samples=4, seq_len=32)))
    derived = recipe.apply(base, tiny_tokenizer)
    name = export_texts.default_export_name(BASE, recipe)
    assert name.endswith("-minus-2-layers-2-3-patched")
    path = exports.export(derived, tiny_tokenizer, recipe, base_name=BASE, num_layers=6, target=tmp_path / name)
    reloaded = AutoModelForCausalLM.from_pretrained(path).eval()
    assert torch.equal(_logits(reloaded), _logits(derived))
    order, _ = _layers_from_yaml((path / export_texts.MERGEKIT_FILE).read_text())
    assert order == [0, 1, 4, 5]  # what mergekit builds: the plain cut, whose layer 1 is the base's …
    assert not torch.equal(reloaded.model.layers[1].mlp.down_proj.weight, base.model.layers[1].mlp.down_proj.weight)
    assert torch.equal(reloaded.model.layers[2].mlp.down_proj.weight, base.model.layers[4].mlp.down_proj.weight)
    for text in ((path / export_texts.MERGEKIT_FILE).read_text(), (path / export_texts.LLAMA_FILE).read_text(),
                 (path / "README.md").read_text()):
        assert "Not this export: the linear patch changed" in text and "without the patch" in text
    card = (path / "README.md").read_text()
    assert "- Linear patch: ReplaceMe (least squares" in card and "block [2, 4) folded into layer 1" in card
    assert "the kept layers unchanged" not in card and "linear-patch" in card
