"""A mixture of experts' expert weights, found by what they are: transformers 5 keeps a layer's experts as stacked
3-D parameters (Mixtral's and Qwen3-MoE's ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I]; gpt-oss's
transposed, with biases), not as ``nn.Linear``s, so code that walks ``nn.Linear`` never sees them.

A family that changes matrices and does not handle them refuses a model that has them, in one line that says how much
of the model they are (:func:`experts_refusal`): a report that said "every matrix" while the experts were skipped
would describe a model that was not built.
"""

from __future__ import annotations

from torch import nn

from prune.core.architectures import decoder_layers, layer_config
from prune.core.errors import UnsupportedArchitecture
from prune.core.structure import expert_parameters


def decoder_experts(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The stacked experts of the model's decoder layers (a vision tower's 3-D tensors are not experts)."""
    return expert_parameters(decoder_layers(model))


def experts_refusal(model: nn.Module, what: str) -> str | None:
    """None for a model without stacked experts, else one line: ``what`` does not reach them yet, and the share of
    the model's parameters they hold."""
    found = decoder_experts(model)
    if not found:
        return None
    share = sum(p.numel() for _, p in found) / max(1, sum(p.numel() for p in model.parameters()))
    return (f"{what} does not reach a mixture of experts' expert weights yet: {len(found)} expert tensors hold "
            f"{100 * share:.0f} % of this model's parameters. Cut layers or drop blocks instead.")


def refuse_experts(model: nn.Module, what: str) -> None:
    """Raise :func:`experts_refusal`'s line for a model with stacked experts."""
    if (why := experts_refusal(model, what)) is not None:
        raise UnsupportedArchitecture(why)


TOP_K_FIELDS = ("num_experts_per_tok", "moe_topk", "top_k", "num_activated_experts")  # what configs call k


def experts_per_token(model: nn.Module) -> int | None:
    """How many experts a token is routed to (k of top-k), from the config; None where it names none."""
    config = layer_config(model)
    return next((int(v) for f in TOP_K_FIELDS if isinstance(v := getattr(config, f, None), int) and v > 0), None)


def expert_read_shares(model: nn.Module) -> dict[int, float]:
    """{data_ptr of a stacked expert tensor: the share of it one token reads}: k of its E experts (batch 1, top-k
    routing); empty for a dense model or a config that names no k."""
    k = experts_per_token(model)
    if k is None:
        return {}
    return {p.data_ptr(): min(1.0, k / p.shape[0]) for _, p in decoder_experts(model) if p.device.type != "meta"}
