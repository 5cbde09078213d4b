"""A mixture of experts whose experts were learned: the default model's MLPs split into experts (MoEfication, Zhang et
al. 2022, "MoEfication: Transformer Feed-forward Layers are Mixtures of Experts"), for expert pruning's tests and
figures — random experts have no saliency worth ranking.

    .venv/bin/python -m benchmarks.learned_moe [--experts 16] [--top_k 8] [--ppl_windows 64]

Each layer's MLP (SwiGLU, 1,536 channels) is cut into ``experts`` groups of channels that fire together on the
calibration text (MoEfication's co-activation split: balanced k-means of the channels' activation magnitudes over the
tokens); expert j is the SwiGLU of its channels, so the sum of every expert equals the MLP exactly. A router is fit
on the calibration tokens to rank the experts by the norm of their output (MoEfication fits its router to predict the
experts whose activations are largest): a linear map, trained by soft-target cross-entropy. The model becomes a
transformers Mixtral (softmax router, top-k renormalised): its expert down projections are scaled by k so that
k renormalised gates of about 1/k add each chosen expert as the MLP did, and a per-layer router temperature is chosen
on the calibration tokens to minimise the MLP output's error (on this model it is the flattest tried: a dense MLP adds
every channel at weight 1, so near-uniform gates fit it best, and REAP's gate factor then barely differs between
experts). Nothing is trained end to end. Calibration: WikiText-2 validation, 64 windows of 128 tokens (there is no
training split); perplexity: WikiText-2 test, against the default model. The folder is built once into LayerCut's
models cache (about two minutes on 2 cores). Writes ``benchmarks/results/learned_moe.json``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import torch
import transformers
from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows

TEMPERATURES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)  # of the router's logits, tried per layer
ROUTER_STEPS = 200
EXPERTS, TOP_K = 16, 8  # a layer's experts, and a token's
CALIBRATION_WINDOWS = 64  # × 128 tokens of the calibration text
PPL_LEN = 128
VERSION = 1  # of the recipe: a new one builds a new folder


@torch.no_grad()
def mlp_inputs(model: nn.Module, windows: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the MLP's inputs [tokens, hidden] on ``windows`` (float32)."""
    found: list[list[torch.Tensor]] = [[] for _ in decoder_layers(model)]
    hooks = [layer.mlp.register_forward_pre_hook(lambda m, args, i=i: found[i].append(args[0].flatten(0, 1).float()))
             for i, layer in enumerate(decoder_layers(model))]
    try:
        for batch in windows.split(8):
            model(input_ids=batch, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return [torch.cat(x) for x in found]


def channel_groups(activations: torch.Tensor, experts: int, seed: int = 0, rounds: int = 6) -> torch.Tensor:
    """[channels] expert of each channel: balanced k-means (equal groups) of the channels' activation magnitudes
    ``activations`` [tokens, channels], each channel's profile normalised to unit length."""
    profiles = nn.functional.normalize(activations.abs().T, dim=1)  # [channels, tokens]
    channels = len(profiles)
    size = channels // experts
    draw = torch.Generator().manual_seed(seed)
    centres = profiles[torch.randperm(channels, generator=draw)[:experts]]
    for _ in range(rounds):
        similarity = profiles @ centres.T  # [channels, experts]
        chosen, room = [-1] * channels, [size] * experts
        for flat in torch.argsort(similarity.flatten(), descending=True).tolist():  # best pairs first, capped
            channel, expert = divmod(flat, experts)
            if chosen[channel] < 0 and room[expert] > 0:
                chosen[channel], room[expert] = expert, room[expert] - 1
        groups = torch.tensor(chosen)
        centres = nn.functional.normalize(torch.stack([profiles[groups == e].mean(0) for e in range(experts)]), dim=1)
    return groups


@torch.enable_grad()
def fit_router(inputs: torch.Tensor, importance: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """[experts, hidden] router weights whose softmax matches each token's experts' share of ``importance``
    [tokens, experts] (soft-target cross-entropy, Adam, full batch)."""
    torch.manual_seed(seed)
    weight = nn.Parameter(torch.zeros(importance.shape[1], inputs.shape[1]))
    inputs, importance = inputs.detach(), importance.detach()
    target = importance / importance.sum(-1, keepdim=True)
    optimiser = torch.optim.Adam([weight], lr=1e-2)
    for _ in range(ROUTER_STEPS):
        optimiser.zero_grad()
        loss = -(target * torch.log_softmax(inputs @ weight.T, -1)).sum(-1).mean()
        loss.backward()
        optimiser.step()
    return weight.detach()


def routed_output(outputs: torch.Tensor, logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """The Mixtral layer's output from every expert's output [tokens, experts, hidden] and the router's ``logits``:
    the top-k by softmax, their probabilities renormalised."""
    probs = logits.softmax(-1)
    value, index = probs.topk(top_k, -1)
    value = value / value.sum(-1, keepdim=True)
    return (outputs.gather(1, index[..., None].expand(-1, -1, outputs.shape[-1])) * value[..., None]).sum(1)


@torch.no_grad()
def _split_layer(dense: nn.Module, sparse: nn.Module, x: torch.Tensor, experts: int, top_k: int,
                 seed: int) -> float:
    """Layer ``dense``'s MLP split into ``sparse``'s experts and router; the routed output's squared error on the
    calibration tokens ``x``, as a share of the MLP output's energy."""
    gate, up, down = dense.gate_proj.weight.float(), dense.up_proj.weight.float(), dense.down_proj.weight.float()
    channels = nn.functional.silu(x @ gate.T) * (x @ up.T)  # [tokens, 1536]
    groups = channel_groups(channels, experts, seed)
    order = [torch.nonzero(groups == e).flatten() for e in range(experts)]
    sparse.experts.gate_up_proj.copy_(torch.stack([torch.cat([gate[o], up[o]]) for o in order]))
    sparse.experts.down_proj.copy_(torch.stack([down[:, o] for o in order]) * top_k)
    outputs = torch.stack([channels[:, o] @ down[:, o].T for o in order], 1)  # [tokens, experts, hidden]
    router = fit_router(x, outputs.norm(dim=-1), seed)
    truth = channels @ down.T
    errors = {t: (routed_output(outputs * top_k, x @ router.T / t, top_k) - truth).square().mean().item()
              for t in TEMPERATURES}
    best = min(errors, key=errors.get)
    sparse.gate.weight.copy_(router / best)
    return errors[best] / truth.square().mean().item()



def moefy(model: nn.Module, tokenizer, calibration: Calibration, experts: int = EXPERTS, top_k: int = TOP_K,
          seed: int = 0) -> nn.Module:
    """The default (Llama) ``model`` as a transformers Mixtral of ``experts`` experts a layer, ``top_k`` a token,
    learned on ``calibration``; ``model`` is untouched."""
    windows = token_windows(tokenizer, calibration)
    inputs = mlp_inputs(model, windows)
    source = model.config
    config = transformers.MixtralConfig(
        vocab_size=source.vocab_size, hidden_size=source.hidden_size,
        intermediate_size=source.intermediate_size // experts,
        num_hidden_layers=source.num_hidden_layers, num_attention_heads=source.num_attention_heads,
        num_key_value_heads=source.num_key_value_heads, head_dim=source.head_dim, hidden_act=source.hidden_act,
        max_position_embeddings=source.max_position_embeddings, rms_norm_eps=source.rms_norm_eps,
        rope_parameters=dict(source.rope_parameters), tie_word_embeddings=source.tie_word_embeddings,
        num_local_experts=experts, num_experts_per_tok=top_k, sliding_window=None,
        bos_token_id=source.bos_token_id, eos_token_id=source.eos_token_id, pad_token_id=source.pad_token_id)
    moe = transformers.MixtralForCausalLM(config).eval()
    state = {k: v for k, v in model.state_dict().items() if ".mlp." not in k}
    missing = moe.load_state_dict(state, strict=False).missing_keys
    assert all(".mlp." in k for k in missing), missing
    moe.layercut_errors = [_split_layer(dense.mlp, sparse.mlp, inputs[index], experts, top_k, seed)
                           for index, (dense, sparse) in enumerate(zip(decoder_layers(model), decoder_layers(moe)))]
    moe.layercut_name = f"SmolLM2-135M-MoEfied-{experts}x{top_k}"
    return moe


def folder(data_dir: str | None, experts: int = EXPERTS, top_k: int = TOP_K) -> Path:
    """A saved transformers folder of the learned MoE (built once, then read from LayerCut's models cache): the
    default model split into ``experts`` experts, ``top_k`` a token, learned on WikiText-2 validation in ``data_dir``
    (else the built-in text)."""
    import prune
    from prune.core.calibration import default_calibration
    from prune.core.paths import cache_root

    calibration = replace(default_calibration(data_dir), n_samples=CALIBRATION_WINDOWS, seq_len=128)
    name = f"smollm2-moefied-{experts}x{top_k}-{calibration.source}-v{VERSION}"
    path = cache_root() / "models" / name  # beside the dequantized default: kept by test and benchmark caches
    if (path / "config.json").is_file():
        return path
    model, tokenizer = prune.load_model()
    started = time.perf_counter()
    moe = moefy(model, tokenizer, calibration, experts, top_k)
    seconds = time.perf_counter() - started
    partial = path.with_name(path.name + ".partial")
    moe.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    (partial / "learned_moe.json").write_text(json.dumps({"seconds": seconds, "errors": moe.layercut_errors}))
    partial.rename(path)
    return path


def main() -> None:
    from benchmarks import harness
    from benchmarks.record import write_result
    from evaluation.quality.perplexity import mean_nll, token_ids, wikitext2_rows, windows

    parser = harness.parser(__doc__, "data_dir", "ppl_windows")
    parser.add_argument("--experts", type=int, default=EXPERTS)
    parser.add_argument("--top_k", type=int, default=TOP_K)
    args = parser.parse_args()
    import prune
    from prune.core.paths import default_data_dir

    data_dir = args.data_dir or default_data_dir()
    path = folder(data_dir, args.experts, args.top_k)
    made = json.loads((path / "learned_moe.json").read_text())
    dense, tokenizer = prune.load_model()
    moe, _ = prune.load_model(str(path))
    chunks = windows(token_ids(tokenizer, wikitext2_rows(data_dir)), PPL_LEN, None)[: args.ppl_windows]
    columns = {}
    for label, model in (("default model (dense)", dense), (f"learned MoE ({args.experts} experts, {args.top_k} a "
                                                            "token)", moe)):
        nll, tokens = mean_nll(model, chunks)
        columns[label] = {"WikiText-2 test perplexity": round(math.exp(nll), 2), "tokens": tokens}
    columns[next(iter(reversed(columns)))]["build seconds"] = round(made["seconds"], 1)
    write_result("learned_moe", {"columns": columns, "layer_errors": made["errors"],
                                 "ppl_windows": len(chunks), "ppl_seq_len": PPL_LEN},
                 how="each MLP's channels split into experts by balanced k-means of their activation magnitudes on "
                     "WikiText-2 validation, a router fit to rank the experts by output norm (MoEfication)",
                 model="SmolLM2-135M-Instruct → Mixtral")


if __name__ == "__main__":
    main()
