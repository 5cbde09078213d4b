"""ReplaceMe: one linear map in place of the block a depth cut removed, folded into the layer before it.

After Shopkhoev et al. 2025 ("ReplaceMe: Network Simplification via Depth Pruning and Transformer Block
Linearization", arXiv 2505.02819; ``mts-ai/ReplaceMe``, ``lstsq.py`` and ``cosine_dist.py``). For a removed block
``[s, e)`` of the model the cut was applied to, on calibration text:

* ``X`` = what the MLP of layer ``s − 1`` adds to the residual stream (its down projection's output, times the
  architecture's residual scale where it has one, e.g. Granite's);
* ``z`` = the rest of that layer's output: ``h_s − X`` (``h_k`` is the residual stream entering layer ``k``;
  ``h_L`` the last layer's output before the final norm);
* ``Y`` = ``h_e − z``: what the MLP would have to add for layer ``s − 1`` to hand on ``h_e`` directly.

``T`` maps ``X`` to ``Y``. **Least squares** (their ``lstsq``): ``T = (XᵀX + αI)⁻¹ XᵀY``, with ``XᵀX`` and ``XᵀY``
summed over every calibration token in float64 (their code: ``torch.linalg.inv`` of the same sums, ``α`` = 0).
**Cosine** (their ``cosine_dist``, default ``adam`` solver): ``T`` starts at the identity and Adam lowers
``1 − mean cos(X T, Y)`` over shuffled batches of 1024 token rows. The map is folded into the down projection:
``nn.Linear`` computes ``u Wᵀ + b``, so ``W ← Tᵀ W`` and ``b ← Tᵀ b`` give ``X T`` (GPT-2's ``Conv1D`` holds ``Wᵀ``:
``W ← W T``). The patched model keeps the standard architecture and loads in plain transformers.

Where LayerCut differs, on purpose: the calibration is the page's (WikiText-2 validation windows, every token,
none padded) rather than 8,000 SlimOrca chats with padding rows in the sums; activations come from the model
itself, not a 4-bit copy of it; the least-squares system is solved (``torch.linalg.solve``), not inverted. A cut
of several separate blocks fits one map per block, each on the uncut model's activations (theirs refits each block
on the model the previous ones left). The cosine fit runs ``epochs`` passes over our calibration tokens (theirs: 10
passes over ~8M tokens); see :data:`DEFAULTS`.

Refused, each with its reason: a block that starts at layer 0 (no layer before it to fold into); an architecture
whose MLP output passes a norm before it joins the residual stream (Gemma 2 and 3's post-feed-forward norm: a
linear map cannot be folded through it), which is checked numerically, not by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core.architectures import decoder_layers, get_path, residual_scale, width_of
from prune.core.calibration import Calibration, token_windows
from prune.core.devices import input_device
from prune.core.errors import InvalidCut, InvalidInput, UnsupportedArchitecture
from prune.core.hidden import StopForward, _hidden_out, run_until_stopped
from prune.core.surgery import clone_layers, index_runs
from prune.patch import sharing

METHODS = ("lstsq", "cosine")
DEFAULTS = {"lstsq": {"ridge": 0.0}, "cosine": {"epochs": 10, "lr": 1e-3, "batch": 1024, "seed": 0}}
PATCHED_FIELD = "layercut_patched"  # the patched config records each block's map and fit here

Progress = Callable[[float, str], object]


@dataclass(frozen=True)
class Fit:
    """One block's map: ``T`` [D, D] (float64) and how well it predicts ``Y`` on the calibration tokens."""

    block: tuple[int, int]  # [s, e) in the numbering of the model the cut was applied to
    map: torch.Tensor
    error: float  # ‖X T − Y‖ / ‖Y‖ over every calibration token
    unpatched: float  # the same for the plain cut (T = I: layer s − 1 hands on z + X): ‖X − Y‖ / ‖Y‖


def fold_target(layer: nn.Module, model: nn.Module) -> nn.Module:
    """The matrix that writes the MLP's output into the residual stream (``mlp.down_proj``, ``fc2``, …)."""
    try:
        width = width_of(model)
    except UnsupportedArchitecture:
        raise UnsupportedArchitecture(f"The linear patch folds into one MLP down projection; model type "
                                      f"{model.config.model_type} has none (one MLP per expert).") from None
    target = get_path(layer, down_path(width))
    if not isinstance(target, (nn.Linear, Conv1D)):
        raise InvalidInput("The linear patch folds into a plain down projection; an earlier step replaced it "
                           "(low-rank factors): patch the cut before that step.")
    return target


def down_path(width) -> str:
    """The path, in a decoder layer, of the matrix that writes the MLP's output (its width row's one ``in`` channel)."""
    return next(p for p, axes in width.channels if axes.startswith("in"))


@torch.no_grad()
def collect(model: nn.Module, tokenizer, blocks: list[tuple[int, int]], calibration: Calibration,
            keep_rows: bool = False, progress: Progress | None = None, batch_size: int = 8) -> dict:
    """For each block: XᵀX, XᵀY, ΣY² (float64 sums) and, with ``keep_rows``, every token's X and Y (float32, CPU).

    One forward pass per batch of calibration windows through ``model`` (the uncut model), with hooks on the
    layers before each block, the layers each block ends at, and the down projections.
    """
    layers = decoder_layers(model)
    for s, _ in blocks:
        if s == 0:
            raise InvalidCut("The linear patch folds into the layer before the cut: a cut that starts at layer 0 has "
                             "none. Keep layer 0.")
    ids = token_windows(tokenizer, calibration)
    scale = residual_scale(model)
    found = {b: {"xtx": 0, "xty": 0, "yy": 0, "x": [], "y": []} for b in blocks}
    seen: dict = {}
    hooks = []
    for s, e in blocks:
        hooks.append(fold_target(layers[s - 1], model).register_forward_hook(
            lambda _m, _a, out, s=s: seen.__setitem__(("x", s), out.float() * scale)))
        hooks.append(layers[s - 1].register_forward_hook(
            lambda _m, _a, out, s=s: seen.__setitem__(("h", s), _hidden_out(out).float())))
        hooks.append(layers[e - 1].register_forward_hook(
            lambda _m, _a, out, e=e: seen.__setitem__(("h", e), _hidden_out(out).float())))
    last = max(e for _, e in blocks) - 1  # nothing after this layer is read: the pass stops there
    hooks.append(layers[last].register_forward_hook(lambda *_: (_ for _ in ()).throw(StopForward())))
    device = input_device(model)
    try:
        batches = ids.split(batch_size)
        for number, batch in enumerate(batches):
            seen.clear()
            if number == 0:
                _check_linear(model, blocks, batch.to(device), scale)
                seen.clear()
            run_until_stopped(model, input_ids=batch.to(device), use_cache=False)
            for s, e in blocks:
                x = seen[("x", s)].flatten(0, -2)
                y = (seen[("h", e)] - seen[("h", s)]).flatten(0, -2) + x  # h_e − z, z = h_s − X
                part = found[(s, e)]
                x64, y64 = x.double(), y.double()
                part["xtx"] = part["xtx"] + x64.T @ x64
                part["xty"] = part["xty"] + x64.T @ y64
                part["yy"] = part["yy"] + float((y64 * y64).sum())
                if keep_rows:
                    part["x"].append(x.cpu())
                    part["y"].append(y.cpu())
            if progress is not None:
                progress((number + 1) / len(batches), f"Linear patch: calibration batch {number + 1} of {len(batches)}")
    finally:
        for hook in hooks:
            hook.remove()
    if keep_rows:
        for part in found.values():
            part["x"], part["y"] = torch.cat(part["x"]), torch.cat(part["y"])
    return found


def _check_linear(model: nn.Module, blocks, batch: torch.Tensor, scale: float) -> None:
    """Refuse an architecture where doubling the down projection's output does not add it once more to the layer's
    output (a norm between them, as Gemma 2 and 3 have): there a map folded into that matrix would not be ``X T``."""
    layers = decoder_layers(model)
    s = blocks[0][0]
    outputs, extra = [], {}
    target = fold_target(layers[s - 1], model)
    catch = layers[s - 1].register_forward_hook(lambda _m, _a, out: outputs.append(_hidden_out(out).float()))
    try:
        run_until_stopped(model, input_ids=batch[:1], use_cache=False)
        double = target.register_forward_hook(lambda _m, _a, out: (extra.__setitem__("x", out.float()), out * 2)[1])
        try:
            run_until_stopped(model, input_ids=batch[:1], use_cache=False)
        finally:
            double.remove()
    finally:
        catch.remove()
    difference = outputs[1] - outputs[0]
    tolerance = 1e-4 * float(outputs[0].abs().max()) + 1e-6  # float32 rounding of the residual sums
    if not torch.allclose(difference, extra["x"] * scale, rtol=1e-3, atol=tolerance):
        raise UnsupportedArchitecture(
            f"The linear patch cannot fold into {model.config.model_type}'s down projection: its MLP output passes a "
            f"norm before it joins the residual stream, so a linear map on it is not linear in that matrix.")


def least_squares(xtx: torch.Tensor, xty: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """``T = (XᵀX + ridge·I)⁻¹ XᵀY`` in float64 (a one-line message when the system is singular)."""
    eye = torch.eye(xtx.shape[0], dtype=xtx.dtype, device=xtx.device)
    try:
        return torch.linalg.solve(xtx + ridge * eye, xty)
    except torch.linalg.LinAlgError:
        raise InvalidInput("The linear patch's least-squares system is singular: give more calibration tokens than "
                           "the hidden size, or a ridge above 0.") from None


def cosine_map(x: torch.Tensor, y: torch.Tensor, epochs: int, lr: float, batch: int, seed: int,
               progress: Progress | None = None) -> torch.Tensor:
    """``T`` from the identity, by Adam on ``1 − mean cos(X T, Y)`` over shuffled batches of token rows."""
    generator = torch.Generator().manual_seed(seed)
    weight = nn.Parameter(torch.eye(x.shape[1], dtype=torch.float32))
    optimizer = torch.optim.Adam([weight], lr=lr)
    for epoch in range(epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for start in range(0, x.shape[0], batch):
            rows = order[start:start + batch]
            loss = 1 - nn.functional.cosine_similarity(x[rows] @ weight, y[rows], dim=-1).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if progress is not None:
            progress((epoch + 1) / epochs, f"Linear patch (cosine): epoch {epoch + 1} of {epochs}, "
                                           f"loss {float(loss.detach()):.4f}")
    return weight.detach().double()


def relative_error(part: dict, t: torch.Tensor) -> float:
    """‖X T − Y‖ / ‖Y‖ over the calibration tokens, from the sums: ‖XT − Y‖² = tr(Tᵀ XᵀX T) − 2 tr(Tᵀ XᵀY) + ΣY²."""
    xtx, xty = part["xtx"], part["xty"]
    t = t.to(xtx.device, torch.float64)
    squared = float((t * (xtx @ t)).sum() - 2 * (t * xty).sum()) + part["yy"]
    return max(squared, 0.0) ** 0.5 / part["yy"] ** 0.5


def fit(model: nn.Module, tokenizer, layers, method: str, calibration: Calibration, options: dict,
        progress: Progress | None = None) -> list[Fit]:
    """One :class:`Fit` per block of ``layers`` (removed, in ``model``'s numbering) by ``method``."""
    blocks = index_runs(layers)
    report = progress or (lambda _f, _m: None)
    if method == "lstsq":  # sums only: shared with the other patches of a frontier (prune.patch.sharing)
        found = sharing.sums(model, tokenizer, blocks, calibration, lambda wanted: collect(
            model, tokenizer, wanted, calibration, progress=lambda f, m: report(0.8 * f, m)))
    else:
        found = collect(model, tokenizer, blocks, calibration, keep_rows=True, progress=lambda f, m: report(0.4 * f, m))
    fits = []
    for s, e in blocks:
        part = found[(s, e)]
        if method == "lstsq":
            t = least_squares(part["xtx"], part["xty"], float(options["ridge"]))
        else:
            t = cosine_map(part["x"], part["y"], int(options["epochs"]), float(options["lr"]), int(options["batch"]),
                           int(options["seed"]), lambda f, m: report(0.4 + 0.5 * f, m))
        eye = torch.eye(t.shape[0], dtype=t.dtype)
        fits.append(Fit((s, e), t.cpu(), relative_error(part, t), relative_error(part, eye)))
    return fits


def fold(cut: nn.Module, fits: list[Fit], removed) -> nn.Module:
    """A copy of ``cut`` (the model with ``removed`` gone) whose layer before each block owns its folded down
    projection; every other weight stays shared with ``cut``."""
    patched = clone_layers(cut)
    layers = decoder_layers(patched)
    removed = sorted(removed)
    for item in fits:
        s = item.block[0]
        index = (s - 1) - sum(1 for r in removed if r < s - 1)  # layer s − 1 in the cut model's numbering
        target = fold_target(layers[index], patched)
        weight = target.weight.detach()
        t = item.map.to(weight.device)
        new = (weight.double() @ t) if isinstance(target, Conv1D) else (t.T @ weight.double())  # Conv1D holds Wᵀ
        target.weight = nn.Parameter(new.to(weight.dtype), requires_grad=False)
        if getattr(target, "bias", None) is not None:
            target.bias = nn.Parameter((target.bias.detach().double() @ t).to(weight.dtype), requires_grad=False)
    return patched


def patch(before: nn.Module, cut: nn.Module, tokenizer, layers, method: str, calibration: Calibration, options: dict,
          progress: Progress | None = None) -> nn.Module:
    """``cut`` (``before`` without ``layers``) patched by ReplaceMe: a new model; ``before`` and ``cut`` untouched.

    Its config records each block's fit (``layercut_patched``).
    """
    if tokenizer is None:
        raise InvalidInput("The linear patch fits on calibration text: it needs the model's tokenizer.")
    started = time.perf_counter()
    fits = fit(before, tokenizer, layers, method, calibration, options, progress)
    patched = fold(cut, fits, layers)
    setattr(patched.config, PATCHED_FIELD, {
        "method": method, "seconds": round(time.perf_counter() - started, 2),
        "blocks": [{"block": list(f.block), "error": round(f.error, 4), "unpatched_error": round(f.unpatched, 4)}
                   for f in fits]})
    if progress is not None:
        progress(1.0, "Linear patch: folded into " + ", ".join(f"layer {f.block[0] - 1}" for f in fits))
    return patched
