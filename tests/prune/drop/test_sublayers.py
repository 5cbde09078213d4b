"""Sub-layer drops (He et al. 2024): scores, the weight-sharing view, its KV cache, and how it saves and reloads."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM
from transformers.cache_utils import DummyLayer

import prune
from evaluation.exports import folder as exports
from evaluation.measure import memory, speed
from evaluation.core.pool import describe
from prune.core.architectures import architecture_of, decoder_layers, get_path
from prune.core.errors import InvalidCut, UnsupportedArchitecture
from prune.core.hidden import residual_streams
from prune.core.kv import cache_returned, with_cache
from prune.drop.importance import block_scores, reading_blocks
from prune.depth.step import DepthCut
from prune.core.recipe import Recipe, recipe_of
from prune.core.storage import num_params
from prune.drop.step import SubLayerDrop
from prune.depth.result import ImportanceResult, lowest
from prune.drop.sublayers import ATTENTION, MLP, DroppedBlock, dropped

from conftest import TINY_CONFIGS, build_tiny_tokenizer, tiny_model

DROPPABLE = sorted(set(TINY_CONFIGS) - {"opt"})  # OPT's MLP is no module: attention only (tested apart)
PROMPT = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250]])
LONG = torch.randint(0, 320, (1, 40), generator=torch.Generator().manual_seed(0))  # past the 16-token windows


def logits(model, ids=PROMPT):
    with torch.no_grad():
        return model(input_ids=ids).logits


def greedy(model, cache: bool, new: int = 24):
    with torch.no_grad():
        return model.generate(PROMPT, max_new_tokens=new, do_sample=False, use_cache=cache, pad_token_id=0)


def stepwise_logits(model, ids=LONG, steps: int = 20):
    """The last ``steps`` positions' logits, one token at a time through the KV cache (as our speed and
    generation loops run: no cache_position given, so the model reads the cache's length)."""
    with torch.no_grad():
        out = model(input_ids=ids[:, :-steps], use_cache=True)
        cache, found = cache_returned(out), []
        for t in range(ids.shape[1] - steps, ids.shape[1]):
            out = model(input_ids=ids[:, t:t + 1], use_cache=True, **with_cache(model, cache))
            cache = cache_returned(out)
            found.append(out.logits[:, -1])
    return torch.stack(found, dim=1), cache


def zeroed_reference(model, attention=(), mlp=()):
    """Built independently of prune.drop.sublayers: a deep copy whose dropped blocks have all-zero weights."""
    reference = copy.deepcopy(model)
    sub = architecture_of(reference).sublayers
    for name, layers in ((sub.attention, attention), (sub.mlp, mlp)):
        for i in layers:
            for p in get_path(decoder_layers(reference)[i], name).parameters():
                p.data.zero_()
    return reference


# ---------------------------------------------------------------- the view


@pytest.mark.parametrize("arch", DROPPABLE)
@pytest.mark.parametrize("attention, mlp", [((0,), ()), ((2, 4), (0, 3))])
def test_drop_equals_zeroed_blocks_with_and_without_cache(arch, attention, mlp):
    model = tiny_model(arch, layers=6)
    before = logits(model)
    view = Recipe.drop(6, attention, mlp).apply(model)
    reference = zeroed_reference(model, attention, mlp)

    torch.testing.assert_close(logits(view, LONG), logits(reference, LONG), rtol=0, atol=1e-6)
    cached, cache = stepwise_logits(view)
    torch.testing.assert_close(cached, logits(view, LONG)[:, -20:], rtol=1e-5, atol=1e-5)
    assert torch.equal(greedy(view, cache=True), greedy(view, cache=False))
    assert torch.equal(greedy(view, cache=True), greedy(reference, cache=True))
    # the dropped attention layers store nothing; the others still hold every token (or their window)
    assert [i for i, layer in enumerate(cache.layers) if isinstance(layer, DummyLayer)] == list(attention)
    assert cache.get_seq_length() == LONG.shape[1]
    assert memory.kv_cache_bytes(cache) < memory.kv_cache_bytes(stepwise_logits(model)[1])
    assert torch.equal(logits(model), before), "dropping must not change the original"


def test_opt_drops_attention_but_refuses_its_mlp():
    model = tiny_model("opt", layers=4)
    view = Recipe.drop(4, attention=(0, 2)).apply(model)
    torch.testing.assert_close(logits(view), logits(zeroed_reference(model, (0, 2))), rtol=0, atol=1e-6)
    assert torch.equal(greedy(view, cache=True), greedy(view, cache=False))
    with pytest.raises(UnsupportedArchitecture, match="fc1 and fc2"):
        Recipe.drop(4, mlp=(1,)).apply(model)


def test_drop_shares_weights_and_counts_only_what_is_left():
    model = tiny_model("llama", layers=6)
    recipe = Recipe.drop(6, attention=(1, 4), mlp=(2,))
    view = recipe.apply(model)
    layers = decoder_layers(model)
    gone = sum(p.numel() for i in (1, 4) for p in layers[i].self_attn.parameters())
    gone += sum(p.numel() for p in layers[2].mlp.parameters())
    assert num_params(view) == num_params(model) - gone
    assert describe(model, "tiny").removed_params(recipe) == gone
    assert {p.data_ptr() for p in view.parameters()} <= {p.data_ptr() for p in model.parameters()}
    assert isinstance(decoder_layers(view)[1].self_attn, DroppedBlock)
    assert not isinstance(layers[1].self_attn, DroppedBlock) and model.config.num_hidden_layers == 6
    assert not hasattr(model.config, "layercut_dropped_attention")
    calls = []
    decoder_layers(view)[0].mlp.register_forward_hook(lambda *_: calls.append(1))
    logits(model)
    assert calls == []


def test_a_later_cut_keeps_the_record_and_the_cache_right():
    model = tiny_model("qwen2", layers=6)  # sliding-window layers from 3 on
    recipe = Recipe.drop(6, attention=(0, 4)).then(DepthCut.of(6, [1]))
    view = recipe.apply(model)
    assert dropped(view) == {ATTENTION: [0, 3], MLP: []}  # layer 4 is layer 3 after the cut
    assert view.config.layercut_dropped_attention == [True, False, False, True, False]
    assert recipe_of(view) == recipe
    assert Recipe.from_json(json.loads(json.dumps(recipe.to_json()))) == recipe
    cached, _ = stepwise_logits(view)
    torch.testing.assert_close(cached, logits(view, LONG)[:, -20:], rtol=1e-5, atol=1e-5)
    info = describe(model, "tiny")
    layer1 = info.layer_params[1]
    assert info.removed_params(recipe) == layer1 + info.block_params[ATTENTION][0] + info.block_params[ATTENTION][4]


def test_impossible_drops_are_clear_errors():
    with pytest.raises(InvalidCut, match="No attention or MLP"):
        SubLayerDrop.of(4)
    with pytest.raises(InvalidCut, match="do not exist"):
        SubLayerDrop.of(4, attention=[4])
    with pytest.raises(InvalidCut, match="keep at least one"):
        SubLayerDrop.of(4, attention=range(4))
    model = tiny_model("llama", layers=4)
    with pytest.raises(InvalidCut, match="keep at least one"):  # together with an earlier drop
        Recipe.drop(4, attention=[0, 1]).then(SubLayerDrop.of(4, attention=[2, 3])).apply(model)
    with pytest.raises(InvalidCut, match="6-layer model"):
        Recipe.drop(6, mlp=[1]).apply(model)
    assert Recipe.drop(4, mlp=range(4)).apply(model) is not model  # every MLP may go


def test_describe_and_short():
    step = SubLayerDrop.of(30, attention=[21, 20], mlp=[3])
    assert step.short() == "no attention 20, 21 no MLP 3"
    assert step.describe() == "attention dropped in layers 20, 21 (2 of 30) and MLP dropped in layer 3 (1 of 30)"
    recipe = Recipe.drop(30, attention=[5])
    assert recipe.depth_cut is None and recipe.sublayer_drop.attention == (5,)


# ---------------------------------------------------------------- save and reload


@pytest.mark.parametrize("arch", ["llama", "gemma2", "gpt2", "gpt_neox"])
def test_export_reloads_identically_with_transformers_and_with_layercut(arch, tmp_path):
    model = tiny_model(arch, layers=4)
    recipe = Recipe.drop(4, attention=(0, 2), mlp=(1,), origin="test")
    view = recipe.apply(model)
    target = exports.export(view, build_tiny_tokenizer(), recipe, base_name="tiny", num_layers=4,
                            target=tmp_path / "dropped")
    assert not (target / "mergekit.yml").exists() and not (target / "llama-quantize-prune-layers.txt").exists()
    card = (target / "README.md").read_text()
    assert "can express a layer without its attention" in card and "saved as zero" in card
    assert "Removed layers" not in card
    assert json.loads((target / "layercut.json").read_text())["dropped_blocks"] == {ATTENTION: [0, 2], MLP: [1]}
    assert memory.checkpoint_bytes(view) == exports.model_files_bytes(target)

    plain = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)  # dense, zeros in the dropped blocks
    assert not any(isinstance(m, DroppedBlock) for m in plain.modules())
    torch.testing.assert_close(logits(plain, LONG), logits(view, LONG), rtol=0, atol=1e-6)
    torch.testing.assert_close(logits(plain, LONG), logits(zeroed_reference(model, (0, 2), (1,)), LONG), rtol=0,
                               atol=1e-6)

    loaded, _ = prune.load_model(str(target), device="cpu", dtype="float32")  # the drop applied again
    assert dropped(loaded) == dropped(view) and recipe_of(loaded) == recipe
    assert isinstance(decoder_layers(loaded)[0].get_submodule(architecture_of(loaded).sublayers.attention),
                      DroppedBlock)
    assert num_params(loaded) == num_params(view)
    torch.testing.assert_close(logits(loaded, LONG), logits(view, LONG), rtol=0, atol=1e-6)
    assert memory.kv_cache_bytes(stepwise_logits(loaded)[1]) < memory.kv_cache_bytes(stepwise_logits(plain)[1])


def test_memory_counts_a_smaller_kv_cache_and_the_saved_size():
    model = tiny_model("llama", layers=4)
    view = Recipe.drop(4, attention=(0, 1, 2)).apply(model)
    found = {(label, m.name.split(" (")[0]): m for label, mdl in (("original", model), ("dropped", view))
             for m in memory.measure_memory(mdl, PROMPT, label=label, new_tokens=4)}
    kv = "KV cache after generating"
    assert found[("dropped", kv)].value == pytest.approx(found[("original", kv)].value / 4)
    assert found[("dropped", kv)].details["attention_layers"] == 1
    assert found[("dropped", "parameters")].value < found[("original", "parameters")].value
    # saved with zeros: the same weights on disk, the config a little longer
    disk = "checkpoint size on disk"
    assert 0 <= found[("dropped", disk)].value - found[("original", disk)].value < 0.01


def test_ideal_speedup_counts_attention_only_where_it_is_left():
    model = tiny_model("llama", layers=4)
    view = Recipe.drop(4, attention=(0, 1)).apply(model)
    width = model.config.hidden_size  # 4 heads × 8
    contexts = 10 * (10 + 1) / 2
    attention_gone = 4 * width * contexts * 2
    weights_gone = 10 * 2 * sum(p.numel() for i in (0, 1) for p in decoder_layers(model)[i].self_attn.parameters()
                                if p.dim() >= 2)
    assert speed.forward_flops(model, 10) - speed.forward_flops(view, 10) == pytest.approx(
        attention_gone + weights_gone)


# ---------------------------------------------------------------- scores


@pytest.mark.parametrize("arch", sorted(TINY_CONFIGS))
def test_block_additions_add_up_to_each_layers_output(arch):
    """The table's names are right: input + attention's + MLP's addition = the layer's output."""
    model = tiny_model(arch, layers=3)
    ids = LONG.repeat(2, 1)
    seen = []

    def sink(i, h, attention, mlp, out):
        seen.append(i)
        torch.testing.assert_close(h + attention + mlp, out, rtol=1e-5, atol=1e-6)

    with reading_blocks(model, sink), torch.no_grad():
        model(input_ids=ids, use_cache=False)
    assert seen == [0, 1, 2]
    scores, residual = block_scores(model, ids)
    assert torch.equal(residual, residual_streams(model, ids)[0])
    assert all(np.isfinite(row).all() and (row > 0).all() for row in scores.values())


_MORE = dict(vocab_size=320, hidden_size=32, num_attention_heads=4, max_position_embeddings=256,
             intermediate_size=64, num_hidden_layers=4, num_key_value_heads=2)
MORE_CONFIGS = {  # the table's other rows: post-norms, a residual multiplier, experts
    "mixtral": lambda: transformers.MixtralConfig(**_MORE, num_local_experts=4, num_experts_per_tok=2),
    "qwen3": lambda: transformers.Qwen3Config(**_MORE, head_dim=8),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(**_MORE, head_dim=8, sliding_window=16),
    "olmo2": lambda: transformers.Olmo2Config(**_MORE),
    "granite": lambda: transformers.GraniteConfig(**_MORE, residual_multiplier=0.22),
}


@pytest.mark.parametrize("arch", sorted(MORE_CONFIGS))
def test_the_other_table_rows_add_up_and_drop_exactly(arch):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(MORE_CONFIGS[arch](), dtype=torch.float32).eval()

    def sink(i, h, attention, mlp, out):
        torch.testing.assert_close(h + attention + mlp, out, rtol=1e-5, atol=1e-6)

    with reading_blocks(model, sink), torch.no_grad():
        model(input_ids=LONG, use_cache=False)
    view = Recipe.drop(4, attention=(0, 2), mlp=(1,)).apply(model)
    torch.testing.assert_close(logits(view, LONG), logits(zeroed_reference(model, (0, 2), (1,)), LONG), rtol=0,
                               atol=1e-6)
    cached, _ = stepwise_logits(view)
    torch.testing.assert_close(cached, logits(view, LONG)[:, -20:], rtol=1e-5, atol=1e-5)


def test_a_block_that_adds_nothing_scores_zero_and_goes_first(tiny_tokenizer):
    model = tiny_model("llama", layers=6, seed=2)
    layers = decoder_layers(model)
    layers[2].self_attn.o_proj.weight.data.zero_()
    layers[4].mlp.down_proj.weight.data.zero_()
    result = prune.score(model, tiny_tokenizer, "sublayer", calibration=prune.Calibration(n_samples=4, seq_len=32),
                         use_cache=False)
    assert result.sublayer_scores[ATTENTION][2] == pytest.approx(0, abs=1e-7)
    assert result.sublayer_scores[MLP][4] == pytest.approx(0, abs=1e-7)
    assert result.best_sublayers(ATTENTION, 1) == [2] and result.best_sublayers(MLP, 1) == [4]
    # whole layers: ShortGPT's Block Influence on the same states
    influence = prune.score(model, tiny_tokenizer, "block_influence",
                            calibration=prune.Calibration(n_samples=4, seq_len=32), use_cache=False)
    np.testing.assert_allclose(result.block_scores, influence.block_scores, rtol=1e-6, atol=1e-7)
    back = ImportanceResult.from_json(json.loads(json.dumps(result.to_json())))
    np.testing.assert_array_equal(back.sublayer_scores[MLP], result.sublayer_scores[MLP])
    assert back.best_sublayers(ATTENTION, 2) == result.best_sublayers(ATTENTION, 2)


def test_lowest_picks_the_n_smallest_anywhere():
    assert lowest([0.3, 0.1, np.nan, 0.2, 0.1, np.inf], 3) == [1, 3, 4]
    with pytest.raises(InvalidCut, match="1…4"):
        lowest([0.3, 0.1, np.nan, 0.2, 0.1, np.inf], 5)
    plain = ImportanceResult("angular", np.zeros((3, 3)), "x")
    with pytest.raises(InvalidCut, match="no attention scores"):
        plain.best_sublayers(ATTENTION, 1)


# ---------------------------------------------------------------- UI and CLI


def test_best_n_attention_blocks_fill_the_edited_slot(page):
    from conftest import handlers_on, stand_in_backend
    from evaluation.core.pool import ModelSpec
    from ui import palette, plots
    from ui.session import Session
    from ui.slot_text import banner_markdown, slot_holds
    from ui.text import column_label

    model = tiny_model("llama", layers=6)
    scores = {ATTENTION: np.array([0.5, 0.1, 0.4, 0.05, 0.3, 0.6]), MLP: np.array([0.2, 0.3, 0.1, 0.4, 0.5, 0.6])}
    result = ImportanceResult("sublayer", np.ones((6, 6)), "1 − cos", layer_scores=np.ones(6), sublayer_scores=scores)
    session = Session(spec=ModelSpec("tiny"), info=describe(model, "tiny"), result=result, origin="test")
    view = page.view
    shown = handlers_on(page, stand_in_backend(default_calibration=None)).cut.best_block(session, 2, "paper",
                                                                                        "attention")
    slider, banner, bars, session = shown[view.layer_range], shown[view.banner], shown[view.bars], shown[view.session]
    recipe = session.cut()
    assert recipe.sublayer_drop.attention == (1, 3) and recipe.depth_cut is None
    assert slider["value"] is None and slider["note"] == slot_holds("A", recipe)  # no whole layer cut
    assert "attention dropped in layers 1, 3" in banner and "parameters" in banner
    assert banner == banner_markdown(session)
    assert column_label("A", session.variants()) == "A: no attention 1, 3"
    figure = plots.layer_bar_figure(result, (), {ATTENTION: [1, 3]})
    assert [trace.name for trace in figure.data] == ["attention blocks", "MLP blocks"]
    assert [c == palette.IN_CUT for c in figure.data[0].marker.color] == [False, True, False, True, False, False]
    assert list(figure.data[0].marker.pattern.shape) == ["", "/", "", "/", "", ""]
    assert palette.IN_CUT not in figure.data[1].marker.color
    assert bars is not None


def test_cli_drops_the_lowest_attention_blocks_and_exports_them(tiny_folder, tmp_path, capsys):
    from evaluation import cli as benchmark

    out_dir, export = tmp_path / "out", tmp_path / "dropped"
    code = benchmark.main(["--method", "sublayer", "--num_layers", "2", "--drop", "attention", "--model", tiny_folder,
                           "--task", "arc_easy", "--limit", "2", "--output_folder", str(out_dir),
                           "--export_dir", str(export)])
    err = capsys.readouterr().err
    assert code == 0, err
    config = json.loads((out_dir / "results_sublayer-attention.json").read_text())["config"]
    assert config["removed_layers"] == [] and len(config["dropped_blocks"][ATTENTION]) == 2
    assert config["params_removed_pct"] > 0
    saved = json.loads((export / "config.json").read_text())
    assert [i for i, flag in enumerate(saved["layercut_dropped_attention"]) if flag] == \
        config["dropped_blocks"][ATTENTION]
    assert benchmark.main(["--full", "--drop", "mlp", "--model", tiny_folder]) == 2


def test_a_drop_is_a_compared_column_everywhere(tiny_folder, data_dir):
    """Analysis, generation, speed, memory (smaller KV cache), perplexity and benchmarks through the backend."""
    from evaluation.quality import lm_eval_adapter
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec

    backend, spec = Backend(device="cpu"), ModelSpec(tiny_folder)
    backend.models.load(spec)
    result = backend.analysis.score(spec, "sublayer", calibration=prune.Calibration(n_samples=4, seq_len=32))
    variants = {"A": Recipe.drop(4, attention=result.best_sublayers(ATTENTION, 2)),
                "B": Recipe.drop(4, mlp=result.best_sublayers(MLP, 1))}
    *_, final = backend.measure.generate(spec, variants, "The", max_new_tokens=6)
    assert set(final) == {"original", "A", "B"} and all(side["done"] for side in final.values())
    found = backend.measure.speed(spec, variants, batch_sizes=(1,), prompt_len=8, new_tokens=(3,), repeats=1)
    assert {m.model for m in found} == {"original", "A", "B"}
    sizes = {(m.model, m.name.split(" (")[0]): m.value for m in backend.measure.memory(spec, variants, new_tokens=4)}
    kv = "KV cache after generating"
    assert sizes[("A", kv)] == pytest.approx(sizes[("original", kv)] / 2)
    assert sizes[("B", kv)] == sizes[("original", kv)]
    ppl = backend.measure.perplexity(spec, variants, seq_lens=(32,), bos=(False,), max_windows=2, use_cache=False)
    assert {m.model for m in ppl} == {"original", "A", "B"}
    request = lm_eval_adapter.check_request(["arc_easy"], limit=2, data_dir=data_dir)
    bench = backend.measure.benchmarks(spec, variants, request, batch_size=2, use_cache=False)
    assert {m.model for m in bench} == {"original", "A", "B"}


@pytest.mark.slow
def test_default_model_attention_drop_saves_and_reloads_exactly(default_model, tmp_path):
    """The measured drop on the default model (README): exports, reloads both ways, still answers Paris."""
    model, tokenizer = default_model
    recipe = Recipe.drop(30, attention=[6, 7, 9, 12, 14, 22, 25, 26, 28, 29])
    view = recipe.apply(model)
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                         add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = chat["input_ids"]
    with torch.no_grad():
        answer = view.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert "Paris" in tokenizer.decode(answer[0, ids.shape[1]:])
    target = exports.export(view, tokenizer, recipe, base_name=prune.DEFAULT_MODEL, num_layers=30,
                            target=tmp_path / "attn-drop")
    plain = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    loaded, _ = prune.load_model(str(target))
    torch.testing.assert_close(logits(plain, ids), logits(view, ids), rtol=0, atol=1e-5)
    torch.testing.assert_close(logits(loaded, ids), logits(view, ids), rtol=0, atol=1e-5)
    assert dropped(loaded)[ATTENTION] == list(recipe.steps[0].attention)
    assert memory.kv_cache_bytes(stepwise_logits(loaded, ids, steps=4)[1]) * 3 == \
        memory.kv_cache_bytes(stepwise_logits(plain, ids, steps=4)[1]) * 2
