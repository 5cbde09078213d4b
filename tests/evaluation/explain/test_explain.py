"""Explaining a cut: KL and agreement by hand, resuming equals running the cut model, the logit lens,
first divergence, cancellation, and the backend's calls beside other visitors and jobs."""

import json
import math
import threading

import pytest
import torch
import torch.nn.functional as F

from conftest import tiny_model
from evaluation.explain import agreement, cut as explain
from evaluation.cli import main as cli
from evaluation.core.jobs import Cancelled, device_lock
from evaluation.explain.logit_lens import kept_layers, logit_lens
from prune.core.architectures import decoder_layers, final_norm
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify

IDS = torch.randint(0, 320, (2, 24), generator=torch.Generator().manual_seed(0))  # [N, T]


def _full(recipe, model, ids=IDS):
    with torch.no_grad():
        return recipe.apply(model)(input_ids=ids, use_cache=False).logits


# ---------------------------------------------------------------- the arithmetic


def test_kl_and_agreement_by_hand():
    p, q = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[0.9, 0.1, 0.0]])
    kl = agreement.kl_divergence(p.log(), q.log())
    assert kl.item() == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel=1e-5)
    assert agreement.kl_divergence(q.log(), p.log()).item() == pytest.approx(
        0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5), rel=1e-5)  # not symmetric: the original is p
    assert agreement.kl_divergence(p.log(), p.log()).item() == 0.0  # zero-probability tokens add 0, not NaN
    logits = torch.randn(3, 5, 11)
    kl, agree = agreement.compare(agreement.Reference.of(logits), logits + 2.0)  # a shift changes nothing
    assert torch.allclose(kl, torch.zeros(3, 5), atol=1e-6) and agree.all()
    other = logits.clone()
    other[1, 2] = -other[1, 2]  # its argmax moves
    _, agree = agreement.compare(agreement.Reference.of(logits), other)
    assert agree.sum() == 14 and not agree[1, 2]


def test_first_divergence_on_constructed_pairs():
    prompt = [5, 6, 7]
    assert agreement.first_divergence(prompt + [1, 2, 3], prompt + [1, 2, 3], 3) is None
    assert agreement.first_divergence(prompt + [1, 2, 3], prompt + [1, 9, 3], 3) == 1
    assert agreement.first_divergence(prompt + [1, 2, 3], prompt + [4, 2, 3], 3) == 0
    assert agreement.first_divergence(prompt + [1, 2, 3], prompt + [1], 3) == 1  # it stopped where the original went on
    assert agreement.first_divergence(prompt, prompt + [1], 3) == 0
    with pytest.raises(InvalidInput, match="same prompt"):
        agreement.first_divergence(prompt + [1], [5, 6, 8, 1], 3)


def test_resume_layer_is_the_first_layer_a_recipe_changes():
    assert explain.resume_layer(Recipe(), 6) == 6
    assert explain.resume_layer(Recipe.block(6, 2, 4), 6) == 2
    assert explain.resume_layer(Recipe.cut(6, [4, 1]), 6) == 1
    assert explain.resume_layer(Recipe.drop(6, attention=[3], mlp=[5]), 6) == 3
    cut_then_drop = Recipe.block(6, 0, 2).then(Recipe.drop(4, mlp=[1]).steps[0])  # layer 1 of the cut is original 3
    assert explain.resume_layer(cut_then_drop, 6) == 0
    assert explain.resume_layer(Recipe.block(6, 3, 5).then(Recipe.drop(4, mlp=[0]).steps[0]), 6) == 0
    assert explain.resume_layer(Recipe.block(6, 4, 6).then(Sparsify.of("magnitude", 0.5)), 6) is None


# ---------------------------------------------------------------- resuming from the original's states


def test_the_empty_cut_has_kl_zero_and_full_agreement():
    states = explain.States(tiny_model("llama", 4), IDS)
    found = explain.feedback(states, Recipe())
    assert found.kl == 0.0 and found.agreement_pct == 100.0 and found.resumed_at == 4
    assert found.perplexity == found.original_perplexity and found.tokens == 2 * 23


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen2"])
@pytest.mark.parametrize("recipe", [Recipe.block(6, 2, 4), Recipe.cut(6, [1, 4]), Recipe.block(6, 4, 6),
                                    Recipe.block(6, 0, 3), Recipe.drop(6, attention=[2], mlp=[3])],
                         ids=["contiguous", "scattered", "tail", "head", "drop"])
def test_resuming_equals_a_full_forward_of_the_cut_model(arch, recipe):
    model = tiny_model(arch, 6)
    states = explain.States(model, IDS)
    logits, at = states.logits(recipe)
    assert at == explain.resume_layer(recipe, 6)
    full, original = _full(recipe, model), _full(Recipe(), model)
    torch.testing.assert_close(logits, full, rtol=1e-5, atol=1e-5)
    found = explain.feedback(states, recipe)
    kl = agreement.kl_divergence(original[:, :-1], full[:, :-1])
    nll = F.cross_entropy(full[:, :-1].flatten(0, 1), IDS[:, 1:].flatten())
    agree = (original[:, :-1].argmax(-1) == full[:, :-1].argmax(-1)).float().mean()
    assert found.kl == pytest.approx(kl.mean().item(), rel=1e-4, abs=1e-7)
    assert found.perplexity == pytest.approx(math.exp(nll.item()), rel=1e-5)
    assert found.agreement_pct == pytest.approx(100 * agree.item())
    assert found.original_perplexity == pytest.approx(
        math.exp(F.cross_entropy(original[:, :-1].flatten(0, 1), IDS[:, 1:].flatten()).item()), rel=1e-5)


def test_a_recipe_that_changes_every_layer_runs_whole():
    model = tiny_model("llama", 4)
    recipe = Recipe.block(4, 1, 2).then(Sparsify.of("magnitude", 0.5))
    states = explain.States(model, IDS)
    with pytest.raises(ValueError, match="cannot resume"):
        states.logits(recipe)
    variant = recipe.apply(model)
    found = explain.feedback(states, recipe, variant)
    assert found.resumed_at is None and not found.resumed
    full = _full(Recipe(), variant)
    torch.testing.assert_close(states.logits(recipe, variant)[0], full)
    expected = agreement.kl_divergence(_full(Recipe(), model)[:, :-1], full[:, :-1]).mean().item()
    assert found.kl == pytest.approx(expected, rel=1e-4)


def test_resuming_never_touches_the_original_and_ignores_its_hooks():
    model = tiny_model("llama", 4)
    before = _full(Recipe(), model)
    numbers = lambda found: (found.kl, found.agreement_pct, found.perplexity)  # noqa: E731
    alone = numbers(explain.feedback(explain.States(model, IDS), Recipe.block(4, 1, 3)))

    def foreign(*_):  # another job's hook on a shared module (fast_lm stops its passes at the head like this)
        raise RuntimeError("a hook of another job ran")

    handles = [model.lm_head.register_forward_pre_hook(foreign),
               decoder_layers(model)[3].register_forward_hook(foreign)]
    try:
        assert numbers(explain.feedback(explain.States(model, IDS), Recipe.block(4, 1, 3))) == alone
        assert len(model.lm_head._forward_pre_hooks) == 1 and len(decoder_layers(model)[0]._forward_pre_hooks) == 0
    finally:
        for handle in handles:
            handle.remove()
    torch.testing.assert_close(_full(Recipe(), model), before, rtol=0, atol=0)


def test_a_computation_stops_at_the_next_layer_when_cancelled():
    states = explain.States(tiny_model("llama", 6), IDS)
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:
            raise Cancelled("Cancelled: a newer cut.")

    with pytest.raises(Cancelled):
        explain.feedback(states, Recipe.block(6, 1, 2), check=check)
    assert len(calls) == 2  # layer 2 of the original checked, then nothing more ran
    explainer = explain.Explainer()
    older = explainer.ticket("visitor A", lambda: None)
    other = explainer.ticket("visitor B", lambda: None)
    newer = explainer.ticket("visitor A", lambda: None)
    with pytest.raises(Cancelled, match="newer cut"):
        older()
    newer()
    other()  # another visitor's request is never superseded by A's


# ---------------------------------------------------------------- the logit lens


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_logit_lens_reads_each_layer_and_ends_at_the_models_prediction(arch, tiny_tokenizer):
    model = tiny_model(arch, 4)
    ids = IDS[0].tolist()
    lens = logit_lens(model, tiny_tokenizer, ids, last=None)
    assert lens.layers == (None, 0, 1, 2, 3) and lens.row_labels[0] == "embeddings" and lens.start == 0
    assert len(lens.positions) == len(ids) and all(len(row) == len(ids) for row in lens.token_ids)
    logits = _full(Recipe(), model, torch.tensor([ids]))[0]  # [T, V]
    assert list(lens.token_ids[-1]) == logits.argmax(-1).tolist()
    assert lens.probs[-1] == pytest.approx(torch.softmax(logits, -1).max(-1).values.tolist(), rel=1e-5)
    with torch.no_grad():  # the first row: the embeddings' output through the final norm and the head
        embedded = model.get_input_embeddings()(torch.tensor([ids]))
        if arch == "gpt2":
            embedded = embedded + model.transformer.wpe(torch.arange(len(ids)))[None]
        first = model.get_output_embeddings()(final_norm(model)(embedded))[0]
    assert list(lens.token_ids[0]) == first.argmax(-1).tolist()
    assert all(0 < p <= 1 for row in lens.probs for p in row)
    tail = logit_lens(model, tiny_tokenizer, ids, last=5)
    assert tail.start == len(ids) - 5 and tail.token_ids == tuple(row[-5:] for row in lens.token_ids)


def test_the_compressed_lens_is_labelled_with_the_layers_it_kept(tiny_tokenizer):
    model, recipe = tiny_model("llama", 6), Recipe.cut(6, [1, 2, 4])
    assert kept_layers(recipe, 6) == [0, 3, 5] and kept_layers(Recipe.drop(6, mlp=[2]), 6) == list(range(6))
    cut = recipe.apply(model)
    lens = logit_lens(cut, tiny_tokenizer, IDS[1].tolist(), layers=kept_layers(recipe, 6), marked=[4, 1, 2])
    assert lens.layers == (None, 0, 3, 5) and lens.marked == (1, 2, 4)
    assert list(lens.token_ids[-1]) == _full(Recipe(), cut, IDS[1:])[0, -24:].argmax(-1).tolist()


# ---------------------------------------------------------------- the backend (conftest's `backend`: the tiny model)

SLICE = Calibration(n_samples=4, seq_len=32)  # the built-in text (the feedback slice takes 2 × 128 of it)


def test_backend_feedback_resumes_caches_and_equals_the_library(backend, spec):
    cut = Recipe.block(4, 1, 3)
    found = backend.explain.cut_feedback(spec, cut, calibration=SLICE, use_cache=False)
    base = backend.models.pool.peek(spec)
    ids = token_windows(base.tokenizer, explain.feedback_slice(SLICE))
    assert ids.shape == (explain.FEEDBACK_WINDOWS, explain.FEEDBACK_SEQ_LEN)
    alone = explain.feedback(explain.States(base.model, ids), cut)
    assert (found.kl, found.agreement_pct, found.perplexity, found.resumed_at) == \
        (alone.kl, alone.agreement_pct, alone.perplexity, 1)
    assert backend.explain.cut_feedback(spec, Recipe(), calibration=SLICE, use_cache=False).kl == 0.0
    first = backend.explain.cut_feedback(spec, cut, calibration=SLICE)
    again = backend.explain.cut_feedback(spec, cut, calibration=SLICE)
    assert again.cached and not first.cached and again.kl == first.kl and again.seconds == 0.0
    whole = backend.explain.cut_feedback(spec, Recipe.block(4, 1, 2).then(Sparsify.of("magnitude", 0.5)),
                                         calibration=SLICE,
                                 use_cache=False)  # built and run whole, under the device lock
    assert whole.resumed_at is None and whole.kl > 0 and whole.tokens == found.tokens
    assert backend.explain.cut_feedback(spec, cut, calibration=SLICE, windows=3, seq_len=16,
                                        use_cache=False).tokens == 3 * 15
    rows = {(m.name, m.model): m.value for m in found.measurements("A")}
    assert rows[("top-1 agreement", "original")] == 100.0 and rows[("KL from the original", "A")] == found.kl


def test_two_visitors_feedback_beside_a_long_job_do_not_change_each_others_numbers(backend, spec):
    recipes = {"A": Recipe.block(4, 0, 2), "B": Recipe.cut(4, [1, 3])}
    alone = {who: backend.explain.cut_feedback(spec, r, calibration=SLICE, use_cache=False) for who,
             r in recipes.items()}
    found, errors = {}, []

    def visitor(who):
        try:
            for _ in range(3):
                found.setdefault(who, []).append(
                    backend.explain.cut_feedback(spec, recipes[who], calibration=SLICE, use_cache=False, owner=who))
        except Exception as err:  # reported below
            errors.append(err)

    lock = device_lock(backend.models.device)
    lock.acquire()  # a visitor's long job holds the device: feedback on a cut does not wait for it
    try:
        threads = [threading.Thread(target=visitor, args=(who,)) for who in recipes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
    finally:
        lock.release()
    assert not errors
    for who, results in found.items():
        assert {(r.kl, r.agreement_pct, r.perplexity) for r in results} == \
            {(alone[who].kl, alone[who].agreement_pct, alone[who].perplexity)}


def test_a_newer_release_cancels_the_same_visitors_older_one(backend, spec):
    outcome = {}

    def release(name, recipe, owner="visitor"):
        try:
            outcome[name] = backend.explain.cut_feedback(spec, recipe, calibration=SLICE, use_cache=False, owner=owner)
        except Cancelled as err:
            outcome[name] = err

    backend.explain.explainer._turn.acquire()  # another feedback is running
    try:
        older = threading.Thread(target=release, args=("older", Recipe.block(4, 0, 1)))
        older.start()
        while not backend.models.jobs.busy("visitor"):
            older.join(0.01)
        other = threading.Thread(target=release, args=("other", Recipe.block(4, 2, 3), "someone else"))
        newer = threading.Thread(target=release, args=("newer", Recipe.block(4, 1, 2)))
        other.start()
        newer.start()
        older.join(timeout=10)
        assert isinstance(outcome.get("older"), Cancelled)  # left the queue while the lock was still held
    finally:
        backend.explain.explainer._turn.release()
    newer.join(timeout=60)
    other.join(timeout=60)
    assert outcome["newer"].resumed_at == 1 and outcome["other"].resumed_at == 2


def test_divergence_marks_where_answers_part_and_the_kl_strip(backend, spec):
    variants = {"same": Recipe(), "cut": Recipe.block(4, 1, 3)}
    report = backend.explain.divergence(spec, variants, "The quick brown fox", max_new_tokens=8)
    answer = list(report.answer_ids)
    assert len(answer) == len(report.answer_tokens) and 0 < len(answer) <= 8
    same, cut = report.columns["same"], report.columns["cut"]
    assert same.first is None and same.agreement_pct == 100.0 and set(same.kl) == {0.0}
    assert len(cut.kl) == len(cut.agree) == len(answer) and cut.resumed_at == 1
    states = list(backend.measure.generate(spec, {"cut": variants["cut"]}, "The quick brown fox", max_new_tokens=8))
    own = states[-1]["cut"]["token_ids"]
    prompt = list(report.prompt_ids)
    assert cut.first == agreement.first_divergence(prompt + answer, prompt + own, len(prompt))
    model = backend.models.model(spec, variants["cut"])  # the strip, teacher-forced, by a plain forward of both models
    ids = torch.tensor([prompt + answer])
    kl = agreement.kl_divergence(_full(Recipe(), backend.models.model(spec), ids), _full(Recipe(), model, ids))
    assert cut.kl == pytest.approx(kl[0, len(prompt) - 1: -1].tolist(), rel=1e-4, abs=1e-7)
    made_up = answer[:2] + [(answer[2] + 1) % 320] + answer[3:] if len(answer) > 2 else answer + [1]
    told = backend.explain.divergence(spec, variants, "The quick brown fox", max_new_tokens=8, answers={"cut": made_up})
    assert told.columns["cut"].first == min(2, len(answer))
    decode = backend.models.pool.get(spec).tokenizer.decode  # the column's own text, split where it leaves the original
    first = told.columns["cut"].first
    assert told.columns["cut"].parts == (decode(made_up[:first], skip_special_tokens=True),
                                         decode(made_up[first:], skip_special_tokens=True))
    assert same.parts[1] == "" and same.parts[0] == decode(answer, skip_special_tokens=True)
    assert "agrees on" in cut.caption()


def test_backend_logit_lens_of_the_original_and_a_cut(backend, spec):
    lenses = backend.explain.logit_lens(spec, {"A": Recipe.block(4, 1, 3)}, "The cat sat", last=4)
    assert list(lenses) == ["original", "A"]
    assert lenses["original"].layers == (None, 0, 1, 2, 3) and lenses["original"].marked == (1, 2)
    assert lenses["A"].layers == (None, 0, 3) and lenses["A"].positions == lenses["original"].positions


# ---------------------------------------------------------------- the command line


def test_cli_explain_prints_agreement_and_kl_without_tasks(tiny_folder, tmp_path, capsys):
    code = cli(["--personalized", "--start_block", "1", "--end_block", "2", "--model", tiny_folder, "--explain",
                "--output_folder", str(tmp_path), "--no_cache"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "personalized: layers 1–2 (2 of 4)" in out and "agrees on" in out and "resumed from layer 1" in out
    assert "| top-1 agreement |" in out and "| KL from the original |" in out
    saved = json.loads((tmp_path / "explain.json").read_text())
    assert saved["cuts"]["personalized"]["resumed_at"] == 1 and saved["slice"]["windows"] == explain.FEEDBACK_WINDOWS
    assert not list(tmp_path.glob("results_*.json"))  # no task ran
    code = cli(["--full", "--model", tiny_folder, "--explain", "--output_folder", str(tmp_path)])
    assert code == 2 and "--explain compares" in capsys.readouterr().err
