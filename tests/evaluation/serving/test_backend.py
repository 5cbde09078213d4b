"""The Backend on a tiny real model: cuts, generation, speed, memory, perplexity, caching, cancellation."""

import math

import pytest
import torch
import transformers

import prune
from conftest import tiny_model
from evaluation.measure import bandwidth, generation, speed
from evaluation.quality import lm_eval_adapter, perplexity
from evaluation.serving.backend import Backend
from evaluation.core.jobs import Cancelled
from evaluation.core.pool import ModelSpec
from prune.core.errors import InvalidCut, InvalidInput
from prune.depth.step import DepthCut
from prune.core.recipe import Recipe
from evaluation.core.jobs import final

CUT = {"pruned": Recipe.block(4, 1, 3)}  # the compared models: original and layers 1–2 removed


def arc(limit, data_dir=None):
    from prune.core.paths import default_data_dir

    return lm_eval_adapter.check_request(["arc_easy"], limit=limit, data_dir=data_dir or default_data_dir())


def _logits(model):
    ids = torch.arange(3, 19).view(1, 16)
    with torch.no_grad():
        return model(input_ids=ids).logits


# ---------------------------------------------------------------- model and cut


def test_bad_comparisons_are_refused_before_any_work(backend, spec):
    with pytest.raises(InvalidInput, match="at most 2"):
        backend.measure.speed(spec, {"A": Recipe.block(4, 0, 1), "B": Recipe.block(4, 1, 2), "C": Recipe.block(4, 2,
                                                                                                               3)})
    with pytest.raises(InvalidInput, match="names the base model"):
        backend.measure.speed(spec, {"original": Recipe.block(4, 0, 1)})
    with pytest.raises(InvalidCut, match="made for a 6-layer model"):
        backend.measure.speed(spec, {"A": Recipe.block(6, 0, 1)}, batch_sizes=(1,), prompt_len=4, new_tokens=(2,),
                              repeats=1)


def test_a_failed_load_loses_nothing(spec, tiny_folder, tmp_path, monkeypatch):
    from prune.core.errors import ModelNotFound, ModelTooLarge

    b = Backend(device="cpu")
    b.models.load(spec)
    loaded = b.models.pool.peek(spec)
    with pytest.raises(ModelNotFound):
        b.models.load(ModelSpec("no-such-org/no-such-model"))
    tiny_model("gpt2", 3).config.save_pretrained(tmp_path)  # .bin weights: it cannot be read layer by layer
    torch.save(tiny_model("gpt2", 3).state_dict(), tmp_path / "pytorch_model.bin")
    real, calls = prune.core.loading.available_memory_bytes, []
    monkeypatch.setattr("prune.core.loading.available_memory_bytes",  # only the new model's check sees no memory
                        lambda device: 1000 if not calls.append(1) and len(calls) == 1 else real(device))
    with pytest.raises(ModelTooLarge):
        b.models.load(ModelSpec(str(tmp_path)))
    assert b.models.pool.loaded() == [spec] and b.models.pool.peek(spec) is loaded  # the loaded model stays, untouched
    assert b.models.model(spec, Recipe.block(4, 0, 1)).config.num_hidden_layers == 3


def test_load_describes_the_model(backend, spec):
    loaded = backend.models.pool.peek(spec)
    info = loaded.info
    assert (info.num_layers, info.device, info.dtype) == (4, "cpu", "float32")
    assert len(info.layer_params) == 4 and info.layer_params[0] == sum(
        p.numel() for p in loaded.model.model.layers[0].parameters())
    assert info.num_params == sum(p.numel() for p in loaded.model.parameters())


def test_recipes_describe_themselves_and_variants_are_cached(backend, spec):
    info = backend.models.load(spec)
    recipe = Recipe.block(4, 1, 3, origin="by hand")
    cut = recipe.depth_cut
    assert cut.layers == (1, 2) and cut.span == (1, 3)
    assert info.removed_params(recipe) == 2 * info.layer_params[0]
    assert recipe.describe() == "layers 1–2 (2 of 4) = block [1, 3)"
    assert Recipe.cut(4, [3, 0]).describe() == "layers 0, 3 (2 of 4)"
    assert recipe == Recipe.block(4, 1, 3) and recipe.key == Recipe.cut(4, [2, 1]).key  # origin is no part of it
    pruned = backend.models.model(spec, recipe)
    assert backend.models.model(spec, Recipe.block(4, 1, 3)) is pruned
    assert pruned.config.layercut == recipe.to_json() and prune.core.recipe.recipe_of(pruned) == recipe
    assert Recipe.from_json(recipe.to_json()) == recipe
    with pytest.raises(InvalidCut):
        Recipe.block(4, 0, 4)
    with pytest.raises(InvalidCut):
        Recipe.cut(4, [7])
    assert DepthCut.block(30, 20, 26).describe() == "layers 20–25 (6 of 30) = block [20, 26)"
    assert DepthCut.block(30, 5, 6).describe() == "layer 5 (1 of 30) = block [5, 6)"


def test_the_original_model_is_never_altered(backend, spec):
    original = backend.models.model(spec)
    before = _logits(original)
    list(backend.measure.generate(spec, CUT, "The cat", max_new_tokens=4))
    backend.measure.speed(spec, CUT, batch_sizes=(1,), prompt_len=4, new_tokens=(2,), repeats=1)
    assert torch.equal(_logits(original), before)
    assert original.config.num_hidden_layers == 4 and backend.models.model(spec,
                                                                           CUT["pruned"]).config.num_hidden_layers == 2
    assert not hasattr(original.config, "layercut")


# ---------------------------------------------------------------- generation


def test_generation_streams_three_models_and_greedy_matches_generate(backend, spec, tiny_tokenizer):
    variants = {**CUT, "B": Recipe.cut(4, [0, 3])}
    states = list(backend.measure.generate(spec, variants, "The quick brown fox", max_new_tokens=12))
    assert len(states) > 1 and list(states[0]) == ["original", "pruned", "B"]
    final = states[-1]
    assert all(s["done"] for s in final.values()) and not all(s["done"] for s in states[0].values())
    assert final["original"]["ttft_s"] > 0
    prompt = torch.tensor([generation.encode_prompt(tiny_tokenizer, "The quick brown fox")])
    for label, recipe in (("original", Recipe()), *variants.items()):
        model = backend.models.model(spec, recipe)
        stops = sorted(generation.stop_ids(model, tiny_tokenizer))
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False,
                             eos_token_id=stops, pad_token_id=stops[0])
        expected = tiny_tokenizer.decode(out[0, prompt.shape[1]:], skip_special_tokens=True)
        assert final[label]["text"] == expected
    timing = generation.measurements(final)
    assert {(m.model, m.name) for m in timing} == {(side, name) for side in ("original", "pruned", "B")
                                                   for name in ("time to first token", "decode speed")}


def test_sampling_is_reproducible_with_a_seed(backend, spec):
    def run(seed):
        return list(backend.measure.generate(spec, CUT, "Once", max_new_tokens=10, temperature=1.0, top_p=0.9,
                                             seed=seed))[-1]

    first = run(3)
    assert run(3)["original"]["text"] == first["original"]["text"]
    assert run(3)["pruned"]["text"] == first["pruned"]["text"]


def test_bad_generation_input_fails_before_streaming(backend, spec):
    with pytest.raises(InvalidInput, match="empty"):
        backend.measure.generate(spec, CUT, "   ")
    with pytest.raises(InvalidInput):
        backend.measure.generate(spec, CUT, "hi", top_p=0)


def test_nucleus_sampling_keeps_only_the_top_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    picks = {int(generation.choose_token(logits, 1.0, 0.7, gen)) for _ in range(200)}
    assert picks == {0, 1}


# ---------------------------------------------------------------- speed and FLOPs


def test_ideal_speedup_by_hand_for_a_tiny_llama():
    model = tiny_model("llama", 4)  # hidden 32, 4 heads of 8, 2 KV heads, MLP 64, vocab 320
    per_layer = 2 * (32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 64)  # q, k, v, o, gate/up/down = 18432
    attention = 4 * 16 * 32  # scores and values at context 16
    head = 2 * 32 * 320
    assert speed.per_token_flops(model, 16) == 4 * (per_layer + attention) + head == 102400
    pruned = prune.cut(model, 1, 3)
    assert speed.per_token_flops(pruned, 16) == 2 * (per_layer + attention) + head
    assert speed.ideal_speedup(model, pruned, 16) == pytest.approx(102400 / 61440)


def test_speed_measures_both_models_with_the_ideal_beside_the_pruned(backend, spec):
    found = backend.measure.speed(spec, CUT, batch_sizes=(1, 2), prompt_len=8, new_tokens=(3,), repeats=2)
    names = {m.name for m in found}
    assert {"prefill latency (batch 2, 8 tokens)", "decode latency per token (batch 1, 3 new)",
            "throughput (batch 2, 3 new)"} <= names
    original = [m for m in found if m.model == "original" and m.group == "speed"]
    pruned = [m for m in found if m.model == "pruned" and m.group == "speed"]
    assert len(original) == len(pruned) == 6
    assert all(m.value > 0 and m.spread >= 0 and len(m.details["samples"]) >= 2 for m in original + pruned)
    limits = [m for m in found if m.group == speed.LIMIT]  # bytes, floor and share per model and batch size
    assert len(limits) == 3 * 2 * 2 and all(m.value > 0 for m in limits)
    for m in pruned:
        ref = next(o for o in original if o.name == m.name)
        ratio = m.details["ideal_speedup"]
        assert 1 < ratio < 2
        assert m.ideal == pytest.approx(ref.value * ratio if m.higher_is_better else ref.value / ratio)
    decode = next(m for m in pruned if m.name.startswith("decode latency per token (batch 1"))
    read = [bandwidth.decode_bytes(backend.models.model(spec, recipe), 8 + 3 / 2) for recipe in (None, CUT["pruned"])]
    assert (decode.details["ideal_by"], decode.details["ideal_speedup"]) == ("bytes", pytest.approx(read[0] / read[1]))
    prefill = next(m for m in pruned if m.name.startswith("prefill latency (batch 1"))
    assert prefill.details["ideal_by"] == "FLOPs"


# ---------------------------------------------------------------- memory


def test_memory_of_both_models(backend, spec):
    found = {(m.model, m.name.split(" (")[0]): m.value for m in backend.measure.memory(spec, CUT, new_tokens=4)}
    removed = backend.models.load(spec).removed_params(CUT["pruned"])
    assert found[("original", "parameters")] - found[("pruned", "parameters")] == removed
    assert found[("pruned", "weight memory")] < found[("original", "weight memory")]
    assert found[("pruned", "checkpoint size on disk")] < found[("original", "checkpoint size on disk")]
    for side in ("original", "pruned"):
        assert found[(side, "peak memory while generating")] >= found[(side, "weight memory")]


# ---------------------------------------------------------------- perplexity


def test_perplexity_windows_follow_the_conventions():
    ids = torch.arange(10)
    assert perplexity.windows(ids, 4, None).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert perplexity.windows(ids, 4, 99).tolist() == [[99, 0, 1, 2], [99, 3, 4, 5], [99, 6, 7, 8]]


def test_perplexity_is_exp_of_the_mean_nll_and_is_cached(backend, spec, monkeypatch):
    calls = []
    real = perplexity.measure_perplexity
    monkeypatch.setattr(perplexity, "measure_perplexity", lambda *a, **k: calls.append(k["label"]) or real(*a, **k))
    found = backend.measure.perplexity(spec, CUT, seq_lens=(32,), bos=(False,), max_windows=3)
    assert [m.model for m in found] == ["original", "pruned"] and len(calls) == 2
    rows = perplexity.wikitext2_rows(backend.models.data_dir)[:60]  # the first windows come from the first rows
    tokenizer = backend.models.pool.peek(spec).tokenizer
    chunks = perplexity.windows(perplexity.token_ids(tokenizer, rows), 32, None)[:3]
    with torch.no_grad():
        logits = backend.models.model(spec)(input_ids=chunks).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), chunks[:, 1:].flatten())
    assert found[0].value == pytest.approx(math.exp(nll.item()), rel=1e-5)
    again = backend.measure.perplexity(spec, {"B": CUT["pruned"]}, seq_lens=(32,), bos=(False,), max_windows=3)
    assert len(calls) == 2 and [m.value for m in again] == [m.value for m in found]
    assert [m.model for m in again] == ["original", "B"]  # the cache keys by recipe; labels are the caller's


def test_bos_windows_are_skipped_for_a_tokenizer_without_bos(backend, spec):
    found = backend.measure.perplexity(spec, {}, seq_lens=(32,), max_windows=1)  # default bos=(False, True)
    assert [m.name for m in found] == ["WikiText-2 perplexity (seq 32)"]
    with pytest.raises(InvalidInput, match="BOS"):
        backend.measure.perplexity(spec, {}, seq_lens=(32,), bos=(True,), max_windows=1)
    with pytest.raises(InvalidInput, match="Sequence lengths"):
        backend.measure.perplexity(spec, {}, seq_lens=(128, 2048))  # the tiny model has 256 positions


# ---------------------------------------------------------------- benchmarks: caching, cancellation


def test_benchmarks_are_cached_and_no_cache_recomputes(backend, spec, monkeypatch, tmp_path):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))  # a cache no other test has written to
    calls = []
    real = lm_eval_adapter.evaluate
    monkeypatch.setattr(lm_eval_adapter, "evaluate", lambda *a, **k: calls.append(list(a[2].names)) or real(*a, **k))
    first = backend.measure.benchmarks(spec, CUT, arc(3), batch_size=4)
    assert len(calls) == 2  # original and pruned
    assert {m.name for m in first} == {"arc_easy acc", "arc_easy acc_norm"}
    assert {m.model for m in first} == {"original", "pruned"}
    assert backend.measure.benchmarks(spec, CUT, arc(3), batch_size=4) == first and len(calls) == 2
    backend.measure.benchmarks(spec, CUT, arc(3), batch_size=4, use_cache=False)
    assert len(calls) == 4


def test_cancel_stops_a_benchmark(backend, spec):
    def cancel_at_first_report(fraction, message):
        backend.cancel("visitor-1")

    with pytest.raises(Cancelled):
        backend.measure.benchmarks(spec, CUT, arc(2), batch_size=2, use_cache=False, progress=cancel_at_first_report,
                                   owner="visitor-1")
    assert not backend.models.jobs.busy()
    assert backend.measure.benchmarks(spec, CUT, arc(2), batch_size=2, owner="visitor-1")  # the next job runs normally


def test_cancel_stops_generation_between_tokens_and_only_the_owners(backend, spec):
    mine = backend.measure.generate(spec, CUT, "The", max_new_tokens=50, owner="visitor-1")
    theirs = backend.measure.generate(spec, CUT, "The", max_new_tokens=20, owner="visitor-2")
    next(mine)
    next(theirs)
    backend.cancel("visitor-1")
    with pytest.raises(Cancelled):
        list(mine)
    assert all(state["done"] for state in list(theirs)[-1].values())  # the other visitor's job went on


def test_a_rank_search_streams_its_points_and_leaves_the_searched_model_cached(backend, spec):
    from evaluation.serving.training import RankSearchDone
    from prune.lowrank.step import Decompose

    items = list(backend.training.rank_search(spec, criterion="wikitext2", tolerance=1.0, limit=10, layers=[3],
                                              owner="v1"))
    first, *points, done = items
    assert isinstance(done, RankSearchDone) and first.layer == -1 and len(points) == 7
    assert [p.layer for p in points] == [3] * 7 and points[-1].test == done.result.test[1]
    assert done.result.ranks and done.result.params[1] < done.result.params[0]
    step = Decompose.of("feature", ranks=done.result.ranks, calibration=backend.models.default_calibration,
                        sequential=False)
    assert done.recipe == Recipe((step,))
    assert backend.models.model(spec, done.recipe) is done.result.model  # cached: comparisons find it built
    rebuilt = done.recipe.apply(backend.models.pool.get(spec).model, backend.models.pool.get(spec).tokenizer)
    assert torch.equal(_logits(rebuilt), _logits(done.result.model))
    assert not backend.models.jobs.busy()


def _stops_for_its_owner_and_when_abandoned(backend, start):
    """`start()` begins a streamed job of visitor v1 that yields at least three times."""
    mine = start()
    next(mine)
    backend.cancel("v2")  # someone else's Stop
    next(mine)
    backend.cancel("v1")
    with pytest.raises(Cancelled):
        list(mine)
    assert not backend.models.jobs.busy()
    abandoned = start()
    next(abandoned)
    assert backend.models.jobs.busy("v1")
    abandoned.close()  # the page went away: the job ends and the device is free
    assert not backend.models.jobs.busy()


def test_a_rank_search_stops_for_its_owner_and_when_abandoned(backend, spec):
    _stops_for_its_owner_and_when_abandoned(backend, lambda: backend.training.rank_search(
        spec, space="weight", criterion="wikitext2", limit=10, layers=[2, 3], owner="v1"))


def _heal_step(steps=3):
    from prune.core.calibration import BUILTIN_TEXTS
    from prune.healing.step import Heal

    text = BUILTIN_TEXTS[0].read_text()[:6000]
    return Heal.of("last_layers", steps=steps, text=text, seq_len=32, batch=2, heldout=2, eval_every=1, layers=1)


def test_healing_streams_each_steps_loss_and_caches_the_healed_model_beside_the_unhealed(backend, spec):
    from evaluation.serving.training import HealDone
    from evaluation.serving.training import LossPoint

    unhealed = backend.models.model(spec, CUT["pruned"])
    before = {n: t.clone() for n, t in unhealed.state_dict().items()}
    *points, done = list(backend.training.heal(spec, CUT["pruned"], _heal_step(), owner="v1"))
    assert isinstance(done, HealDone) and all(isinstance(p, LossPoint) for p in points)
    assert [p.step for p in points] == [0, 1, 2, 3] and all(p.heldout is not None for p in points)
    assert done.recipe == CUT["pruned"].then(_heal_step()) and done.record["method"] == "last_layers"
    healed = backend.models.model(spec, done.recipe)  # cached: comparisons find it built
    assert healed is not unhealed and backend.models.model(spec, CUT["pruned"]) is unhealed
    assert all(torch.equal(before[n], t) for n, t in unhealed.state_dict().items())  # the unhealed stays as it was
    assert not torch.equal(_logits(healed), _logits(unhealed)) and not backend.models.jobs.busy()


def test_healing_stops_for_its_owner_and_when_abandoned(backend, spec):
    _stops_for_its_owner_and_when_abandoned(backend, lambda: backend.training.heal(spec, CUT["pruned"], _heal_step(200),
                                                                           owner="v1"))
    with pytest.raises(InvalidInput, match="heal"):
        backend.training.heal(spec, Recipe(), _heal_step())  # healing the original is refused at once


# ---------------------------------------------------------------- analysis and export


def test_analysis_shares_prune_score_cache_and_keeps_the_residual(backend, spec, monkeypatch, tmp_path):
    from prune.depth.methods import METHODS, context

    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))  # an empty disk cache, whatever ran before
    calls, residuals = [], []
    for name in ("angular", "block_influence"):
        real = METHODS[name]
        monkeypatch.setitem(METHODS, name, prune.depth.methods.Method(
            real.name, real.label, lambda ctx, _f=real.func, **o: calls.append(1) or _f(ctx, **o), real.description))
    real_stream = context.residual_streams
    monkeypatch.setattr(context, "residual_streams", lambda *a, **k: residuals.append(1) or real_stream(*a, **k))
    first = backend.analysis.score(spec, "angular")
    backend.analysis.score(spec, "block_influence")
    assert len(calls) == 2 and len(residuals) == 1  # one residual stream for both methods
    again = prune.score(backend.models.model(spec), backend.models.pool.peek(spec).tokenizer, "angular",
                        calibration=backend.models.default_calibration)  # the same disk cache
    assert len(calls) == 2
    assert first.best_block(2) == again.best_block(2)


def test_export_saves_the_recipe_and_refuses_the_original(backend, spec, tmp_path):
    with pytest.raises(InvalidInput, match="cut"):
        backend.exports.write(spec, Recipe(), tmp_path / "nothing")
    saved = backend.exports.write(spec, CUT["pruned"], tmp_path / "my-cut")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(saved)
    assert reloaded.config.num_hidden_layers == 2 and prune.core.recipe.recipe_of(reloaded) == CUT["pruned"]
    assert torch.allclose(_logits(reloaded), _logits(backend.models.model(spec, CUT["pruned"])))


def test_fast_scorer_reuses_the_original_prefix_and_equals_hflm(backend, spec, monkeypatch, tmp_path):
    """The default scorer pairs original and cut (the cut resumes from the original's states)."""
    from evaluation.quality import reuse

    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path))
    pairs = []
    real = reuse.make_fast_pair
    monkeypatch.setattr(reuse, "make_fast_pair", lambda *a, **k: pairs.append(a[2:4]) or real(*a, **k))
    fast = backend.measure.benchmark_results(spec, CUT, arc(4), batch_size=4)
    assert pairs == [(1, 3)]
    reference = backend.measure.benchmark_results(spec, CUT, arc(4), batch_size=4, scorer="hflm")
    for side in ("original", "pruned"):
        for metric in ("acc,none", "acc_norm,none"):
            assert fast[side]["arc_easy"]["results"][metric] == reference[side]["arc_easy"]["results"][metric]


def test_several_base_models_stay_loaded_within_the_budget(tmp_path, tiny_tokenizer):
    folders = []
    for arch in ("llama", "gpt2", "opt"):
        folder = tmp_path / arch
        tiny_model(arch, 2).save_pretrained(folder)
        tiny_tokenizer.save_pretrained(folder)
        folders.append(ModelSpec(str(folder)))
    roomy = Backend(device="cpu")
    for spec in folders:
        roomy.models.load(spec)
    assert roomy.models.pool.loaded() == folders  # every visitor's model stays
    one_model = roomy.models.pool.peek(folders[0]).info.weight_bytes
    tight = Backend(device="cpu", model_budget_bytes=int(2.5 * one_model))
    for spec in folders:
        tight.models.load(spec)
    assert tight.models.pool.loaded() == folders[1:]  # the least recently used went first
    tight.models.load(folders[1])  # used again: now the most recent
    tight.models.load(folders[0])  # loaded again on demand
    assert tight.models.pool.loaded() == [folders[1], folders[0]]


def test_a_sweep_reports_a_failing_method_and_ranks_the_others(backend, spec, monkeypatch):
    from prune.core.errors import OutOfMemory

    real = backend.analysis.score

    def analyze(spec_, method, **kwargs):
        if method == "taylor":
            raise OutOfMemory("Out of memory during the Taylor+ analysis: try a smaller model or fewer windows.")
        return real(spec_, method, **kwargs)

    monkeypatch.setattr(backend.analysis, "score", analyze)
    report = final(backend.sweeps.cuts(spec, arc(3), 1, methods=["angular", "taylor", "block_influence"], batch_size=4))
    assert set(report.agreement) == {"angular", "block_influence"} and list(report.failed) == ["taylor"]
    assert "Out of memory" in report.failed["taylor"] and len(report.scores["angular"]) == 4
