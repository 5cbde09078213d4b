"""A mixture of experts' expert weights, found by what they are: transformers 5 keeps a layer's experts as stacked
3-D parameters (Mixtral's and Qwen3-MoE's ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I]; gpt-oss's
transposed, [E, H, 2I] and [E, I, H], with biases), not as ``nn.Linear``s, so code that walks ``nn.Linear`` never
sees them.

An experts module that transformers' experts interface drives (``@use_experts_implementation``: it says whether its
stacks are transposed, biased, gated) is understood: :func:`expert_stacks` gives its stacks as :class:`ExpertStack`,
each expert's matrix readable as [outputs, inputs] like an ``nn.Linear``'s weight, and :func:`routed_inputs` gives
each expert's inputs on calibration text, the tokens the router sent to it. One that it does not drive (Llama 4's,
JetMoE's) is refused by the families that change matrices, in one line (:func:`experts_refusal`): a report that said
"every matrix" while the experts were skipped would describe a model that was not built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from prune.core.architectures import decoder_layers, layer_config
from prune.core.errors import UnsupportedArchitecture
from prune.core.offload import weight_of
from prune.core.storage import dense, parts
from prune.core.structure import expert_parameters


@dataclass(frozen=True)
class ExpertStack:
    """One stacked parameter of an experts module (``gate_up_proj``, ``up_proj`` or ``down_proj``), at ``path`` in
    its decoder layer."""

    path: str  # "mlp.experts.gate_up_proj"
    module: nn.Module
    name: str  # "gate_up_proj"

    @property
    def weight(self) -> torch.Tensor:
        return getattr(self.module, self.name)

    @property
    def transposed(self) -> bool:
        """Stored [E, inputs, outputs] (gpt-oss) rather than [E, outputs, inputs]."""
        return bool(self.module.is_transposed)

    @property
    def count(self) -> int:
        return self.weight.shape[0]

    @property
    def shape(self) -> tuple[int, int]:
        """One expert's (outputs, inputs)."""
        _, first, second = self.weight.shape
        return (second, first) if self.transposed else (first, second)

    def bias(self) -> torch.Tensor | None:
        """[E, outputs], or None."""
        return getattr(self.module, f"{self.name}_bias", None) if self.module.has_bias else None

    def rows(self) -> torch.Tensor:
        """Every expert's matrix as [E, outputs, inputs] (a quantized stack dequantized, an offloaded one read from its
        file; a view where it can be)."""
        weight = dense(weight_of(self.module, self.name).detach())
        return weight.transpose(1, 2) if self.transposed else weight

    def set_rows(self, rows: torch.Tensor) -> None:
        """Give the module (a clone's own) a new float stack from [E, outputs, inputs] values, stored as it was."""
        old = self.weight
        value = rows.transpose(1, 2) if self.transposed else rows
        self.set(nn.Parameter(value.to(old.dtype).contiguous(), requires_grad=False))

    def set(self, value: nn.Parameter) -> None:
        setattr(self.module, self.name, value)

    def expert_path(self, expert: int) -> str:
        """How a report names one expert's matrix: 'mlp.experts.gate_up_proj[3]'."""
        return f"{self.path}[{expert}]"


def driven(module: nn.Module) -> bool:
    """Whether transformers' experts interface drives ``module`` (it then says how its stacks are laid out)."""
    return all(hasattr(module, flag) for flag in ("is_transposed", "has_bias", "has_gate"))


def experts_modules(layer: nn.Module) -> dict[str, nn.Module]:
    """The experts modules of one decoder layer by path: those holding stacked 3-D parameters."""
    holders = {name.rpartition(".")[0] for name, _ in expert_parameters(layer)}
    return {name: module for name, module in layer.named_modules() if name in holders}


def expert_stacks(layer: nn.Module) -> list[ExpertStack]:
    """The stacks of one layer's driven experts modules: the gated (or plain) up projection, then the down one."""
    return [ExpertStack(f"{path}.{name}" if path else name, module, name)
            for path, module in experts_modules(layer).items() if driven(module) for name in _stack_names(module)]


def routers(layer: nn.Module) -> set[int]:
    """Ids of the ``nn.Linear`` routers of one layer (a module named ``gate`` or ``router``, or inside one, with one
    output per expert): what chooses the experts, kept in float as llm-compressor's MoE recipes keep ``mlp.gate``."""
    counts = {stack.count for stack in expert_stacks(layer)}
    return {id(m) for name, m in layer.named_modules() if isinstance(m, nn.Linear) and m.out_features in counts
            and {"gate", "router"} & set(name.split("."))}


def decoder_experts(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The stacked experts of the model's decoder layers (a vision tower's 3-D tensors are not experts)."""
    return expert_parameters(decoder_layers(model))


def experts_refusal(model: nn.Module, what: str, reaches: bool = False) -> str | None:
    """None where ``what`` can run: a model without stacked experts, or (``reaches``: the family handles the experts
    transformers' interface drives) one whose experts are all driven. Else one line: what is not reached, and the
    share of the model's parameters it holds."""
    missed = [m for layer in decoder_layers(model) for m in experts_modules(layer).values()
              if not (reaches and driven(m))]
    if not missed:
        return None
    share = 100 * sum(p.numel() for m in missed for p in m.parameters(recurse=False) if p.dim() >= 3) / max(
        1, sum(p.numel() for p in model.parameters()))
    if reaches:
        kinds = ", ".join(sorted({type(m).__name__ for m in missed}))
        return (f"{what} does not reach the experts of {kinds} ({share:.0f} % of this model's parameters): "
                "transformers' experts interface does not drive them, so LayerCut cannot tell how they are laid out. "
                "Cut layers or drop blocks instead.")
    return (f"{what} does not reach a mixture of experts' expert weights yet: they hold {share:.0f} % of this "
            "model's parameters. Cut layers, drop blocks, sparsify or quantize instead.")


def refuse_experts(model: nn.Module, what: str, reaches: bool = False) -> None:
    """Raise :func:`experts_refusal`'s line where it has one."""
    if (why := experts_refusal(model, what, reaches)) is not None:
        raise UnsupportedArchitecture(why)


TOP_K_FIELDS = ("num_experts_per_tok", "moe_topk", "top_k", "num_activated_experts")  # what configs call k


def experts_per_token(model: nn.Module) -> int | None:
    """How many experts a token is routed to (k of top-k), from the config; None where it names none."""
    config = layer_config(model)
    return next((int(v) for f in TOP_K_FIELDS if isinstance(v := getattr(config, f, None), int) and v > 0), None)


def expert_read_shares(model: nn.Module) -> dict[int, float]:
    """{data_ptr of each plain tensor behind a stacked expert parameter (a quantized stack's integers and scales):
    the share of it one token reads}: k of its E experts (batch 1, top-k routing); empty for a dense model or a
    config that names no k."""
    k = experts_per_token(model)
    if k is None:
        return {}
    return {part.data_ptr(): min(1.0, k / p.shape[0]) for _, p in decoder_experts(model) for part in parts(p)
            if part.device.type != "meta"}


# ---------------------------------------------------------------- what reaches each expert


def routed(args: tuple, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An experts module's call → (hidden states [tokens, D], the chosen experts [tokens, k], their routing weights
    [tokens, k]): every driven module is called (hidden states, expert indices, routing weights), by position or by
    name."""
    values = [*args, *kwargs.values()]
    hidden = values[0].reshape(-1, values[0].shape[-1])
    return hidden, values[1].reshape(hidden.shape[0], -1), values[2].reshape(hidden.shape[0], -1)


def expert_forward_inputs(module: nn.Module, hidden: torch.Tensor, chosen: torch.Tensor, every: set[int] | None = None):
    """For each expert that some token chose (``every``: for these experts, every token, as if routed to them):
    (expert, its inputs [n, D], its down projection's inputs [n, I]), with the module's weights as they are now."""
    up = expert_stacks_of(module)[0]
    rows, bias = up.rows(), up.bias()  # once: a quantized or offloaded stack is read whole
    for expert in sorted(every) if every is not None else torch.unique(chosen).tolist():
        if not 0 <= expert < up.count:
            continue  # an expert-parallel sentinel
        x = hidden if every is not None else hidden[(chosen == expert).any(-1)]
        h = nn.functional.linear(x, rows[expert].float(), None if bias is None else bias[expert].float())
        yield expert, x, module._apply_gate(h) if module.has_gate else module.act_fn(h)


def expert_stacks_of(module: nn.Module) -> list[ExpertStack]:
    """The stacks of one driven experts module (paths relative to it): up (gated or plain), then down."""
    return [ExpertStack(name, module, name) for name in _stack_names(module)]


def _stack_names(module: nn.Module) -> tuple[str, str]:
    """A driven experts module's stacked parameters, as transformers' experts interface names them."""
    return ("gate_up_proj" if module.has_gate else "up_proj", "down_proj")


def routed_inputs(layer: nn.Module, reduce: Callable[[torch.Tensor], torch.Tensor], found: dict[str, torch.Tensor],
                  every: dict[str, set[int]] | None = None) -> list:
    """Forward pre-hooks on the layer's driven experts modules that add ``reduce`` of each expert's inputs (float32,
    the tokens routed to it) into ``found`` under :meth:`ExpertStack.expert_path`; ``every`` ({experts module path:
    experts}): instead, of every token for those experts only. The caller removes the handles. An expert no token
    reached is absent."""
    def add(key: str, value: torch.Tensor):
        found[key] = found[key] + value if key in found else value

    def hook_for(path: str):
        def hook(module, args, kwargs):
            hidden, chosen, _ = routed(args, kwargs)
            up, down = expert_stacks_of(module)
            mine = None if every is None else every[path]
            for expert, x, h in expert_forward_inputs(module, hidden.detach().float(), chosen, mine):
                add(f"{path}.{up.name}[{expert}]", reduce(x))
                add(f"{path}.{down.name}[{expert}]", reduce(h.float()))
        return hook

    return [module.register_forward_pre_hook(hook_for(path), with_kwargs=True)
            for path, module in experts_modules(layer).items() if driven(module) and (every is None or path in every)]


def unreached(layer: nn.Module, found: dict[str, torch.Tensor]) -> dict[str, set[int]]:
    """{experts module path: the experts} of the layer that have no entry in ``found`` (no token was routed to)."""
    missing = {}
    for path, module in experts_modules(layer).items():
        if driven(module):
            up = expert_stacks_of(module)[0]
            if lost := {e for e in range(up.count) if f"{path}.{up.name}[{e}]" not in found}:
                missing[path] = lost
    return missing
