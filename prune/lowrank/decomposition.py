"""Low-rank decomposition: chosen projections of the decoder layers become two linear maps of rank r.

Method: Chavan, Lele & Gupta, "Surgical Feature-Space Decomposition of LLMs: Why, When and How?"
(ACL 2024, arXiv 2405.13039; code ``nyunAI/SFSD-LLM``, ``layers.py``). A projection y = W x + b,
W [d out, k in], is replaced by ``second(first(x))`` with ``first = Q_rᵀ W`` [r, k] and
``second = Q_r`` [d, r] carrying the bias: W ≈ Q_r Q_rᵀ W, Q_r orthonormal output directions
(:mod:`prune.lowrank.bases`):

* ``weight`` space — W's top r left singular vectors, so that Q_r Q_rᵀ W is the truncated SVD
  U_r Σ_r V_rᵀ (the authors' ``DecomposeLinearSVD``: weight1 = Σ_r V_rᵀ, weight2 = U_r);
* ``feature`` space — the top r eigenvectors of the second moments of the projection's outputs
  W x on calibration tokens (the authors' ``DecomposeLinearEigen.init_lowrank``: Y = X Wᵀ without
  the bias, ``torch.cov``, ``eigh``, the last r columns; weight1 = V_rᵀ W, weight2 = V_r).

Ranks: ``ranks`` gives them (one for every chosen projection, or per (layer, path)); or
``param_ratio``, the fraction of *all* the model's parameters kept (embeddings included, as
:func:`prune.shrink_width` counts), picks one fraction f for every chosen projection, rank
⌊f · d·k/(d+k)⌋ (the authors' rank rule, ``int(kappa * budget)``), the largest f whose count does
not exceed the target. Two factors hold r·(d+k) weights: fewer than d·k, and fewer multiply-adds,
only when r < d·k/(d+k); a projection at a rank where they would not be smaller is stored as the
one dense matrix Q_r Q_rᵀ W instead (same outputs, no gain, no loss).

Calibration is sequential by default, as in :mod:`prune.sparsity.masks`: layer i's projections are read on
the outputs of layers 0…i−1 already decomposed; within a layer every projection is read in one pass
of the layer before any is replaced. ``sequential=False`` reads every basis in one pass of the
*original* model instead (:func:`original_bases`): what the surgical rank search
(:mod:`prune.lowrank.rank_search`) scores its candidates with, so that its result rebuilds exactly.

Where LayerCut differs from the authors' code, on purpose:

* The mean. Their ``init_lowrank`` centres the outputs and computes a correction
  ``b1 = ȳ − ȳ V Vᵀ`` with the *full* eigenvector matrix V (so b1 = 0 up to rounding), then adds
  the mean of the centred outputs (0 by construction): in effect the covariance's eigenvectors
  and no correction (their ``DecomposeLinearSVD`` also drops the projection's own bias). LayerCut
  keeps every bias, and a biased projection's bias takes the correction their code intends,
  b + (I − Q_r Q_rᵀ) ȳ; a projection without a bias (all of Llama's) uses the uncentred second
  moment, the best fit without one (see :mod:`prune.lowrank.bases` for what each choice measured).
* Within a layer they decompose projection after projection in one forward pass (each is built
  lazily on its first input, so o_proj reads the already decomposed q, k, v); LayerCut reads a
  whole layer in one pass, as Wanda and SparseGPT do.
* Calibration: LayerCut's windows (default WikiText-2 validation, 32 × 128 tokens, no padding);
  theirs is one batch of 512 task texts padded to 128 tokens, padding included in the covariance.
* Statistics and eigenvectors in float64 (theirs: float32), read on the input side where it is
  smaller (:mod:`prune.lowrank.bases`), the factors cast back to the model's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from prune.core.experts import refuse_experts
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput, quoted
from prune.lowrank.bases import Basis, factored_module, feature_basis, moments, weight_basis
from prune.core.factored import Factored, Matrix, dense_module, pays
from prune.core.sequential import layer_calls, rows_of, run_layer
from prune.core.layer_files import Rebuild
from prune.core.surgery import clone_layers
from prune.core.sizes import Size, size_of
from prune.core.sizes import check_ratio

SPACES = ("feature", "weight")
DESCRIPTIONS = {  # one line per space, for the app's method picker
    "feature": ("factors every projection of every layer as Q_r (Q_rᵀ W), Q_r the top eigenvectors of its outputs' "
                "second moments on calibration data (Chavan et al. 2024, SFSD-LLM), layer by layer on the already "
                "decomposed layers' outputs; one rank fraction for all, down to the parameters kept."),
    "weight": ("factors every projection by truncated SVD of its weight (U_r, Σ_r V_rᵀ); reads no data. "
               "The baseline Chavan et al. 2024 compare feature space against."),
}
RANKS_FIELD = "layercut_ranks"  # config: one {path: rank} per decoder layer, what was decomposed
FACTORED_FIELD = "layercut_factored"  # config of a checkpoint saved with its factors (loads through LayerCut only)
Ranks = dict[tuple[int, str], int]  # (layer, path in the layer) → rank
Progress = Callable[[float, str], object]


# ---------------------------------------------------------------- what is decomposed, at which ranks (arithmetic)


def check_space(space: str) -> str:
    if space not in SPACES:
        raise InvalidInput(f"Unknown decomposition space {quoted(space)}. Choose one of: {', '.join(SPACES)}.")
    return space


def chosen(size: Size, projections: Iterable[str] | None = None,
           layers: Iterable[int] | None = None) -> list[tuple[int, Matrix]]:
    """The (layer, matrix) pairs to decompose: every dense linear map of the ``layers`` (None: all) whose path
    or last path component is in ``projections`` (None: every one)."""
    count = len(size.matrices)
    picked = list(range(count)) if layers is None else sorted(set(layers))
    if not picked or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in picked):
        raise InvalidInput(f"Layers to decompose are 0…{count - 1}, not {picked}.")
    names = None if projections is None else {str(p) for p in projections}
    if names is not None:
        known = {part for layer in size.matrices for m in layer for part in (m.path, m.path.rpartition(".")[2])}
        unknown = sorted(names - known)
        if unknown or not names:
            offered = sorted({m.path.rpartition(".")[2] for layer in size.matrices for m in layer})
            named = ", ".join(map(quoted, unknown[:3])) or "(none)"
            raise InvalidInput(f"No projection named {named} in this model's layers. "
                               f"Choose among: {', '.join(offered)}.")
    found = [(i, m) for i in picked for m in size.matrices[i]
             if names is None or m.path in names or m.path.rpartition(".")[2] in names]
    if any(m.rank is not None for _, m in found):
        raise InvalidInput("This model is already decomposed: decompose the original instead.")
    return found


def uniform_ranks(size: Size, targets: list[tuple[int, Matrix]], param_ratio: float) -> Ranks:
    """One fraction f for every target, rank ⌊f · d·k/(d+k)⌋ (at least 1): the largest f whose model keeps at
    most ``param_ratio`` of ``size``'s parameters. Ratio 1 decomposes nothing."""
    ratio = check_ratio(param_ratio)
    if ratio == 1:
        return {}
    budget = ratio * size.total

    def at(fraction: float) -> Ranks:
        return {(i, m.path): max(1, math.floor(fraction * m.outputs * m.inputs / (m.outputs + m.inputs) + 1e-9))
                for i, m in targets}

    least = resized(size, at(0.0)).total
    if least > budget:
        raise InvalidInput(f"Rank 1 in every chosen projection still keeps {least / size.total:.1%} of this model's "
                           f"parameters: ask for a ratio of at least {least / size.total:.3f}, or decompose more "
                           "projections.")
    low, high = 0.0, 1.0  # resized(at(low)) fits the budget; the search narrows to the last fraction that does
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if resized(size, at(middle)).total <= budget else (low, middle)
    return at(low)


def check_ranks(size: Size, targets: list[tuple[int, Matrix]], ranks: int | Mapping) -> Ranks:
    """Ranks for ``targets`` from one whole number, or from a mapping (layer, path) → rank naming its own targets;
    each 1 … min(d, k)."""
    if isinstance(ranks, Mapping):
        by_key = {(i, m.path): m for i, m in targets}
        unknown = [key for key in ranks if tuple(key) not in by_key]
        if unknown:
            raise InvalidInput(f"No projection {quoted(unknown[0])} (layer, path) among those chosen to decompose.")
        pairs = [(by_key[tuple(key)], rank, tuple(key)) for key, rank in ranks.items()]
    else:
        pairs = [(m, ranks, (i, m.path)) for i, m in targets]
    found: Ranks = {}
    for matrix, rank, key in pairs:
        top = min(matrix.outputs, matrix.inputs)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= top:
            raise InvalidInput(f"The rank of {matrix.path} in layer {key[0]} is a whole number from 1 to {top}, "
                               f"not {quoted(rank)}.")
        found[key] = rank
    return found


def plan(size: Size, *, param_ratio: float | None = None, ranks: int | Mapping | None = None,
         projections: Iterable[str] | None = None, layers: Iterable[int] | None = None) -> Ranks:
    """The rank of every projection to decompose: from ``param_ratio`` or ``ranks`` (exactly one)."""
    if (param_ratio is None) == (ranks is None):
        raise InvalidInput("Give either a parameter ratio or ranks to decompose, not both or neither.")
    if isinstance(ranks, Mapping) and (projections is not None or layers is not None):
        raise InvalidInput("Ranks given per (layer, projection) name their own projections: leave out the "
                           "projections and layers.")
    targets = chosen(size, projections, layers)
    if param_ratio is not None:
        return uniform_ranks(size, targets, param_ratio)
    return check_ranks(size, targets, ranks)


def resized(size: Size, ranks: Ranks) -> Size:
    """``size`` with the ranked projections decomposed (biases kept), by arithmetic."""
    layers, matrices = list(size.layers), []
    for index, layer in enumerate(size.matrices):
        row = []
        for m in layer:
            rank = ranks.get((index, m.path))
            if rank is not None:
                after = replace(m, rank=rank)
                layers[index] += after.params - m.params
                m = after
            row.append(m)
        matrices.append(tuple(row))
    return replace(size, layers=tuple(layers), matrices=tuple(matrices))


def owned_params(size: Size, ranks: Ranks) -> int:
    """Parameters a decomposed model owns: each ranked projection's factors (or its dense product where factors
    would not pay) and its bias."""
    return sum(replace(m, rank=ranks[(i, m.path)]).params + (m.outputs if m.bias else 0)
               for i, layer in enumerate(size.matrices) for m in layer if (i, m.path) in ranks)


# ---------------------------------------------------------------- the decomposed model


def decompose(model: nn.Module, tokenizer=None, *, space: str = "feature", param_ratio: float | None = None,
              ranks: int | Mapping | None = None, projections: Iterable[str] | None = None,
              layers: Iterable[int] | None = None, calibration: Calibration | None = None,
              progress: Progress | None = None, batch_size: int = 8, sequential: bool = True) -> nn.Module:
    """A copy of ``model`` whose chosen projections are two low-rank linear maps; ``model`` is untouched.

    ``param_ratio`` (fraction of all parameters kept) or ``ranks`` (a whole number for every chosen
    projection, or {(layer, path): rank}) sets the ranks; ``projections`` are paths in a layer or
    their last component ("q_proj"; None: every linear map), ``layers`` the decoder layers (None: all).
    Feature space reads ``calibration`` (None: the built-in text) through the model and needs the
    tokenizer; ``sequential=False`` reads it on the original's activations (see the module docstring).
    ``progress(fraction, message)`` is called after each layer (raising there cancels).
    """
    space = check_space(space)
    refuse_experts(model, "Low-rank factoring")
    size = size_of(model)
    found = plan(size, param_ratio=param_ratio, ranks=ranks, projections=projections, layers=layers)
    element = next(model.parameters()).element_size()
    # a clone's layers, or, for a model read from disk, one layer at a time into files (read back factored)
    rebuild = Rebuild(model, owned_params(size, found) * element, reshape=with_factor_shapes)
    count = len(size.layers)
    record: list[dict[str, int]] = [{} for _ in range(count)]
    for (index, path), rank in found.items():
        record[index][path] = rank
    setattr(rebuild.config, RANKS_FIELD, record)
    report = progress or (lambda _fraction, _message: None)
    if not found and not rebuild.streamed:
        return rebuild.model()
    reads = space == "feature" and bool(found)  # feature space reads the calibration through the layers
    if reads:
        _need_tokenizer(tokenizer)
        windows = token_windows(tokenizer, calibration or Calibration()).to(rebuild.device)
        hidden, calls = layer_calls(rebuild.source, windows, batch_size)
        report(0.0, f"Feature-space decomposition: calibration inputs read ({len(windows)} windows)")
    last = max((index for index, _ in found), default=-1)
    what = f"{space.capitalize()}-space decomposition"
    for index, layer in rebuild.layers():
        if index <= last:
            own = [c[index] for c in calls] if reads else None
            seen = moments(layer, record[index], hidden, own) if reads and record[index] else {}
            if reads and not sequential and index < last:  # the next layer reads the original's outputs
                hidden = run_layer(layer, hidden, own)
            for path, rank in record[index].items():
                module = layer.get_submodule(path)
                basis = feature_basis(module, seen[path]) if reads else weight_basis(rows_of(module))
                put(layer, path, factored_module(module, basis, rank))
            del seen
            if reads and sequential and index < last:
                hidden = run_layer(layer, hidden, own)  # the next layer reads the decomposed outputs
            report((index + 1) / (last + 1), f"{what}: layer {index + 1} of {last + 1}")
        rebuild.done(index, layer)
        if index >= last and not rebuild.streamed:
            break  # the clone's later layers are the original's, shared
    return rebuild.model()


def _need_tokenizer(tokenizer) -> None:
    if tokenizer is None:
        raise InvalidInput("Feature-space decomposition reads calibration activations: it needs the model's tokenizer.")


@torch.no_grad()
def original_bases(model: nn.Module, tokenizer, space: str, keep: Ranks, calibration: Calibration | None = None,
                   batch_size: int = 8) -> Iterator[tuple[tuple[int, str], Basis]]:
    """((layer, path), basis) for every entry of ``keep``, layer by layer, each basis cut to its first
    ``keep[(layer, path)]`` directions and read on ``model`` as it is (feature space: one pass of the calibration
    windows through its layers). One at a time, so that a caller can use each before the next is computed."""
    layers = decoder_layers(model)
    if space == "weight":
        for (i, path), rank in sorted(keep.items()):
            yield (i, path), weight_basis(rows_of(layers[i].get_submodule(path))).first(rank)
        return
    _need_tokenizer(tokenizer)
    windows = token_windows(tokenizer, calibration or Calibration()).to(next(model.parameters()).device)
    hidden, calls = layer_calls(model, windows, batch_size)
    wanted: dict[int, list[str]] = {}
    for i, path in sorted(keep):
        wanted.setdefault(i, []).append(path)
    for index, layer in enumerate(layers[: max(wanted) + 1]):
        own = [c[index] for c in calls]
        if index in wanted:
            seen = moments(layer, wanted[index], hidden, own)
            for path in wanted[index]:
                yield (index, path), feature_basis(layer.get_submodule(path), seen[path]).first(keep[(index, path)])
            del seen
        if index < max(wanted):
            hidden = run_layer(layer, hidden, own)


def put(layer: nn.Module, path: str, module: nn.Module) -> None:
    """Replace the module at ``path`` in ``layer`` (a clone's own module objects, so the original never sees it)."""
    owner, _, leaf = path.rpartition(".")
    parent = layer.get_submodule(owner) if owner else layer
    parent._modules[leaf] = module


def ranks_of(model: nn.Module) -> Ranks:
    """The ranks a decomposed (or reloaded) model's config records: (layer, path) → rank."""
    record = getattr(model.config, RANKS_FIELD, None) or []
    return {(index, path): int(rank) for index, row in enumerate(record) for path, rank in (row or {}).items()}


# ---------------------------------------------------------------- saving


def merged(model: nn.Module, *, allocate: bool = True) -> nn.Module:
    """``model`` itself, or, when it holds factored projections, a view where each is one dense matrix again
    (``second @ first``, in the module type it replaced): what any transformers loads as a standard checkpoint.

    ``allocate=False`` gives broadcast zeros with the right shapes and dtypes: for computing a checkpoint's
    size, not for writing it. The ranks stay recorded in the config.
    """
    if not any(isinstance(m, Factored) for m in decoder_layers(model).modules()) and \
            not getattr(model.config, FACTORED_FIELD, False):
        return model
    view = clone_layers(model)
    if hasattr(view.config, FACTORED_FIELD):  # reloaded from a factored checkpoint: this one is dense
        delattr(view.config, FACTORED_FIELD)
    for layer in decoder_layers(view):
        for path, module in [(p, m) for p, m in layer.named_modules() if isinstance(m, Factored)]:
            if allocate:
                dense = module.dense()
            else:
                weight = module.first.weight
                zeros = torch.zeros((), dtype=weight.dtype, device=weight.device)
                dense = dense_module(zeros.expand(module.out_features, module.in_features), module.second.bias,
                                     module.conv1d)
            put(layer, path, dense)
    return view


def factored_view(model: nn.Module) -> nn.Module:
    """``model`` with its factors, its config copy marked :data:`FACTORED_FIELD`: what a factored checkpoint saves.

    Smaller on disk than the merged form wherever factors pay, but only :func:`prune.load_model` reads it (it
    rebuilds the factored modules with :func:`with_factor_shapes` before loading the weights).
    """
    view = clone_layers(model)
    setattr(view.config, FACTORED_FIELD, True)
    return view


def with_factor_shapes(model: nn.Module) -> nn.Module:
    """Put in ``model`` (dense, freshly built from a factored checkpoint's config) a :class:`Factored` of the
    recorded rank wherever factors pay, holding uninitialised tensors for the checkpoint's weights to fill."""
    for (index, path), rank in ranks_of(model).items():
        layer = decoder_layers(model)[index]
        module = layer.get_submodule(path)
        rows = rows_of(module)
        if pays(*rows.shape, rank):
            bias = getattr(module, "bias", None)
            empty = torch.empty((rank, rows.shape[1]), dtype=rows.dtype, device=rows.device)
            put(layer, path, Factored(empty, torch.empty((rows.shape[0], rank), dtype=rows.dtype, device=rows.device),
                                       None if bias is None else torch.empty_like(bias), isinstance(module, Conv1D)))
    return model
