"""The lm-eval adapter: request checks, the scorer registry, result mapping, and the proof that a
benchmark through the Backend gives exactly what lm-eval's own HFLM gives."""

import pytest

from prune.core.recipe import Recipe

from conftest import tiny_model
from evaluation.quality import lm_eval_adapter as adapter
from evaluation.quality import offline_tasks
from evaluation.serving.backend import Backend
from prune.core.errors import InvalidInput


# ---------------------------------------------------------------- request checks


def test_unknown_tasks_and_bad_limits_are_refused(data_dir):
    with pytest.raises(InvalidInput, match="Unknown task.*nonsense.*supported: hellaswag"):
        adapter.check_request(["arc_easy", "nonsense"], data_dir=data_dir)
    with pytest.raises(InvalidInput, match="No task"):
        adapter.check_request([], data_dir=data_dir)
    with pytest.raises(InvalidInput, match="limit"):
        adapter.check_request(["arc_easy"], limit=0, data_dir=data_dir)


def test_few_shot_offline_is_refused_where_the_pool_is_not_the_hubs(data_dir):
    with pytest.raises(InvalidInput, match="only faithful for arc_easy, arc_challenge, mmlu.*hellaswag, piqa"):
        adapter.check_request(["arc_easy", "hellaswag", "piqa"], num_fewshot=5, data_dir=data_dir)
    assert adapter.check_request(["arc_challenge"], num_fewshot=5, data_dir=data_dir).names == ("arc_challenge",)
    assert adapter.check_request(["hellaswag"], num_fewshot=5, data_dir=None).names == ("hellaswag",)  # online: fine


def test_a_missing_data_folder_is_a_clear_error(tmp_path):
    with pytest.raises(InvalidInput, match="does not exist"):
        adapter.check_request(["arc_easy"], data_dir=tmp_path / "nowhere")


def test_unknown_scorer():
    with pytest.raises(InvalidInput, match="Unknown scorer 'vllm'. Known scorers: fast, hflm"):
        adapter.get_scorer("vllm")


def test_a_registered_scorer_is_used_by_name(data_dir, tiny_tokenizer, monkeypatch):
    built = []

    def make_counting(model, tokenizer, batch_size):
        built.append(batch_size)
        return adapter.make_hflm(model, tokenizer, batch_size)

    monkeypatch.setitem(adapter.SCORERS, "counting", make_counting)
    request = adapter.check_request(["arc_easy"], limit=2, data_dir=data_dir)
    entries = adapter.evaluate(tiny_model("llama", 2), tiny_tokenizer, request, batch_size=3, scorer="counting")
    assert built == [3]
    assert set(entries["arc_easy"]["results"]) >= {"acc,none", "acc_norm,none", "acc_stderr,none"}


# ---------------------------------------------------------------- result mapping


def test_results_map_to_standard_names_with_group_subtasks():
    out = {
        "results": {
            "layercut_mmlu": {"alias": "mmlu", "acc,none": 0.3, "acc_stderr,none": 0.01},
            "layercut_mmlu_humanities": {"alias": " - humanities", "acc,none": 0.25, "acc_stderr,none": 0.02},
            "layercut_mmlu_anatomy": {"alias": "  - anatomy", "acc,none": 0.4, "acc_stderr,none": "N/A"},
        },
        "higher_is_better": {"layercut_mmlu": {"acc": True}},
        "n-samples": {"layercut_mmlu_anatomy": {"original": 135, "effective": 5}},
        "n-shot": {"layercut_mmlu": 0},
    }
    entry = adapter._entries(out, ["mmlu"])["mmlu"]
    assert entry["results"] == {"alias": "mmlu", "acc,none": 0.3, "acc_stderr,none": 0.01}
    assert set(entry["subtasks"]) == {"mmlu_humanities", "mmlu_anatomy"}
    assert entry["subtasks"]["mmlu_anatomy"]["acc_stderr,none"] is None
    assert entry["n-samples"] == {"original": 135, "effective": 5}


def test_measurements_are_percent_for_accuracy_and_keep_lower_is_better():
    entries = {
        "arc_easy": {"results": {"alias": "arc_easy", "acc,none": 0.5, "acc_stderr,none": 0.1, "acc_norm,none": 0.6,
                                 "acc_norm_stderr,none": 0.1},
                     "higher_is_better": {"acc": True, "acc_norm": True}},
        "lambada_openai": {"results": {"perplexity,none": 25.0, "perplexity_stderr,none": 2.0, "acc,none": 0.4,
                                       "acc_stderr,none": None},
                           "higher_is_better": {"perplexity": False, "acc": True}},
    }
    found = {m.name: m for m in adapter.to_measurements(entries, model="pruned")}
    assert (found["arc_easy acc"].value, found["arc_easy acc"].spread, found["arc_easy acc"].unit) == (50.0, 10.0, "%")
    assert found["arc_easy acc_norm"].value == pytest.approx(60.0)
    ppl = found["lambada_openai perplexity"]
    assert (ppl.value, ppl.spread, ppl.unit, ppl.higher_is_better) == (25.0, 2.0, "", False)
    assert found["lambada_openai acc"].spread is None
    assert {m.model for m in found.values()} == {"pruned"}


# ---------------------------------------------------------------- the proof


@pytest.mark.slow
def test_backend_benchmark_equals_lm_eval_hflm_on_the_default_model(default_model, data_dir):
    """arc_easy, 20 examples: the Backend's numbers are exactly HFLM + simple_evaluate's."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    model, tokenizer = default_model
    backend = Backend(data_dir=str(data_dir), device="cpu")
    spec = backend.models.adopt(model, tokenizer)
    cut = {"pruned": Recipe.block(30, 10, 26)}  # a deep cut keeps the pruned side quick
    request = adapter.check_request(["arc_easy"], limit=20, data_dir=data_dir)
    measured = {(m.model, m.name): m for m in backend.measure.benchmarks(spec, cut, request, batch_size=16)}
    ours = backend.measure.benchmark_results(spec, cut, request, batch_size=16)  # the raw numbers, from the cache

    manager, names = offline_tasks.task_manager(["arc_easy"], data_dir=data_dir)
    for side, lm_model in (("original", model), ("pruned", backend.models.model(spec, cut["pruned"]))):
        reference = lm_eval.simple_evaluate(model=HFLM(pretrained=lm_model, tokenizer=tokenizer, batch_size=16),
                                            tasks=names, limit=20, task_manager=manager)
        expected = reference["results"][names[0]]
        got = ours[side]["arc_easy"]["results"]
        for metric in ("acc,none", "acc_norm,none", "acc_stderr,none", "acc_norm_stderr,none"):
            assert got[metric] == expected[metric], (side, metric)
        assert measured[(side, "arc_easy acc")].value == expected["acc,none"] * 100
        assert measured[(side, "arc_easy acc_norm")].value == expected["acc_norm,none"] * 100
        assert reference["n-samples"][names[0]]["effective"] == 20
