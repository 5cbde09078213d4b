"""A (pruned) causal LM held in memory written as one GGUF file, as llama.cpp's ``convert_hf_to_gguf.py`` writes it.

Followed: llama.cpp as vendored in llama-cpp-python 0.3.36 (``conversion/{base,llama,qwen,gemma}.py``: ``TextModel``,
``LlamaModel``, ``Qwen2Model``, ``GemmaModel``, ``Gemma2Model``, ``Gemma3Model``) and transformers' GGUF loader, which
undoes the same steps. The metadata describes the model as it is: its own layer count, widths read off its weights.

What llama.cpp derives from the layer index or count (``src/models/<arch>.cpp``, ``load_arch_hparams`` unless said),
which a cut can change. "Period n": ``set_swa_pattern`` (``src/llama-hparams.cpp:8``) slides layer il if
``il % n < n - 1``; "dense first": if ``il % n != 0``.

* gemma2 ``gemma2.cpp:6``: period 2; ``:25``: attention scale 1/√(n_embd/n_head) at 46 layers, else 1/√head_dim
* gemma3 ``gemma3.cpp:7``: period 6 (layers 5, 11, … full); ``:29``: the same scale rule at 62 layers
* gemma3n ``gemma3n.cpp:5,7``: period 5; KV cache shared from layer 20 on
* gemma-embedding ``gemma-embedding.cpp:5``: period 6
* gpt-oss ``openai-moe.cpp:9``: period 2
* cohere2 ``cohere2.cpp:5``, exaone-moe ``exaone-moe.cpp:6``, olmo2 ``olmo2.cpp:9``, mellum ``mellum.cpp:11``,
  muse-glimmer ``muse-glimmer.cpp:13``: period 4 (five architectures, one call each)
* afmoe ``afmoe.cpp:17``: period 4; ``:136``: no RoPE where (il + 1) % n_no_rope_layer_step == 0
* cohere2moe ``cohere2moe.cpp:28``, smallthinker ``smallthinker.cpp:9``, laguna ``laguna.cpp:39``: period 4, dense first
* modern-bert ``modern-bert.cpp:8``: period 3, dense first
* plamo3 ``plamo3.cpp:9``: period 8
* exaone4 ``exaone4.cpp:4-7``: sliding windows (period 4) only at 64 layers; ``:111`` RoPE only on sliding layers
* llama4 ``llama4.cpp:19``: chunked attention, period 4; ``:144``: no RoPE where (il + 1) % 4 == 0
* smollm3 ``smollm3.cpp:5,69``: no RoPE where (il + 1) % 4 == 0

``load_swa_pattern`` (``src/llama-model.cpp:3434``) first reads a per-layer array ``<arch>.attention.
sliding_window_pattern``, but the converter writes none for Gemma 2/3, and older llama.cpp builds and transformers'
loader derive the pattern from the index: :func:`pattern_break` refuses a cut that breaks it. llama.cpp's llama
(Mistral too) and qwen2 read no sliding window: every layer runs full attention.

On purpose unlike the converter: ``rope.freq_base``, ``key_length``, ``value_length`` written for every architecture;
Gemma 3's embedding rows past the tokenizer kept (as ``[PAD<id>]``), not cut; types below Q8_0 are written directly (the
converter stops at Q8_0), every matrix in the type except the output layer (``output.weight``, or the tied
``token_embd.weight``), which is Q8_0: ``llama-quantize`` (``llama_tensor_get_type``) keeps it at Q6_K, which the
``gguf`` package cannot write; an input embedding LayerCut stores in int8 is Q8_0 too. As the converter: vectors and
norms stay F32; a matrix whose rows do not split into the type's blocks falls back to F16.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
import torch
from torch import nn

from evaluation.exports.gguf_tokenizer import add_tokenizer
from prune.core.architectures import decoder_layers
from prune.core.errors import InvalidInput, quoted
from prune.core.factored import Factored
from prune.core.storage import is_quantized, parts

GGUF_TYPES = ("F16", "BF16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")  # those gguf.quants quantizes in numpy
BELOW_Q8_0 = ("Q5_1", "Q5_0", "Q4_1", "Q4_0")  # their output layer is written in OUTPUT_TYPE
OUTPUT_TYPE = gguf.GGMLQuantizationType.Q8_0
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_YARN = (("add_rope_scaling_orig_ctx_len", "original_max_position_embeddings"), ("add_rope_scaling_yarn_ext_factor",
          "extrapolation_factor"), ("add_rope_scaling_yarn_attn_factor", "attention_factor"),
         ("add_rope_scaling_yarn_beta_fast", "beta_fast"), ("add_rope_scaling_yarn_beta_slow", "beta_slow"))


@dataclass(frozen=True)
class Family:
    """One architecture as llama.cpp's converter writes it and its loader reads it back."""

    hf_class: str  # the transformers *ForCausalLM class
    arch: gguf.MODEL_ARCH
    label: str  # for messages
    permute_qk: bool = False  # LlamaModel.undo_permute: Q/K rows in the order llama.cpp's rope pairs them
    norm_shift: float = 0.0  # GemmaModel.modify_tensors: RMSNorm weights stored as w + 1
    swa_period: int = 0  # load_swa_pattern(ml, n); 0: llama.cpp runs every layer with full attention
    full_scale_layers: int | None = None  # layer count at which llama.cpp scales attention by 1/sqrt(n_embd/n_head)
    own_output: bool = True  # False: llama.cpp always uses token_embd as the output layer (gemma.cpp, gemma2.cpp)
    rope_types: tuple[str, ...] = ("default", "linear", "yarn")
    extras: tuple[tuple[str, str], ...] = ()  # (GGUFWriter method, config field) the converter class adds


_LLAMA = Family("LlamaForCausalLM", gguf.MODEL_ARCH.LLAMA, "Llama", permute_qk=True,
                rope_types=("default", "linear", "yarn", "llama3"),
                extras=(("add_vocab_size", "vocab_size"), ("add_rope_dimension_count", "head_dim")))
_GEMMA = Family("GemmaForCausalLM", gguf.MODEL_ARCH.GEMMA, "Gemma", norm_shift=1.0, own_output=False)
FAMILIES = {  # by config.model_type
    "llama": _LLAMA,
    "mistral": replace(_LLAMA, hf_class="MistralForCausalLM", label="Mistral"),  # as LlamaModel
    "qwen2": Family("Qwen2ForCausalLM", gguf.MODEL_ARCH.QWEN2, "Qwen2"),
    "gemma": _GEMMA,
    "gemma2": replace(_GEMMA, hf_class="Gemma2ForCausalLM", arch=gguf.MODEL_ARCH.GEMMA2, label="Gemma 2",
                      swa_period=2, full_scale_layers=46,
                      extras=(("add_attn_logit_softcapping", "attn_logit_softcapping"),
                              ("add_final_logit_softcapping", "final_logit_softcapping"))),
    "gemma3_text": replace(_GEMMA, hf_class="Gemma3ForCausalLM", arch=gguf.MODEL_ARCH.GEMMA3, label="Gemma 3",
                           swa_period=6, full_scale_layers=62, own_output=True,
                           extras=(("add_final_logit_softcapping", "final_logit_softcapping"),)),
}


def writes(model) -> bool:
    """Whether ``model``'s architecture is one :func:`write_gguf` writes (its class as the family's)."""
    family = FAMILIES.get(getattr(model.config, "model_type", None))
    return family is not None and type(model).__name__ == family.hf_class


def gguf_refusal(model) -> str | None:
    """None if :func:`write_gguf` can write this model, else one line saying why not."""
    family = FAMILIES.get(getattr(model.config, "model_type", None))
    if not writes(model):
        return ("GGUF export supports Llama, Mistral, Qwen2, Gemma, Gemma 2 and Gemma 3 models; "
                f"this is {type(model).__name__}.")
    if any(p.device.type == "meta" for p in model.parameters()):
        return ("This model is read from disk layer by layer (over the memory budget): a GGUF is written from weights "
                "in memory. Export the folder and convert it with llama.cpp's convert_hf_to_gguf.py.")
    for check in (_block_refusal, _layout_refusal):
        line = check(model, family)
        if line:
            return line
    return pattern_break(model.config)


# Architectures llama.cpp's own converter writes without a per-layer pattern, whose loader derives each layer's local
# attention from its index (the module docstring's list): (label, period)
DERIVED_PATTERNS = {"gpt_oss": ("gpt-oss", 2), "llama4_text": ("Llama 4", 4)}


def pattern_break(config) -> str | None:
    """None if llama.cpp derives each layer's attention (sliding or full, its scale) as ``config`` says, else why."""
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type)
    if family is None and model_type in DERIVED_PATTERNS:
        label, period = DERIVED_PATTERNS[model_type]
        family = Family("", gguf.MODEL_ARCH.LLAMA, label, swa_period=period)
    if family is None:
        return None
    n = config.num_hidden_layers
    window = getattr(config, "sliding_window", None) or getattr(config, "attention_chunk_size", None)
    matters = bool(window) and window < config.max_position_embeddings  # a window as long as the context is full
    types = [kind.replace("chunked", "sliding") for kind in getattr(config, "layer_types", None) or
             ["sliding_attention" if window else "full_attention"] * n]
    p = family.swa_period
    for i, kind in enumerate(types):
        own = matters and kind == "sliding_attention"
        if own == (matters and p > 0 and i % p < p - 1):
            continue
        if not p:
            return (f"llama.cpp runs every {family.label} layer with full attention; layer {i} uses a {window}-token "
                    "sliding window in this model.")
        names = ("sliding-window", "full attention") if own else ("full attention", "sliding-window")
        return (f"llama.cpp derives {family.label}'s attention from the layer index (one layer in {p} full: {p - 1}, "
                f"{2 * p - 1}, …); layer {i} ({names[0]} in this model) would run as {names[1]}.")
    return _scale_break(config, family)


def _scale_break(config, family: Family) -> str | None:
    """Gemma 2/3: llama.cpp picks the attention scale from the layer count, not from query_pre_attn_scalar."""
    if family.full_scale_layers is None:
        return None
    n = config.num_hidden_layers
    derived = config.hidden_size / config.num_attention_heads if n == family.full_scale_layers else _head_dim(config)
    if math.isclose(derived, config.query_pre_attn_scalar):
        return None
    return (f"llama.cpp sets {family.label}'s attention scale from the layer count (1/√(hidden/heads) at "
            f"{family.full_scale_layers} layers, else 1/√head_dim): with {n} layers it would use 1/√{derived:g}, "
            f"not this model's 1/√{config.query_pre_attn_scalar:g}.")


def _block_refusal(model, family: Family) -> str | None:
    """Every layer as llama.cpp lays one out: the standard attention and MLP, each projection one dense matrix of
    the same shape in every layer (one head count and MLP width; width pruning can make them differ)."""
    prefix = family.hf_class.removesuffix("ForCausalLM")  # transformers' LlamaAttention, Gemma3MLP, …
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        for name, expected in (("self_attn", f"{prefix}Attention"), ("mlp", f"{prefix}MLP")):
            found = type(getattr(layer, name, None)).__name__
            if found in ("DroppedBlock", "NoneType"):
                return f"Layer {i}'s {name} is dropped, but llama.cpp needs attention and an MLP in every layer."
            if found != expected:
                return f"Layer {i}'s {name} is a {found}, not transformers' {expected} that llama.cpp mirrors."
        for path in PROJECTIONS:
            module, first = layer.get_submodule(path), layers[0].get_submodule(path)
            if not isinstance(module, nn.Linear):
                kind = "LayerCut's low-rank factors" if isinstance(module, Factored) else f"a {type(module).__name__}"
                return f"Layer {i}'s {path} is {kind}, but llama.cpp needs one dense matrix per projection."
            if module.weight.shape != first.weight.shape:
                return (f"llama.cpp needs one head count and MLP width for every layer; layer {i}'s {path} is "
                        f"{list(module.weight.shape)}, layer 0's {list(first.weight.shape)}.")
    return None


def _layout_refusal(model, family: Family) -> str | None:
    """An LM head llama.cpp would not read, RoPE scaling it cannot run, or a tensor its layout has no name for."""
    if not (family.own_output or _tied(model)):
        return f"llama.cpp's {family.label} reads its output layer from the token embeddings; this model has its own."
    kind = _rope(model.config)[0].get("rope_type", "default")
    if kind not in family.rope_types:
        return f"llama.cpp's {family.label} cannot run this model's {kind!r} RoPE scaling from a GGUF LayerCut writes."
    names = gguf.get_tensor_name_map(family.arch, len(decoder_layers(model)))
    for name in model.state_dict():  # lm_head: tied (skipped) or checked above
        if name != "lm_head.weight" and names.get_name(name, try_suffixes=(".weight", ".bias")) is None:
            return f"The tensor {name} has no place in llama.cpp's {family.label} layout."
    return None


def check_file_type(file_type) -> str:
    """``file_type`` if it is one of :data:`GGUF_TYPES`, else a one-line refusal."""
    if file_type not in GGUF_TYPES:
        raise InvalidInput(f"GGUF type {quoted(file_type)} is not one LayerCut writes: {', '.join(GGUF_TYPES)}.")
    return file_type


def write_gguf(model, tokenizer, path, file_type: str = "F16", *, tokenizer_gguf: str | None = None) -> Path:
    """Write ``model`` (with ``tokenizer``) as one GGUF file at ``path``, atomically; a clear error when it cannot.

    ``tokenizer_gguf``: a GGUF the model was loaded from, whose ``tokenizer.*`` metadata is copied verbatim.
    """
    check_file_type(file_type)
    refusal = gguf_refusal(model)
    if refusal:
        raise InvalidInput(refusal)
    family = FAMILIES[model.config.model_type]
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[family.arch])
        _add_metadata(writer, model, family, file_type)
        add_tokenizer(writer, tokenizer, model.config, tokenizer_gguf)
        qtype, own = gguf.GGMLQuantizationType[file_type], own_types(model, file_type)
        for name, data in _tensors(model, family):
            _add_tensor(writer, name, data, own.get(name, qtype))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _add_metadata(writer: gguf.GGUFWriter, model, family: Family, file_type: str) -> None:
    """The hyperparameters ``TextModel.set_gguf_parameters`` and the family's converter class write."""
    config, layer = model.config, decoder_layers(model)[0]
    head_dim = _head_dim(config)
    writer.add_name(Path(str(getattr(model, "layercut_name", None) or config.name_or_path or family.label)).name)
    writer.add_block_count(len(decoder_layers(model)))
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(layer.mlp.gate_proj.out_features)
    heads = _heads(model)
    writer.add_head_count(heads["q_proj"])
    writer.add_head_count_kv(heads["k_proj"])
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    _add_rope(writer, config)
    if family.swa_period and getattr(config, "sliding_window", None):
        writer.add_sliding_window(config.sliding_window)
    for method, field in family.extras:
        value = head_dim if field == "head_dim" else getattr(config, field, None)
        if value is not None:
            getattr(writer, method)(value)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{file_type}"])


def _add_rope(writer: gguf.GGUFWriter, config) -> None:
    """RoPE base (full and sliding layers) and linear or YaRN scaling, as ``TextModel.set_gguf_parameters``."""
    full, swa_base = _rope(config)
    writer.add_rope_freq_base(full.get("rope_theta", 10000.0))
    if swa_base is not None:
        writer.add_rope_freq_base_swa(swa_base)
    kind = full.get("rope_type", "default")
    if kind in ("linear", "yarn"):
        writer.add_rope_scaling_type(gguf.RopeScalingType[kind.upper()])
        writer.add_rope_scaling_factor(full["factor"])
    for method, key in _YARN if kind == "yarn" else ():
        if full.get(key) is not None:
            getattr(writer, method)(full[key])


def _rope(config) -> tuple[dict, float | None]:
    """(the full-attention layers' RoPE parameters, the sliding layers' base or None) from ``rope_parameters``."""
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("full_attention", params), params.get("sliding_attention", {}).get("rope_theta")


def _tensors(model, family: Family):
    """(GGUF name, float32 tensor) for every weight, changed as the converter changes it."""
    names = gguf.get_tensor_name_map(family.arch, len(decoder_layers(model)))
    heads, tied = _heads(model), _tied(model)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and tied:
            continue  # llama.cpp reads token_embd.weight as the output layer when output.weight is absent
        data = _plain(tensor)
        projection = name.split(".")[-2]
        if family.permute_qk and projection in heads:
            data = _rotary_rows(data, heads[projection])
        if family.norm_shift and name.endswith("norm.weight"):
            data = data + family.norm_shift
        yield names.get_name(name, try_suffixes=(".weight", ".bias")), data
    if _rope(model.config)[0].get("rope_type") == "llama3":
        yield gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", llama3_rope_factors(model.config)


def own_types(model, file_type: str) -> dict[str, gguf.GGMLQuantizationType]:
    """The tensors a type below Q8_0 writes in Q8_0: the output layer, and an input embedding LayerCut stores in int8
    (``Quantize(embedding=True)``), as llama.cpp's ``token_embd`` beside Q8_0 and Q4 layers."""
    if file_type not in BELOW_Q8_0:
        return {}
    return {output_tensor(model): OUTPUT_TYPE, **({"token_embd.weight": OUTPUT_TYPE} if int8_embedding(model) else {})}


def int8_embedding(model) -> bool:
    """Whether LayerCut stores ``model``'s input embedding quantized (int8, ``Quantize(embedding=True)``)."""
    return is_quantized(model.get_input_embeddings().weight)


def output_tensor(model) -> str:
    """The GGUF name of the model's output layer: its own, or the token embeddings it is tied to."""
    return "token_embd.weight" if _tied(model) else "output.weight"


def _add_tensor(writer: gguf.GGUFWriter, name: str, data: torch.Tensor, qtype) -> None:
    """As ``ModelBase.prepare_tensors``: 1-D tensors and norms F32; a matrix the type cannot block falls back to F16."""
    array = data.numpy()
    if array.ndim <= 1 or name.endswith("_norm.weight"):
        qtype = gguf.GGMLQuantizationType.F32
    try:
        packed = gguf.quants.quantize(array, qtype)
    except gguf.QuantError:
        qtype = gguf.GGMLQuantizationType.F16
        packed = gguf.quants.quantize(array, qtype)
    writer.add_tensor(name, packed, raw_dtype=qtype)


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """A weight as a float32 CPU tensor; a torchao quantized tensor is dequantized first (GGUF re-quantizes it)."""
    return tensor.dequantize().detach().to(device="cpu", dtype=torch.float32).contiguous()


def _rotary_rows(rows: torch.Tensor, heads: int) -> torch.Tensor:
    """``LlamaModel.permute``: each head's rows [first half, second half] interleaved pairwise (llama.cpp's rope)."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def llama3_rope_factors(config) -> torch.Tensor:
    """``LlamaModel.generate_extra_tensors``: the per-frequency divisors of Llama 3's RoPE scaling (rope_freqs)."""
    rope = _rope(config)[0]
    dim = _head_dim(config)
    freqs = 1.0 / (rope.get("rope_theta", 10000.0) ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factor, low, high = rope.get("factor", 8.0), rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    context = rope.get("original_max_position_embeddings", 8192)
    wavelengths = 2 * math.pi / freqs
    smooth = (context / wavelengths - low) / (high - low)
    factors = np.where(wavelengths < context / high, 1.0,
                       np.where(wavelengths > context / low, factor, 1 / ((1 - smooth) / factor + smooth)))
    return torch.tensor(factors, dtype=torch.float32)


def _heads(model) -> dict[str, int]:
    """Query and key/value head counts, read off the (uniform) layers' weights: what the model computes with."""
    attention, head_dim = decoder_layers(model)[0].self_attn, _head_dim(model.config)
    return {"q_proj": attention.q_proj.out_features // head_dim, "k_proj": attention.k_proj.out_features // head_dim}


def _head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def _tied(model) -> bool:
    """Whether the LM head is the token embedding itself (then the file holds no output.weight, as the converter)."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    shared = {t.data_ptr() for t in parts(embedding.weight)}  # an int8 weight's data_ptr() is 0: its values' is not
    return head is None or head.weight is embedding.weight or any(t.data_ptr() in shared for t in parts(head.weight))
