"""A mixture of experts' stacked experts in int8 or int4, each expert multiplied by PyTorch's CPU kernels.

transformers 5 keeps a layer's experts as 3-D parameters (:mod:`prune.core.experts`). :class:`PackedExperts` holds
such a stack quantized: every expert's [outputs, inputs] matrix as :mod:`prune.quantize.packed` holds a projection
(int8 rows with a scale per row; int4 two values a byte with tinygemm's bfloat16 scales per group), stacked. The
integers and scales are torchao's (``Int8Tensor`` per row, ``IntxUnpackedToInt8Tensor`` per group, computed on the
whole stack at once: the numbers its 2-D path gives each expert), or GPTQ's.

transformers' experts forwards (grouped_mm, batched_mm, eager) index or batch the stack as a dense tensor, which a
quantized one is not: a quantized model's experts run :func:`packed_experts_forward`, registered in transformers'
experts interface as ``layercut`` and set on the variant's config. It is the eager loop over the experts some token
chose — each expert's up projection, gate, down projection, routing weight — with each product through the
expert's kernel, the rest (gate, biases, post-expert norm) as transformers computes it.

Saved as torchao's 3-D tensors (transformers' torchao loader reads a stacked expert parameter), which
``prune.load_model`` packs again and runs through the same forward; transformers' own experts forwards do not
multiply torchao's 3-D tensors (grouped_mm has no such kernel), so the export runs in LayerCut, not in plain
transformers.
"""

from __future__ import annotations

import torch
from torch import nn
from torchao.utils import TorchAOBaseTensor
from transformers.integrations.moe import ExpertsInterface

from prune.core.architectures import decoder_layers, layer_config
from prune.core.experts import ExpertStack, driven, expert_stacks, expert_stacks_of, experts_modules
from prune.core.storage import is_quantized
from prune.quantize.packed import Int4Groups, Int8Rows, is_packed, moved_copy
from prune.quantize.packed import from_torchao as from_torchao_2d

LAYERCUT = "layercut"  # the experts implementation a quantized model's config names


class PackedExperts(TorchAOBaseTensor):
    """A stack of E experts' matrices in kernel form: int8 (``qdata`` [E, N, K], ``qscale`` [E, N]) or int4
    (``qdata`` [E, N, K/2] packed per expert, ``qscale`` [E, K/g, N, 2] tinygemm's scales and zeros); ``shape`` is
    the stack's as stored ([E, K, N] where ``transposed``)."""

    tensor_data_names = ["qdata", "qscale"]
    tensor_attribute_names = ["shape", "bits", "group", "dtype", "packing", "transposed"]

    def __new__(cls, qdata, qscale, shape, bits: int, group: int | None, dtype: torch.dtype, packing: str,
                transposed: bool):
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=qdata.device, requires_grad=False)

    def __init__(self, qdata, qscale, shape, bits: int, group: int | None, dtype: torch.dtype, packing: str,
                 transposed: bool):
        super().__init__()
        self.qdata, self.qscale = qdata, qscale
        self.bits, self.group, self.packing, self.transposed = bits, group, packing, transposed

    @classmethod
    def of(cls, experts: list[Int8Rows | Int4Groups], transposed: bool) -> PackedExperts:
        """The stack of ``experts`` (one kind and shape), stored [E, K, N] where ``transposed``."""
        first = experts[0]
        rows, inputs = first.shape
        shape = (len(experts), inputs, rows) if transposed else (len(experts), rows, inputs)
        if isinstance(first, Int8Rows):
            return cls(torch.stack([e.qdata for e in experts]), torch.stack([e.scale for e in experts]), shape, 8,
                       None, first.dtype, "cpu", transposed)
        return cls(torch.stack([e.packed for e in experts]), torch.stack([e.scale_and_zero for e in experts]), shape,
                   4, first.group, first.dtype, first.packing, transposed)

    @property
    def rows_shape(self) -> tuple[int, int]:
        """One expert's (outputs, inputs)."""
        _, first, second = self.shape
        return (second, first) if self.transposed else (first, second)

    def expert(self, index: int) -> Int8Rows | Int4Groups:
        """Expert ``index``'s [outputs, inputs] matrix in kernel form (its data a view into the stack)."""
        if self.bits == 8:
            return Int8Rows(self.qdata[index], self.qscale[index], self.dtype)
        return Int4Groups(self.qdata[index], self.qscale[index], self.rows_shape, self.group, self.dtype, self.packing)

    def experts(self) -> list[Int8Rows | Int4Groups]:
        return [self.expert(i) for i in range(self.shape[0])]

    def kernel(self) -> str:
        return self.expert(0).kernel()

    def dequantize(self) -> torch.Tensor:
        """The float stack as stored (torchao's numbers: each expert's q times its scale)."""
        rows = torch.stack([e.dequantize() for e in self.experts()])
        return rows.transpose(1, 2).contiguous() if self.transposed else rows

    def moved(self, device: torch.device, dtype: torch.dtype) -> PackedExperts:
        return PackedExperts.of([e.moved(device, dtype) for e in self.experts()], self.transposed)

    def to_torchao(self):
        """torchao's 3-D tensor of the same numbers, laid out as the stack is stored (what transformers saves)."""
        from torchao.quantization import Int8Tensor, IntxUnpackedToInt8Tensor

        values = torch.stack([e.values() for e in self.experts()])  # [E, N, K] int8
        scales = torch.stack([e.scales() for e in self.experts()]).to(self.dtype)  # [E, N, groups]
        inputs = self.rows_shape[1]
        block = [1, 1, self.group or inputs]
        if self.transposed:
            values, scales, block = values.transpose(1, 2).contiguous(), scales.transpose(1, 2).contiguous(), [
                1, block[2], 1]
        if self.bits == 8:
            return Int8Tensor(values, scales, block, self.dtype, zero_point=torch.zeros_like(scales, dtype=torch.int8))
        return IntxUnpackedToInt8Tensor(values, scales, torch.zeros_like(scales, dtype=torch.int8), torch.int4,
                                        tuple(block), self.dtype, None)


PackedExperts.implements(torch.ops.aten._to_copy.default)(moved_copy)


def from_torchao(weight, transposed: bool) -> PackedExperts:
    """torchao's symmetric 3-D int8 or int4 stack (as saved) in kernel form, the same numbers."""
    values, scales = weight.qdata, weight.scale
    if transposed:
        values, scales = values.transpose(1, 2), scales.transpose(1, 2)
    block = [1, weight.block_size[2 - transposed]]
    experts = [from_torchao_2d(_plain(weight, v.contiguous(), s.contiguous(), block)) for v, s in zip(values, scales)]
    return PackedExperts.of(experts, transposed)


def _plain(weight, values: torch.Tensor, scales: torch.Tensor, block: list[int]):
    """One expert of a torchao 3-D stack as torchao's 2-D tensor of its kind (its zero points zero)."""
    from torchao.quantization import Int8Tensor, IntxUnpackedToInt8Tensor

    zeros = torch.zeros_like(scales, dtype=torch.int8)
    if isinstance(weight, Int8Tensor):
        return Int8Tensor(values, scales, block, weight.dtype, zero_point=zeros)
    return IntxUnpackedToInt8Tensor(values, scales, zeros, weight.target_dtype, tuple(block), weight.dtype, None)


def rounded(stack: ExpertStack, bits: int, group: int | None) -> PackedExperts:
    """``stack`` rounded to nearest, torchao's integers and scales for every expert at once."""
    from torchao.quantization import Int8Tensor, IntxUnpackedToInt8Tensor
    from torchao.quantization.granularity import PerRow

    rows = stack.rows().contiguous()  # [E, N, K]
    if bits == 8:
        found = Int8Tensor.from_hp(rows, PerRow())
        experts = [Int8Rows(found.qdata[i], found.scale[i, :, 0].to(rows.dtype), rows.dtype) for i in range(len(rows))]
    else:
        found = IntxUnpackedToInt8Tensor.from_hp(rows, [1, 1, group], torch.int4)
        experts = [Int4Groups.of(found.qdata[i], found.scale[i], group, rows.dtype) for i in range(len(rows))]
    return PackedExperts.of(experts, stack.transposed)


def quantizable(stack: ExpertStack, group: int | None) -> bool:
    """Whether an expert's input width fits whole groups (int8: always)."""
    return group is None or stack.shape[1] % group == 0


def packed_experts_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                           top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts forward (hidden states [T, D], chosen experts and their weights [T, k]) with each
    expert's products through its kernel: only the experts some token chose run."""
    out = torch.zeros_like(hidden_states)
    up, down = expert_stacks_of(self)
    for expert in torch.unique(top_k_index).tolist():
        if not 0 <= expert < up.count:
            continue  # an expert-parallel sentinel
        token, position = torch.where(top_k_index == expert)
        h = _product(up, expert, hidden_states[token])
        h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
        y = _product(down, expert, h)
        if self.has_post_expert_norm:
            y = self.post_expert_norm(y)
        out.index_add_(0, token, (y * top_k_weights[token, position, None]).to(out.dtype))
    return out


def _product(stack: ExpertStack, expert: int, x: torch.Tensor) -> torch.Tensor:
    weight = stack.weight
    if isinstance(weight, PackedExperts):
        rows = weight.expert(expert)
    else:
        rows = weight[expert].T if stack.transposed else weight[expert]
    bias = stack.bias()
    return nn.functional.linear(x, rows, None if bias is None else bias[expert])


ExpertsInterface.register(LAYERCUT, packed_experts_forward)


def run_packed(model: nn.Module) -> nn.Module:
    """``model`` (its own config and experts modules) running :func:`packed_experts_forward` where it has driven
    experts, in place."""
    driving = [m for layer in decoder_layers(model) for m in experts_modules(layer).values() if driven(m)]
    if driving:
        model.config._experts_implementation = LAYERCUT
        for module in driving:
            module.config = layer_config(model)
    return model


def quantize_layer_experts(layer: nn.Module, bits: int, group: int | None, solve=None) -> tuple[int, int]:
    """Every driven expert stack of ``layer`` (the variant's own) quantized in place: ``solve(stack)`` gives its
    :class:`PackedExperts` (GPTQ), else rounded to nearest; a stack whose input width is not whole groups stays
    float. Returns (stacks quantized, stacks kept float)."""
    done = kept = 0
    for stack in expert_stacks(layer):
        if not quantizable(stack, group):
            kept += 1
            continue
        stack.set(nn.Parameter(solve(stack) if solve else rounded(stack, bits, group), requires_grad=False))
        done += 1
    return done, kept


def quantize_experts(model: nn.Module, bits: int, group: int | None) -> tuple[int, int]:
    """Every layer's experts of ``model`` (a variant's own layers) rounded to nearest, run by the packed forward:
    (stacks quantized, stacks kept float)."""
    counts = [quantize_layer_experts(layer, bits, group) for layer in decoder_layers(run_packed(model))]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def restore_experts(model: nn.Module) -> nn.Module:
    """A reloaded export's torchao expert stacks in kernel form again (the same numbers), run by
    :func:`packed_experts_forward`; in place."""
    for layer in decoder_layers(model):
        for stack in expert_stacks(layer):
            if is_quantized(stack.weight) and not is_packed(stack.weight):
                stack.set(nn.Parameter(from_torchao(stack.weight, stack.transposed), requires_grad=False))
    return run_packed(model)
