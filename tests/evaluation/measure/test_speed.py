"""The speed step times what a deployment runs: under inference mode, the same forwards as a plain greedy loop."""

import torch

from evaluation.measure import speed
from prune.core.kv import cache_passed
from tests.conftest import tiny_model


def _recording(model):
    """Each forward's (input ids, cached positions, inference mode on) in call order."""
    calls = []

    def hook(module, args, kwargs):
        cache = cache_passed(kwargs)
        past = cache.get_seq_length() if cache is not None else 0
        calls.append((kwargs["input_ids"].clone(), past, torch.is_inference_mode_enabled()))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return calls


def test_the_timed_generation_runs_under_inference_mode_and_feeds_the_greedy_tokens_of_an_uncached_loop():
    model = tiny_model("llama")
    assert all(p.requires_grad for p in model.parameters())  # as loaded: what autograd would record through
    calls = _recording(model)
    prompt = torch.tensor([[5, 17, 3, 99, 42, 7]])
    speed._run_once(model, prompt, new_tokens=5)
    calls = list(calls)  # the uncached loop below runs through the hook too
    assert [on for _, _, on in calls] == [True] * 5  # one prefill, then 4 decode steps
    sequence = prompt
    with torch.no_grad():  # the independent route: the whole sequence each step, no cache
        for _ in range(5):
            token = model(input_ids=sequence).logits[:, -1].argmax(-1, keepdim=True)
            sequence = torch.cat([sequence, token], dim=1)
    assert torch.equal(calls[0][0], prompt) and calls[0][1] == 0
    for step, (ids, past, _) in enumerate(calls[1:]):
        assert past == prompt.shape[1] + step  # the cache holds the prompt and every token decoded before
        assert torch.equal(ids, sequence[:, prompt.shape[1] + step:][:, :1])


def test_the_load_time_rate_probe_and_a_single_pass_keep_no_graph():
    model = tiny_model("llama")
    calls = _recording(model)
    speed.probe_rates(model)
    out = speed.one_pass(model, torch.tensor([[1, 2, 3]]))
    assert calls and all(on for _, _, on in calls)
    assert out.logits.grad_fn is None and not out.logits.requires_grad
