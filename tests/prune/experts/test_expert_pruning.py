"""Expert pruning: REAP's saliency and its baselines equal the authors' formulas computed here by an independent route
(transformers' own experts module run with one expert a token), the lowest experts go with their router rows and
every count, an expert no token is routed to goes without changing a logit, and the step is a recipe step like any
(recorded, counted before building, compounded with int8, exported and reloaded)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

import prune
from prune.core.architectures import decoder_layers, layer_config
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.core.sizes import size_of
from prune.core.step import from_json, to_json
from prune.experts.merging import merge_statistics
from prune.experts.removal import kept_experts
from prune.experts.saliency import expert_saliency
from prune.experts.step import ExpertPrune, refusal
from evaluation.serving.variants import estimated_bytes, own_bytes
from tiny_architectures import tiny

CAL = Calibration(n_samples=4, seq_len=32)
IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])


def by_hand(model, tokenizer, layer: int) -> dict[str, torch.Tensor]:
    """REAP's statistics of one layer, computed as the authors' observer does: each expert's own output from
    transformers' experts module given that expert alone with weight 1, the routing weights renormalised over the
    token's top-k, means over the routed tokens."""
    experts = decoder_layers(model)[layer].mlp.experts
    seen = []
    handle = experts.register_forward_pre_hook(lambda _m, args: seen.append((args[0], args[1], args[2])))
    with torch.no_grad():
        model(token_windows(tokenizer, CAL), use_cache=False)
    handle.remove()
    hidden = torch.cat([h.reshape(-1, h.shape[-1]) for h, _, _ in seen])
    chosen = torch.cat([c.reshape(-1, c.shape[-1]) for _, c, _ in seen])
    weights = torch.cat([w.reshape(-1, w.shape[-1]) for _, _, w in seen]).float()
    gates = weights / weights.sum(-1, keepdim=True)
    count = torch.zeros(4, dtype=torch.float64)
    reap, norm, gate = count.clone(), count.clone(), count.clone()
    for e in range(4):
        routed = (chosen == e).any(-1)
        alone = torch.full((int(routed.sum()), 1), e)
        with torch.no_grad():
            out = experts(hidden[routed], alone, torch.ones(len(alone), 1))  # transformers' own forward, weight 1
        g = (gates * (chosen == e)).sum(-1)[routed].double()
        n = out.norm(dim=-1).double()
        count[e], reap[e], norm[e], gate[e] = routed.sum(), (g * n).mean(), n.mean(), g.mean()
    return {"reap": reap, "frequency": count / count.sum(), "ean": norm, "gate": gate}


@pytest.mark.parametrize("model_type", ["mixtral", "gpt_oss"])  # gpt-oss: transposed stacks with biases
def test_reap_and_its_baselines_are_the_authors_formulas_and_choose_the_same_experts(model_type, tiny_tokenizer):
    model = tiny(model_type)
    expected = by_hand(model, tiny_tokenizer, 0)
    for method, values in expected.items():
        found = expert_saliency(model, tiny_tokenizer, method, CAL)[0]
        torch.testing.assert_close(found, values, rtol=1e-4, atol=1e-7)
        assert kept_experts({0: found}, 0.5) == kept_experts({0: values}, 0.5)
    shuffled = expert_saliency(model, tiny_tokenizer, "random", seed=1)
    assert set(shuffled) == {0, 1, 2, 3} and torch.equal(shuffled[0], expert_saliency(model, None, "random",
                                                                                     seed=1)[0])


@pytest.mark.parametrize("model_type", ["mixtral", "gpt_oss"])
def test_merging_averages_each_group_by_frequency_into_the_kept_expert_of_the_nearest_mean_output(model_type,
                                                                                              tiny_tokenizer):
    model = tiny(model_type)
    experts = decoder_layers(model)[0].mlp.experts
    seen = []
    handle = experts.register_forward_pre_hook(lambda _m, args: seen.append(args[:2]))
    with torch.no_grad():
        model(token_windows(tiny_tokenizer, CAL), use_cache=False)
    handle.remove()
    hidden = torch.cat([h.reshape(-1, h.shape[-1]) for h, _ in seen])
    chosen = torch.cat([c.reshape(-1, c.shape[-1]) for _, c in seen])
    frequency = torch.tensor([float((chosen == e).sum()) for e in range(4)]) / chosen.numel()
    with torch.no_grad():  # every expert on every token, by transformers' own forward with weight 1
        mean = torch.stack([experts(hidden, torch.full((len(hidden), 1), e), torch.ones(len(hidden), 1)).mean(0)
                            for e in range(4)])
    found_frequency, found_mean = merge_statistics(model, tiny_tokenizer, CAL)[0]
    torch.testing.assert_close(found_frequency.float(), frequency)
    torch.testing.assert_close(found_mean.float(), mean, rtol=1e-4, atol=1e-6)

    kept = sorted(torch.sort(frequency, stable=True).indices[2:].tolist())  # the two most frequent stay
    group = {k: [k] for k in kept}
    for gone in set(range(4)) - set(kept):
        group[min(kept, key=lambda k: float((mean[k] - mean[gone]).norm()))].append(gone)
    merged = ExpertPrune.of("merge", 0.5, CAL).apply(model, tiny_tokenizer)
    mine = decoder_layers(merged)[0].mlp
    for name, stack in experts.named_parameters():
        expected = torch.stack([sum(frequency[m] * stack[m] for m in group[k]) / frequency[group[k]].sum()
                                for k in kept])
        torch.testing.assert_close(getattr(mine.experts, name), expected, rtol=1e-5, atol=1e-6)
    router = decoder_layers(model)[0].mlp.router if model_type == "gpt_oss" else decoder_layers(model)[0].mlp.gate
    found_router = mine.router if model_type == "gpt_oss" else mine.gate
    assert torch.equal(found_router.weight, router.weight[kept]) and layer_config(merged).num_local_experts == 2
    assert merged(IDS).logits.isfinite().all() and experts.gate_up_proj.shape[0] == 4  # the original untouched


def test_the_lowest_experts_go_first_and_ties_take_the_earlier_expert():
    scores = {0: torch.tensor([0.3, 0.1, 0.1, 0.9]), 1: torch.tensor([0.0, 0.5, 0.2, 0.4])}
    assert kept_experts(scores, 0.5) == {0: [0, 3], 1: [1, 3]}
    assert kept_experts(scores, 0.3) == {0: [0, 2, 3], 1: [1, 2, 3]}  # int(4 · 0.3) = 1 a layer; the tie: 1 goes


def test_an_expert_no_token_is_routed_to_goes_without_changing_a_logit(tiny_tokenizer):
    model = tiny("gpt_oss")  # its routers have biases: expert 2 is never chosen in any layer
    for layer in decoder_layers(model):
        layer.mlp.router.bias.data[2] = -1e4
    scores = expert_saliency(model, tiny_tokenizer, "reap", CAL)
    assert all(float(score[2]) == 0.0 for score in scores.values())  # never routed: saliency 0, the first to go
    pruned = ExpertPrune.of("reap", 0.25, CAL).apply(model, tiny_tokenizer)
    for layer in decoder_layers(pruned):
        assert layer.mlp.experts.gate_up_proj.shape[0] == 3 and layer.mlp.router.weight.shape[0] == 3
        assert layer.mlp.router.bias.shape == (3,) and layer.mlp.experts.num_experts == 3
    assert layer_config(pruned).num_local_experts == 3 and layer_config(model).num_local_experts == 4
    with torch.no_grad():
        torch.testing.assert_close(pruned(IDS).logits, model(IDS).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3", "lfm2_moe"])  # a score-correction bias; LFM2's
def test_a_pruned_model_saves_and_reloads_with_its_counts_and_its_logits(model_type, tmp_path, tiny_tokenizer):
    model = tiny(model_type)
    pruned = ExpertPrune.of("frequency", 0.5, CAL).apply(model, tiny_tokenizer)
    pruned.save_pretrained(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    counts = {p.shape[0] for layer in decoder_layers(back) for name, p in layer.named_parameters()
              if name.endswith("experts.gate_up_proj")}
    assert counts == {2}
    with torch.no_grad():
        torch.testing.assert_close(back(IDS).logits, pruned(IDS).logits)
    assert all(p.shape[0] == 4 for layer in decoder_layers(model) for name, p in layer.named_parameters()
               if name.endswith("experts.gate_up_proj"))  # the original untouched


def test_the_step_is_recorded_counted_before_building_and_compounds_with_int8(tiny_tokenizer):
    model = tiny("mixtral")
    step = ExpertPrune.of("reap", 0.5, CAL)
    assert from_json(to_json(step)) == step and step.short() == "reap −50% experts"
    assert "REAP expert pruning, 50 % of each layer's experts removed" in step.describe()
    built = Recipe((step,)).apply(model, tiny_tokenizer)
    assert step.resize(size_of(model)) == size_of(built)  # parameters and matrices by arithmetic
    assert estimated_bytes(model, Recipe((step,))) == own_bytes(built, model)
    both = Recipe((step, prune.Quantize.of(8))).apply(model, tiny_tokenizer)
    stacks = [p for layer in decoder_layers(both) for name, p in layer.named_parameters() if "experts." in name]
    assert stacks and all(type(p).__name__ == "PackedExperts" and p.shape[0] == 2 for p in stacks)


def test_what_cannot_be_pruned_is_refused_in_one_line(tiny_tokenizer):
    from conftest import tiny_model

    dense = tiny_model("llama", 2)
    assert refusal(dense) is None  # a dense model's line names no family it never could use
    assert refusal(tiny("jetmoe")).startswith("This model has no experts that LayerCut reads")
    with pytest.raises(InvalidInput, match="^This model has no experts"):
        ExpertPrune.of("reap", 0.25, CAL).apply(dense, tiny_tokenizer)
    for wrong in (0.95, -0.1, True, "half"):
        with pytest.raises(InvalidInput, match="share of experts removed"):
            ExpertPrune.of("reap", wrong)
    with pytest.raises(prune.LayerCutError, match="Unknown expert saliency"):
        ExpertPrune.of("magic", 0.25)
