"""Step methods in the app (width, sparsity, low rank, quantization): the picker's groups, Build into a slot (cost
told before, owned after), width against depth at one size, the zeros and 2:4 notes, quantization last with its real
bytes, and bad input as one line."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest
import torch

import prune
from evaluation.measure import sparse_kernels
from prune.core.storage import weight_bytes
from evaluation.serving.backend import Backend
from evaluation.core.pool import ModelSpec
from evaluation.serving.variants import estimated_bytes, own_bytes
from prune.core.calibration import BUILTIN_TEXTS, Calibration
from prune.lowrank.step import Decompose
from prune.depth.step import DepthCut
from prune.core.recipe import Recipe
from prune.core.storage import is_quantized
from prune.quantize.step import Quantize
from prune.sparsity.step import Sparsify
from prune.width.step import WidthPrune
from prune.width.shrink import matching_depth_layers
from ui import catalog, slot_text, text
from ui.session import Session

from conftest import handlers_on, tiny_model, update_of

LAYERS = 6
CAL_INPUTS = ("text", BUILTIN_TEXTS[0].read_text()[:4000], None, 4, 32)


@pytest.fixture
def visitor(tiny_tokenizer, page):
    """(handlers, session) on a tiny Llama served by a real backend."""
    backend = Backend(data_dir="", device="cpu")
    spec = backend.models.adopt(tiny_model("llama", LAYERS), tiny_tokenizer, name="tiny-llama")
    return handlers_on(page, backend), Session().for_model(spec, backend.models.load(spec))


def run(generator) -> list[tuple]:
    """Every output a streaming handler yields."""
    return list(generator)


def test_the_picker_groups_depth_then_width_methods_and_shows_the_width_controls(page):
    choices = catalog.method_choices()
    names = [name for _label, name in choices]
    assert names == [*prune.METHODS, "magnitude", "wanda", "sparsegpt", "width", "width-llm-pruner", "experts-reap",
                     "experts-frequency", "experts-ean", "experts-gate", "experts-random", "experts-merge",
                     "lowrank-feature", "lowrank-weight", "int8", "int4", "int8+head", "int4+head", "int8+emb",
                     "int4+emb", "int8-gptq", "int4-gptq"]
    groups = [label.split(" · ")[0] for label, _name in choices]
    assert groups == ["Depth"] * len(prune.METHODS) + ["Sparsity"] * 3 + ["Width"] * 2 + ["Expert pruning"] * 6 + \
        ["Low-rank"] * 2 + ["Quantization"] * 8

    picks, header, steps = handlers_on(page, Backend(data_dir="", device="cpu")).pick, page.header, page.header.steps
    shown = picks.method_info("sparsegpt")
    level = shown[steps.level]
    assert "SparseGPT" in shown[header.method_about] and shown[header.options]["interactive"] is False
    assert tuple(shown[c]["visible"] for c in (header.analyze_btn, header.build_btn, steps.row, steps.pattern,
                                               steps.versus_btn)) == (False, True, True, True, False)
    assert level["label"].startswith("Sparsity") and level["maximum"] == 99 and level["value"] == 50
    shown = picks.method_info("width")
    level = shown[steps.level]
    assert level["label"] == "Parameters kept (%)" and level["value"] == 80
    assert shown[steps.pattern]["visible"] is False and shown[steps.versus_btn]["visible"] is True
    shown = picks.method_info("width-llm-pruner")  # the second width criterion: the same controls
    assert "LLM-Pruner" in shown[header.method_about] and "first and last" in shown[header.method_about]
    assert shown[steps.level]["value"] == 80 and shown[steps.versus_btn]["visible"] is True
    shown = picks.method_info("lowrank-feature")
    assert "eigenvectors" in shown[header.method_about] and shown[header.build_btn]["visible"] is True
    assert shown[steps.level]["label"] == "Parameters kept (%)"
    assert shown[steps.pattern]["visible"] is False and shown[steps.versus_btn]["visible"] is False
    shown = picks.method_info("int4")  # no level: the slider hides; Build, and the tick that stacks it on the cut
    assert "two a byte" in shown[header.method_about] and shown[header.build_btn]["visible"] is True
    assert shown[steps.level] == gr.update(visible=False) and shown[steps.row]["visible"] is True
    shown = picks.method_info("angular")
    assert shown[header.analyze_btn]["visible"] is True and shown[header.build_btn]["visible"] is False
    assert shown[steps.row]["visible"] is False
    assert shown[header.options]["value"] == text.options_text(prune.METHODS["angular"].options)


def test_build_tells_the_cost_before_and_puts_the_step_in_the_edited_slot(visitor, page):
    handlers, session = visitor
    view, status, rank_map = page.view, page.header.analysis_md, page.cut.rank_map
    first, last = run(handlers.steps.build(session, "wanda", 50, "unstructured", False, *CAL_INPUTS))
    built = last[view.session].cut()
    assert built == Recipe((Sparsify.of("wanda", 0.5, calibration=built.steps[0].calibration),))
    backend = handlers.context.backend
    model = backend.models.model(session.spec, built)
    base = backend.models.model(session.spec)
    owned = own_bytes(model, base)
    assert owned > 0 and f"≈ **{slot_text.mib(owned)}**" in first[status]  # the estimate before = what it owns after
    assert estimated_bytes(base, built) == owned
    assert update_of(first, view.session) == gr.update()  # the visitor's session is unchanged until the build succeeds
    assert f"owns {slot_text.mib(owned)}" in last[status] and "wanda 50%" in last[status]
    assert last[rank_map.box]["visible"] is False  # no rank map: nothing was decomposed
    assert "Wanda, 50 % unstructured sparsity" in last[view.banner] and "zeros are stored densely" in last[view.banner]
    assert (model.model.layers[0].mlp.up_proj.weight == 0).float().mean().item() == pytest.approx(0.5)


def test_a_build_on_a_model_read_from_disk_says_its_variant_is_read_from_files_of_its_own(tiny_folder, page, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    backend = Backend(data_dir="", device="cpu", model_budget_bytes="1KiB")
    spec = ModelSpec(tiny_folder)
    session = Session().for_model(spec, backend.models.load(spec))
    first, last = run(handlers_on(page, backend).steps.build(session, "wanda", 50, "2:4", False, *CAL_INPUTS))
    status = page.header.analysis_md
    recipe = last[page.view.session].cut()
    cost = estimated_bytes(backend.models.model(spec), recipe)
    assert f"will be built layer by layer into files of its own (≈ **{slot_text.mib(cost)}** on disk" in first[status]
    assert "(wanda 2:4) is read from its own files layer by layer" in last[status]
    line = handlers_on(page, backend).pick.model_shown(session.info, session)[page.header.model_md]
    step = backend.models.rates(spec).decode_s_per_token  # measured when it loaded: a step reads every weight not held
    assert line.endswith(f"from its files; one decode step, which brings them all, took {step:.2f} s here)")
    variant = backend.models.model(spec, recipe)
    assert sparse_kernels.unavailable(variant).endswith("this model runs on CPU.")
    monkeypatch.setattr(sparse_kernels, "input_device", lambda _model: torch.device("cuda", 0))  # as beside a GPU
    assert sparse_kernels.unavailable(variant) == (
        "its weights are read layer by layer for each pass (from files or CPU memory), so the 2:4 zeros are multiplied "
        "densely: PyTorch's 2:4 kernels need the weights held on the GPU.")


def test_build_after_a_cut_stacks_the_step_and_a_pattern_implies_its_sparsity(visitor, page):
    handlers, session = visitor
    session = replace(session.with_block(1, 3, "by hand"), editing="B").with_block(2, 4, "by hand")
    *_, last = run(handlers.steps.build(session, "magnitude", 10, "2:4", True, *CAL_INPUTS))
    recipe = last[page.view.session].cut("B")
    assert recipe.steps == (DepthCut.block(LAYERS, 2, 4), Sparsify.of("magnitude", None, "2:4"))
    assert last[page.view.session].cut("A") == session.cut("A")  # the other slot is untouched
    weight = handlers.context.backend.models.model(session.spec, recipe).model.layers[0].self_attn.q_proj.weight
    assert ((weight.reshape(weight.shape[0], -1, 4) == 0).sum(-1) >= 2).all()


def test_width_against_depth_fills_both_slots_with_the_same_size(visitor, page):
    handlers, session = visitor
    backend = handlers.context.backend
    result = prune.score(backend.models.model(session.spec), backend.models.base(session.spec).tokenizer,
                         "block_influence", calibration=Calibration(source="text", text=CAL_INPUTS[1], n_samples=4,
                                                                    seq_len=32), use_cache=False)
    session = replace(session, result=result, origin="BI")
    _first, last = run(handlers.steps.width_vs_depth(session, 80, "block", *CAL_INPUTS))
    after = last[page.view.session]
    depth, width = after.cut("A"), after.cut("B")
    n = matching_depth_layers(after.info.size, 0.8)
    start, end = result.best_block(n)
    assert depth.depth_cut == DepthCut.block(LAYERS, start, end)
    assert isinstance(width.steps[0], WidthPrune) and width.steps[0].param_ratio == 0.8
    sizes = {slot: after.info.num_params - after.info.removed_params(after.cut(slot)) for slot in "AB"}
    layer = max(after.info.layer_params)
    assert abs(sizes["A"] - sizes["B"]) <= layer  # same size, to within one layer
    built = backend.models.model(session.spec, width)
    assert sum(p.numel() for p in built.parameters()) == sizes["B"]  # the arithmetic the banner shows is exact
    assert width.steps[0].criterion == "wanda-sp"
    *_, last = run(handlers.steps.width_vs_depth(session, 80, "block", *CAL_INPUTS, "auto", "width-llm-pruner"))
    after = last[page.view.session]
    assert after.cut("A") == depth
    assert after.cut("B").steps[0] == WidthPrune.of(0.8, after.cut("B").steps[0].calibration, "llm-pruner")
    taylor = backend.models.model(session.spec, after.cut("B"))
    assert sum(p.numel() for p in taylor.parameters()) == sizes["B"]  # the same plan, other structures
    assert any(not torch.equal(a, b) for a, b in zip(taylor.parameters(), built.parameters()))


def test_bad_width_input_is_one_line_and_keeps_the_session(visitor, page):
    handlers, session = visitor
    for method, level, pattern, match in (("wanda", 100, "unstructured", "from 0 to 0.99"),
                                          ("wanda", "lots", "unstructured", "must be a number"),
                                          ("magnitude", 50, "3:3", "pattern"), ("nope", 50, "unstructured",
                                                                                 "not a width method")):
        with pytest.raises(gr.Error, match=match) as err:
            run(handlers.steps.build(session, method, level, pattern, False, *CAL_INPUTS))
        assert "\n" not in str(err.value)
    with pytest.raises(gr.Error, match="Analyze with a depth method first"):
        run(handlers.steps.width_vs_depth(session, 80, "paper", *CAL_INPUTS))
    with pytest.raises(gr.Error, match="'angular' is not a width method"):
        run(handlers.steps.width_vs_depth(session, 80, "paper", *CAL_INPUTS, "auto", "angular"))
    status = handlers.pick.analyze(session, "wanda", "", *CAL_INPUTS, 2)[page.header.analysis_md]
    assert "press *Build*" in status  # a load followed by its analysis, with a width method picked


def test_memory_and_speed_say_what_zeros_cost_here(visitor, page):
    handlers, session = visitor
    *_, last = run(handlers.steps.build(session, "magnitude", 10, "2:4", False, *CAL_INPUTS))
    session = last[page.view.session]
    session = replace(session, editing="B").with_cut(Recipe((Sparsify.of("magnitude", 0.5),)))
    note = handlers.speed.memory(session)[page.speed.memory_note]
    assert "**A**: 50 % of the decoder layers' linear weights are zero" in note and "no memory saving" in note
    note = handlers.speed.speed(session, [1], 8, 3, 1)[page.speed.speed_note]
    lines = dict(line.split(": ", 1) for line in note.split("  \n"))
    assert "Ampere" in lines["**A**"] and "CPU" in lines["**A**"]
    assert "no kernel skips these zeros" in lines["**B**"]


def test_two_four_matrices_are_found_by_their_zeros():
    layer = torch.nn.Linear(64, 64)
    model = tiny_model("llama", 1)
    assert sparse_kernels.kernel_matrices(model) == []  # 32 × 32 matrices: below the kernels' 64
    with torch.no_grad():
        weight = layer.weight.reshape(64, 16, 4)
        weight[:, :, :2] = 0
    assert sparse_kernels._is_two_four(layer.weight)
    with torch.no_grad():
        layer.weight[5, 1] = 1.0  # one group with a single zero
    assert not sparse_kernels._is_two_four(layer.weight)
    assert sparse_kernels.unavailable(model).endswith("this model runs on CPU.")
    assert sparse_kernels.why_no_gain(Recipe(), model) is None


def test_the_two_four_copy_timed_feeds_matrices_and_falls_back_to_dense_when_refused(tiny_tokenizer, monkeypatch):
    """No 2:4 kernels on a CPU: a dense stand-in takes TwoFourLinear's place; its forward (3-D in, 2-D product) is
    TwoFourLinear's own."""
    from transformers import LlamaConfig, LlamaForCausalLM

    class DenseStandIn(sparse_kernels.TwoFourLinear):
        def __init__(self, linear):
            torch.nn.Module.__init__(self)
            self.in_features, self.out_features = linear.in_features, linear.out_features
            self.weight, self.bias = linear.weight, linear.bias

    class Refusing(DenseStandIn):
        def forward(self, x):
            raise NotImplementedError("SparseSemiStructuredTensorCUSPARSELT only supports a specific set of "
                                      "operations, can't perform requested op (expand.default)\nmore")

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4)
    variant = Recipe((Sparsify.of("magnitude", None, "2:4"),)).apply(LlamaForCausalLM(config).eval(), tiny_tokenizer)
    ids = torch.randint(0, 320, (2, 7))
    with torch.no_grad():
        expected = variant(input_ids=ids).logits
    monkeypatch.setattr(sparse_kernels, "TwoFourLinear", DenseStandIn)
    fast, note = sparse_kernels.accelerated(variant)
    assert note == "timed with PyTorch's 2:4 semi-structured sparse kernels (14 matrices)."  # 2 layers × 7
    assert fast is not variant and not any(isinstance(m, DenseStandIn) for m in variant.modules())
    with torch.no_grad():
        torch.testing.assert_close(fast(input_ids=ids).logits, expected, rtol=0, atol=0)
    monkeypatch.setattr(sparse_kernels, "TwoFourLinear", Refusing)
    fast, note = sparse_kernels.accelerated(variant)
    assert fast is variant
    assert note == ("PyTorch's 2:4 kernels refused this model (SparseSemiStructuredTensorCUSPARSELT only supports a "
                    "specific set of operations, can't perform requested op (expand.default)), so it was timed dense.")


def test_the_sparsity_sweep_takes_percentages_and_refuses_bad_ones(visitor, monkeypatch):
    from ui import inputs

    assert inputs.percentages("0, 10,50 %, 99", "Levels") == [0.0, 0.1, 0.5, 0.99]
    for bad in ("", "ten", "0, 120", "-5"):
        with pytest.raises(prune.core.errors.InvalidInput, match="Levels"):
            inputs.percentages(bad, "Levels")
    handlers, session = visitor
    asked = {}

    def sweep(spec, request, **settings):
        asked.update(settings, task=request.names[0], limit=request.limit)
        raise prune.core.errors.InvalidInput("stop here")

    monkeypatch.setattr(handlers.context.backend.sweeps, "sparsity", sweep)
    with pytest.raises(gr.Error, match="stop here"):
        list(handlers.benchmarks.sparsity_sweep(session, "arc_easy", "0, 50, 90", ["wanda"], 0, 4))
    assert asked["levels"] == [0.0, 0.5, 0.9] and asked["methods"] == ["wanda"] and asked["ppl_windows"] == 4
    assert asked["task"] == "arc_easy" and asked["limit"] is None
    with pytest.raises(gr.Error, match="Sparsity levels"):
        list(handlers.benchmarks.sparsity_sweep(session, "arc_easy", "0, 150", ["wanda"], 10, 4))


def test_a_low_rank_build_shows_its_ranks_and_fewer_multiply_adds(visitor, page):
    handlers, session = visitor
    view, rank_map = page.view, page.cut.rank_map
    first, last = run(handlers.steps.build(session, "lowrank-weight", 80, "unstructured", False, *CAL_INPUTS))
    recipe = last[view.session].cut()
    assert recipe == Recipe((Decompose.of("weight", param_ratio=0.8),))
    backend = handlers.context.backend
    model = backend.models.model(session.spec, recipe)
    owned = own_bytes(model, backend.models.model(session.spec))
    assert f"≈ **{slot_text.mib(owned)}**" in first[page.header.analysis_md]
    heat = last[rank_map.plot].data[0]
    after = recipe.size(session.info.size)
    assert last[rank_map.box]["visible"] is True and list(heat.x) == ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                      "gate_proj", "up_proj", "down_proj"]
    assert [row[0] for row in heat.text] == [str(layer[0].rank) for layer in after.matrices]
    assert sum(p.numel() for p in model.parameters()) == after.total  # the map's arithmetic is the built model's
    table = handlers.speed.memory(last[view.session])[page.speed.memory_table]["value"]
    macs = dict(zip(table["Metric"], zip(table["Original"], table[text.column_label("A", {"A": recipe})])))
    original, decomposed = (float(str(v).replace(",", "")) for v in macs[next(k for k in macs if "multiply-adds" in k)])
    weights = lambda size: sum(m.params for layer in size.matrices for m in layer)  # noqa: E731
    assert original - decomposed == weights(session.info.size) - weights(after)  # one MAC per weight, per token


def test_build_quantizes_the_edited_slots_cut_and_the_memory_tab_shows_the_real_bytes(visitor, page):
    handlers, session = visitor
    session = replace(session.with_block(1, 3, "by hand"), editing="B").with_block(1, 3, "by hand")
    first, last = list(handlers.steps.build(session, "int8", None, "unstructured", True, *CAL_INPUTS))
    assert "will own" in first[page.header.analysis_md]
    recipe = last[page.view.session].cut("B")
    assert recipe.steps == (DepthCut.block(LAYERS, 1, 3), Quantize.of(8))
    backend = handlers.context.backend
    quantized, cut = backend.models.model(session.spec, recipe), backend.models.model(session.spec, session.cut("A"))
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
