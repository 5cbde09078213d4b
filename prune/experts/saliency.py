"""Which experts matter: each expert's saliency on calibration text, from one pass over the unpruned model, every layer
(as REAP's observer records it: Lasby et al. 2025, "REAP the Experts: Why Pruning Prevails for One-Shot MoE
Compression", arXiv 2510.13999; CerebrasResearch/reap, ``observer.py``).

For expert j of a layer and the tokens X_j the router sent to it:

* ``reap``: S_j = (1/|X_j|) Σ_{x∈X_j} g_j(x) · ‖f_j(x)‖₂ — g_j the router's weight for j renormalised over the
  token's top-k (their ``renormalize_router_weights``), f_j(x) the expert's own output, before the routing weight;
* ``frequency``: |X_j| (their ``expert_frequency``; shown as the share of the layer's tokens);
* ``ean``: the mean ‖f_j(x)‖₂ over X_j (their ``ean_mean``, expert activation norm);
* ``gate``: the mean renormalised g_j(x) over X_j (their ``weighted_expert_frequency_sum`` / |X_j|);
* ``random``: a seeded draw, the baseline.

As their code: every statistic over the routed tokens only; an expert no token reached scores 0 and is pruned first.
On purpose unlike it: g is read from the weights transformers passes to the experts, renormalised over the top-k. For a
softmax router this equals their renormalised softmax; for a sigmoid router (DeepSeek-V3, GLM-4.5) it is the
renormalised sigmoid, where their observer softmaxes the router logits.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable

import torch
from torch import nn

from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.devices import input_device
from prune.core.errors import InvalidInput, UnknownMethod, quoted
from prune.core.experts import driven, expert_forward_inputs, expert_stacks_of, experts_modules, routed
from prune.core.hidden import forward_inputs, run_until_stopped, stop_forward

METHODS = {"reap": "REAP", "frequency": "frequency", "ean": "activation norm", "gate": "mean gate",
           "random": "random"}
Progress = Callable[[float, str], object]
# The statistics read per model (weakly held) and (text, weights' state): the expert heatmap's pass, then every
# criterion and keep fraction built from it without a second pass. The state: each parameter's storage and version.
_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_READ_LOCK = threading.Lock()


def check_method(method: str) -> str:
    if method not in METHODS:
        raise UnknownMethod(f"Unknown expert saliency {quoted(method)}. Choose one of: {', '.join(METHODS)}.")
    return method


def moe_layers(model: nn.Module) -> dict[int, nn.Module]:
    """{layer index: its experts module} for the layers whose experts transformers' interface drives; a one-line
    refusal where there are none (a dense model, or experts LayerCut cannot read)."""
    found = {}
    for index, layer in enumerate(decoder_layers(model)):
        mine = [module for module in experts_modules(layer).values() if driven(module)]
        if len(mine) > 1:
            raise InvalidInput(f"Layer {index} holds {len(mine)} experts modules: expert pruning reads one a layer.")
        if mine:
            found[index] = mine[0]
    if not found:
        raise InvalidInput("This model has no experts that LayerCut reads: expert pruning applies to a mixture of "
                           "experts whose experts transformers' experts interface drives.")
    return found


@torch.no_grad()
def expert_saliency(model: nn.Module, tokenizer, method: str, calibration: Calibration | None = None, *,
                    seed: int = 0, batch_size: int = 8, progress: Progress | None = None) -> dict[int, torch.Tensor]:
    """{layer index: [E] float64 saliency of each expert} for every layer with experts, from one pass of
    ``calibration`` (None: the built-in text) through ``model`` (``random`` reads no data)."""
    layers = moe_layers(model)
    if check_method(method) == "random":
        draw = torch.Generator().manual_seed(seed)
        return {i: torch.rand(expert_stacks_of(m)[0].count, generator=draw, dtype=torch.float64)
                for i, m in layers.items()}
    return from_statistics(statistics(model, tokenizer, calibration, batch_size=batch_size, progress=progress),
                           method)


def from_statistics(found: dict[int, torch.Tensor], method: str) -> dict[int, torch.Tensor]:
    """{layer: [E] saliency by ``method``} from :func:`statistics`."""
    return {i: _finished(sums, method) for i, sums in found.items()}


def _key(model: nn.Module, kind: str, calibration: Calibration, batch_size: int) -> tuple:
    state = tuple((p.data_ptr(), p._version) for p in model.parameters())
    return kind, json.dumps(calibration.key(), sort_keys=True), batch_size, state


def held(model: nn.Module, kind: str, calibration: Calibration, batch_size: int = 8):
    """What a pass of ``kind`` ("saliency", "merging") read from ``model`` on ``calibration``, if it is held."""
    with _READ_LOCK:
        return _READ.get(model, {}).get(_key(model, kind, calibration, batch_size))


def remember(model: nn.Module, calibration: Calibration, found, batch_size: int = 8, kind: str = "saliency") -> None:
    """Hold ``found`` (a pass of ``kind`` over ``model`` on ``calibration``, e.g. :func:`statistics` from a disk
    cache) for the builds after it."""
    with _READ_LOCK:
        _READ.setdefault(model, {})[_key(model, kind, calibration, batch_size)] = found


def read_calibration(model: nn.Module, tokenizer, calibration: Calibration, hooks: dict[nn.Module, Callable],
                     batch_size: int, progress: Progress | None, what: str) -> None:
    """One pass of ``calibration``'s windows through ``model`` with ``hooks`` (experts module → forward pre-hook
    taking kwargs) on, ``batch_size`` windows at a time."""
    if tokenizer is None:
        raise InvalidInput(f"{what} reads the calibration text: it needs the model's tokenizer.")
    handles = [module.register_forward_pre_hook(hook, with_kwargs=True) for module, hook in hooks.items()]
    if (head := model.get_output_embeddings()) is not None:  # the experts' inputs are all it reads: no logits
        handles.append(head.register_forward_pre_hook(stop_forward))
    windows = token_windows(tokenizer, calibration).to(input_device(model))
    try:
        for done, batch in enumerate(windows.split(batch_size)):
            run_until_stopped(model, **forward_inputs(model, batch), use_cache=False)
            if progress is not None:
                progress((done + 1) * batch_size / len(windows), f"{what}: calibration windows read")
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def statistics(model: nn.Module, tokenizer, calibration: Calibration | None = None, *, batch_size: int = 8,
               progress: Progress | None = None) -> dict[int, torch.Tensor]:
    """Per layer with experts, the [4, E] sums every criterion reads — tokens routed, Σ‖f‖, Σ g, Σ g·‖f‖ — from one
    pass of ``calibration``, or the pass already made on these weights and text."""
    calibration = calibration or Calibration()
    layers = moe_layers(model)
    if (found := held(model, "saliency", calibration, batch_size)) is not None:
        return found
    sums = {i: torch.zeros(4, expert_stacks_of(m)[0].count, dtype=torch.float64) for i, m in layers.items()}
    read_calibration(model, tokenizer, calibration, {m: _recorder(sums[i]) for i, m in layers.items()}, batch_size,
                     progress, "Expert saliency")
    remember(model, calibration, sums, batch_size)
    return sums


def expert_outputs(module: nn.Module, hidden: torch.Tensor, chosen: torch.Tensor, every: set[int] | None = None):
    """(expert, its own output f(x) before the routing weight, float32) for each expert some token chose, on its
    routed tokens (``every``: those experts on every token)."""
    down = expert_stacks_of(module)[1]
    rows, bias = down.rows(), down.bias()  # once: a quantized or offloaded stack is read whole
    for expert, _, h in expert_forward_inputs(module, hidden.float(), chosen, every):
        out = nn.functional.linear(h, rows[expert].float(), None if bias is None else bias[expert].float())
        yield expert, module.post_expert_norm(out) if module.has_post_expert_norm else out


def _recorder(sums: torch.Tensor):
    """A pre-hook adding, per expert, [tokens routed, Σ‖f‖, Σ g, Σ g·‖f‖] of one call into ``sums`` [4, E]."""
    def hook(module, args, kwargs):
        hidden, chosen, weights = routed(args, kwargs)
        gates = weights.float() / weights.float().sum(-1, keepdim=True)  # renormalised over the token's top-k
        for expert, out in expert_outputs(module, hidden, chosen):
            norms = out.norm(dim=-1).double()
            mine = chosen == expert
            g = (gates * mine).sum(-1)[mine.any(-1)].double()
            sums[:, expert] += torch.stack([torch.tensor(float(len(norms)), dtype=torch.float64), norms.sum(),
                                            g.sum(), (g * norms).sum()])
    return hook


def _finished(sums: torch.Tensor, method: str) -> torch.Tensor:
    """One layer's saliency from its sums: means over each expert's routed tokens, 0 for an expert none reached."""
    count, norm, gate, weighted = sums
    per = count.clamp(min=1)
    return {"reap": weighted / per, "frequency": count / count.sum().clamp(min=1), "ean": norm / per,
            "gate": gate / per}[method]
