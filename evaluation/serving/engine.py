"""The compared columns in llama.cpp, inside a measurement's job: each written once as a GGUF of the type that
matches its storage (:mod:`evaluation.engines.llama_cpp`), then timed beside LayerCut's own rows or scored on the
same perplexity windows. A column llama.cpp cannot run gets one row with no value and its reason in one line
(``details["llama_cpp_note"]``); the other columns still run.
"""

from __future__ import annotations

import math

import torch

from prune.core.architectures import layer_config
from prune.core.devices import input_device
from prune.core.errors import InvalidInput

from evaluation.core.jobs import Job
from evaluation.core.pool import Loaded
from evaluation.core.store import ResultStore
from evaluation.measure import bandwidth, speed
from evaluation.engines import llama_cpp
from evaluation.measure.measurement import Measurement
from evaluation.quality import perplexity
from evaluation.serving.models import Models
from evaluation.serving.variants import Side

NOTE = llama_cpp.NOTE  # the details field that says why a column did not run in llama.cpp


def files(models: Models, base: Loaded, sides: list[Side], int4_type: str, job: Job) -> tuple[dict, dict]:
    """({label: its GGUF}, {label: why llama.cpp cannot run it}) of the compared columns."""
    found, why = {}, {}
    for i, side in enumerate(sides):
        reason = llama_cpp.why_not(side.model)
        if reason is None:
            file_type = llama_cpp.column_type(side.model, int4_type)
            path = llama_cpp.cache_path(base.fingerprint, side.recipe.key, file_type)
            step = job.sub(i / len(sides), (i + 1) / len(sides))
            step.update(0.0, f"{side.label}: its {file_type} GGUF for {llama_cpp.LLAMA_CPP}…")
            try:
                found[side.label] = llama_cpp.gguf_file(side.model, base.tokenizer, file_type, path,
                                                        tokenizer_gguf=getattr(base.model, "layercut_gguf", None),
                                                        calibration=models.default_calibration, progress=step.update)
            except InvalidInput as err:
                reason = str(err)
        if reason is not None:
            why[side.label] = reason
    return found, why


def speed_rows(models: Models, base: Loaded, sides: list[Side], *, prompt_len: int, new_tokens, repeats: int,
               int4_type: str, job: Job) -> list[Measurement]:
    """Every column's batch-1 prefill and decode in llama.cpp, on the prompt length and new tokens of LayerCut's own
    rows (one set of rows per count in ``new_tokens``)."""
    paths, why = files(models, base, sides, int4_type, job)
    limit = bandwidth.bandwidth(torch.device("cpu"))
    rows = []
    for count in new_tokens:
        if paths:
            rows += llama_cpp.measure_speed(paths, prompt_len=prompt_len, new_tokens=count, repeats=repeats,
                                            vocab=layer_config(base.model).vocab_size, bandwidth_limit=limit,
                                            check=job.check, report=job.update)
        rows += [Measurement(speed.decode_name(1, count) + llama_cpp.SUFFIX, math.nan, "ms", False, model=label,
                             group=speed.GROUP, details={NOTE: reason}) for label, reason in why.items()]
    return rows


def beside(rows: list[Measurement]) -> list[Measurement]:
    """``rows`` with every llama.cpp row right after the first of LayerCut's of the same name (a table lists its
    metrics in the order they first appear, so each engine row stands under LayerCut's own)."""
    theirs = [m for m in rows if m.name.endswith(llama_cpp.SUFFIX)]
    out = []
    for m in rows:
        if m.name.endswith(llama_cpp.SUFFIX):
            continue
        out.append(m)
        twins = [t for t in theirs if t.name == m.name + llama_cpp.SUFFIX]
        out += twins
        theirs = [t for t in theirs if t not in twins]
    return out + theirs


def perplexity_rows(models: Models, base: Loaded, sides: list[Side], ids: torch.Tensor, *, seq_len: int,
                    with_bos: bool, max_windows: int | None, int4_type: str, store: ResultStore, text: str,
                    job: Job) -> list[Measurement]:
    """Each column's WikiText-2 perplexity on LayerCut's own windows computed from llama.cpp's logits, and the share
    of next tokens whose top-1 agrees with the same column in PyTorch (cached like every result)."""
    paths, why = files(models, base, sides, int4_type, job)
    chunks = perplexity.windows(ids, seq_len, base.tokenizer.bos_token_id if with_bos else None)[:max_windows]
    where = f"seq {seq_len}{', BOS' if with_bos else ''}"
    rows = []
    for i, side in enumerate(sides):
        if side.label not in paths:
            rows.append(Measurement(f"WikiText-2 perplexity ({where}){llama_cpp.SUFFIX}", math.nan, "", False,
                                    model=side.label, group=perplexity.GROUP, details={NOTE: why[side.label]}))
            continue
        file_type = llama_cpp.file_type(paths[side.label])
        key = {"kind": "perplexity_llama_cpp", **models.key(base, side.recipe), "gguf_type": file_type,
               "seq_len": seq_len, "bos": with_bos, "max_windows": max_windows, "text": text,
               "llama_cpp": llama_cpp.version()}
        if (found := store.get(key)) is None:
            models.ready(base, [side], job)
            job.update(i / len(sides), f"{side.label}: WikiText-2 in {llama_cpp.LLAMA_CPP}…")
            try:
                found = llama_cpp.window_scores(paths[side.label], chunks, top1(side.model, chunks), check=job.check)
            except llama_cpp.EngineDied as died:  # not cached: another build or machine may run it
                rows.append(Measurement(f"WikiText-2 perplexity ({where}){llama_cpp.SUFFIX}", math.nan, "", False,
                                        model=side.label, group=perplexity.GROUP, details={NOTE: str(died)}))
                continue
            store.put(key, found)
        details = {"windows": len(chunks), "tokens": found["tokens"], "seq_len": seq_len, "bos": with_bos,
                   "nll": found["nll"] / found["tokens"], "engine": llama_cpp.LLAMA_CPP, "gguf_type": file_type}
        rows += [Measurement(f"WikiText-2 perplexity ({where}){llama_cpp.SUFFIX}",
                             math.exp(found["nll"] / found["tokens"]), "", False, model=side.label,
                             group=perplexity.GROUP, details=details),
                 Measurement(f"top-1 agreement with LayerCut ({where}){llama_cpp.SUFFIX}",
                             100 * found["agree"] / found["tokens"], "%", True, model=side.label,
                             group=perplexity.GROUP, details=details)]
    return rows


@torch.no_grad()
def top1(model, chunks: torch.Tensor) -> list[torch.Tensor]:
    """The PyTorch column's top-1 next token at every position but the last of each window."""
    return [model(window[None].to(input_device(model))).logits[0, :-1].argmax(dim=-1).cpu() for window in chunks]
