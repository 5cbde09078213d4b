"""``score``: run an importance method, cached on disk by (model, method, options, calibration)."""

from __future__ import annotations

import hashlib
import time

import torch

from prune import __version__
from prune.core.architectures import check_one_stack
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
    check_one_stack(model, "Layer importance")
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
    result.elapsed_s = time.perf_counter() - started
    if use_cache:
        import json

        write_atomic(path, json.dumps(result.to_json()))
    return result
