"""``score``: run an importance method, cached on disk by (model, method, options, calibration)."""

from __future__ import annotations

import hashlib
import time

import torch

from prune.core.version import __version__
from prune.core.architectures import CAUSAL, check_causal, kind_of, layer_kinds, stack_spans
from prune.core.structure import mixed_kinds
from prune.core.calibration import Calibration
from prune.core.offload import named_weights
from prune.depth.methods import check_options, get_method
from prune.depth.methods.context import Context
from prune.core.paths import cache_root, digest, read_json, write_atomic
from prune.depth.result import ImportanceResult


def model_fingerprint(model: torch.nn.Module) -> str:
    """Identifies a model's weights cheaply: name, config, and a sample of every tensor."""
    hasher = hashlib.sha256(str(getattr(model, "layercut_name", "")).encode())
    hasher.update(model.config.to_json_string(use_diff=False).encode())
    for name, param in named_weights(model):  # an offloaded model's read from its files, one tensor at a time
        sample = param.detach().flatten()[:64].float().cpu()
        hasher.update(name.encode() + str(tuple(param.shape)).encode() + sample.numpy().tobytes())
    return hasher.hexdigest()[:20]


def score(model, tokenizer, method: str, *, calibration: Calibration | None = None, use_cache: bool = True,
          context: Context | None = None, **options) -> ImportanceResult:
    """Layer/block importance of ``model`` by ``method``; see ``prune.depth.methods.METHODS``.

    Pass the same ``context`` to several calls to compute the residual stream only once.
    """
    spec = get_method(method)
    options = check_options(spec, options)
    if context is not None:
        model, tokenizer, calibration = context.model, context.tokenizer, context.calibration
    if not spec.any_kind:
        check_causal(model, spec.label)
    calibration = calibration or Calibration()
    key = digest({"model": model_fingerprint(model), "method": method, "options": options,
                  "calibration": calibration.key(), "version": __version__})
    path = cache_root() / "analyses" / f"{method}-{key}.json"
    if use_cache and (cached := read_json(path)) is not None:
        result = ImportanceResult.from_json(cached)
        result.from_cache = True
        return result
    started = time.perf_counter()
    result = spec.func(context or Context(model, tokenizer, calibration), **options)
    if kind_of(model) == CAUSAL and mixed_kinds(kinds := layer_kinds(model)):
        result.params["layer_kinds"] = kinds  # a mixture of experts or a hybrid: the heatmap's layer axis says which
    spans = stack_spans(model)
    if len(spans) > 1:
        result.params["stacks"] = [list(span) for span in spans]
        result.warnings.append(stacks_note(spans))
    result.elapsed_s = time.perf_counter() - started
    if use_cache:
        import json

        write_atomic(path, json.dumps(result.to_json()))
    return result


def stacks_note(spans: list[tuple[str, int, int]]) -> str:
    """'Layers 0–5 are the encoder, 6–11 the decoder; each stack is scored on its own residual stream, …'."""
    parts = ", ".join(f"{start}–{end - 1} the {name}" for name, start, end in spans).replace(" the", " are the", 1)
    return (f"Layers {parts}; each stack is scored on its own residual stream, and a block never spans two or "
            "removes all of one.")
