"""The GGUF file of an export, written by the quantizer that writes its type: LayerCut's own writer
(:mod:`evaluation.exports.gguf_out`, numpy through the ``gguf`` package) for its types, llama.cpp's quantizer
(:mod:`evaluation.exports.llama_quantize`) for the others, from an F16 file (BF16 for a bfloat16 model) LayerCut
writes first beside the target and removes afterwards, with an importance matrix from calibration text when one is
given and the installed llama-cpp-python can pass it (:mod:`evaluation.exports.imatrix`).

A type both write (Q8_0, Q5_1, Q5_0, Q4_1, Q4_0) is LayerCut's by default: it needs no llama.cpp and rounds the
float32 weights once; ``quantizer="llama.cpp"`` asks for llama.cpp's. On the same F16 weights the two write the same
bytes (``tests/evaluation/exports/test_llama_quantize.py``); their files differ where their rules do (below Q8_0 the
output layer: LayerCut Q8_0, llama.cpp Q6_K where its rows split into 256-value blocks) and by the F16 rounding
llama.cpp's input went through.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from prune.core.architectures import layer_config
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput, MissingDependency, quoted

from evaluation.core.jobs import Progress
from evaluation.exports import hf_convert, llama_quantize
from evaluation.exports.gguf_out import (GGUF_TYPES, OUTPUT_TYPE, gguf_refusal, int8_embedding, pattern_break,
                                         write_gguf, writes)
from evaluation.exports.imatrix import imatrix
from evaluation.exports.llama_quantize import LLAMA_TYPES, Quantized, size_order
from evaluation.exports.texts import model_dtype

LAYERCUT, LLAMA_CPP = "LayerCut", "llama.cpp"
CONVERTER = "llama.cpp's converter"  # who wrote a GGUF of an architecture LayerCut's writer does not write
QUANTIZERS = {LAYERCUT: GGUF_TYPES, LLAMA_CPP: LLAMA_TYPES}  # the types each writes; the first to write one: default
EXPORT_TYPES = tuple(sorted(dict.fromkeys(GGUF_TYPES + LLAMA_TYPES), key=size_order))  # largest first


def default_quantizer(file_type: str) -> str:
    """Who writes ``file_type`` unless told: the first of :data:`QUANTIZERS` that writes it."""
    return next(name for name, types in QUANTIZERS.items() if file_type in types)


def quantizer_for(file_type, quantizer: str | None = None) -> str:
    """The quantizer that will write ``file_type`` (``quantizer`` when given), or a one-line refusal: an unknown type,
    a quantizer that does not write it, or llama.cpp's where it is not installed."""
    if file_type not in EXPORT_TYPES:
        raise InvalidInput(f"GGUF type {quoted(file_type)} is not one LayerCut writes: {', '.join(EXPORT_TYPES)}.")
    if quantizer is not None and file_type not in QUANTIZERS.get(quantizer, ()):
        writers = " or ".join(name for name, types in QUANTIZERS.items() if file_type in types)
        raise InvalidInput(f"{file_type} is written by {writers}, not by {quoted(quantizer)}.")
    quantizer = quantizer or default_quantizer(file_type)
    if quantizer == LLAMA_CPP and llama_quantize.why_not():
        raise MissingDependency(f"GGUF type {file_type}: {llama_quantize.why_not()}")
    return quantizer


@dataclass(frozen=True)
class Written:
    """A GGUF file an export holds, and how it was made (for the model card)."""

    path: Path
    quantizer: str
    source_type: str | None = None  # what LayerCut wrote for llama.cpp to quantize: F16 or BF16
    report: Quantized | None = None  # llama.cpp's choices
    importance: str = "without an importance matrix"  # or from which calibration tokens llama.cpp had one

    def note(self) -> str:
        """The model card's paragraph on llama.cpp's part; "" for a file LayerCut wrote alone (its card unchanged)."""
        if self.quantizer == CONVERTER:
            made = (f", then llama.cpp's quantizer made it {self.report.file_type}. " + self.report.describe()
                    if self.report else ".")
            return ("llama.cpp's own converter (`convert_hf_to_gguf.py` of llama-cpp-python "
                    f"{llama_quantize.version()}) wrote it from the model's float weights (a quantized column "
                    f"dequantized first){made}")
        if self.report is None:
            return ""
        return (f"LayerCut wrote it in {self.source_type}, then llama.cpp's own quantizer (`llama_model_quantize`, "
                f"llama-cpp-python {llama_quantize.version()}) made it {self.report.file_type}, each tensor's type "
                f"chosen by llama.cpp's rules with its default output and embedding types, {self.importance}. "
                + self.report.describe())


def converted(model) -> bool:
    """Whether ``model``'s GGUF is written by llama.cpp's converter (:mod:`evaluation.exports.hf_convert`): an
    architecture LayerCut's own writer does not write."""
    return not writes(model)


def refusal(model) -> str | None:
    """Why no GGUF of ``model`` can be written here (one line), or None: LayerCut's writer's reasons for the
    architectures it writes, llama.cpp's converter's (and llama.cpp's layer patterns) for the others."""
    if writes(model):
        return gguf_refusal(model)
    return hf_convert.refusal(model) or pattern_break(layer_config(model))


def write(model, tokenizer, path: Path, file_type: str, *, quantizer: str | None = None,
          tokenizer_gguf: str | None = None, calibration: Calibration | None = None,
          progress: Progress | None = None) -> Written:
    """Write ``model`` as the GGUF file ``path`` of ``file_type`` by its quantizer (:func:`quantizer_for`); llama.cpp's
    with an importance matrix from ``calibration`` where it can take one. ``progress`` hears of each calibration window
    and llama.cpp's tensors, and may raise (a Stop) to end the work. An architecture LayerCut's writer does not write
    is converted by llama.cpp's converter (its types directly, the others quantized by llama.cpp from its F16)."""
    path = Path(path)
    by = quantizer_for(file_type, quantizer)
    if converted(model):
        return _converted(model, tokenizer, path, file_type, progress)
    if by == LAYERCUT:
        return Written(write_gguf(model, tokenizer, path, file_type, tokenizer_gguf=tokenizer_gguf), by)
    columns, importance = _importance(model, tokenizer, calibration, _span(progress, 0.0, 0.4))
    source_type = "BF16" if model_dtype(model) == torch.bfloat16 else "F16"
    source = path.with_name(f".{path.name}.{source_type}.gguf")
    quantizing = _span(progress, 0.4 if columns else 0.0, 1.0)
    try:
        if quantizing is not None:
            quantizing(0.0, f"Writing the model in {source_type} for llama.cpp's quantizer…")
        write_gguf(model, tokenizer, source, source_type, tokenizer_gguf=tokenizer_gguf)
        report = llama_quantize.quantized(source, path, file_type, imatrix=columns, progress=quantizing,
                                          embedding_type=OUTPUT_TYPE.name if int8_embedding(model) else None)
    finally:
        source.unlink(missing_ok=True)
    return Written(path, by, source_type, report, importance)


def _converted(model, tokenizer, path: Path, file_type: str, progress: Progress | None) -> Written:
    """llama.cpp's converter's GGUF of ``model``: its own types directly, another from its F16 by llama.cpp's
    quantizer (without an importance matrix: it is computed on the tensors LayerCut's writer names)."""
    if (why := refusal(model)) is not None:
        raise InvalidInput(why)
    if file_type in hf_convert.CONVERTER_TYPES:
        return Written(hf_convert.convert(model, tokenizer, path, file_type, _span(progress, 0.0, 1.0)), CONVERTER)
    source = path.with_name(f".{path.name}.F16.gguf")
    try:
        hf_convert.convert(model, tokenizer, source, "F16", _span(progress, 0.0, 0.5))
        report = llama_quantize.quantized(source, path, file_type, progress=_span(progress, 0.5, 1.0))
    finally:
        source.unlink(missing_ok=True)
    return Written(path, CONVERTER, "F16", report)


def _importance(model, tokenizer, calibration: Calibration | None, progress: Progress | None) -> tuple[dict, str]:
    """llama.cpp's importance matrix from ``calibration`` (None without one, or where llama-cpp-python cannot pass
    it), and the card's words for it."""
    if calibration is None:
        return None, Written.importance
    if not llama_quantize.takes_imatrix():
        return None, (f"without an importance matrix (llama-cpp-python {llama_quantize.version()} cannot pass one to "
                      "llama.cpp)")
    windows = token_windows(tokenizer, calibration)
    return imatrix(model, windows, progress), (f"with an importance matrix from {windows.numel():,} tokens of the "
                                               f"calibration text ({calibration.source})")


def _span(progress: Progress | None, start: float, end: float) -> Progress | None:
    """``progress`` for one stage of the work, its 0…1 mapped onto ``start…end``."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + (end - start) * fraction, message)
