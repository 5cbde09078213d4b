"""Zigzag-persistence layer importance (Gardinazzi et al., "Persistent Topological Features
in Large Language Models", arXiv 2410.11042, ICML 2025), as pure functions.

What we follow
--------------
The authors' released code (github.com/RitAreaSciencePark/ZigZagLLMs:
``src/representation/rep-extraction``, ``src/zigzag/run_fast_zigzag.py``,
``src/benchmark/post_process.py``, ``src/benchmark/benchmark.py``):

1. Representations (built in ``prune.core.hidden.norm_last_tokens``): one point per whole text, the
   last token's output of every layer's pre-feed-forward norm (``post_attention_layernorm``)
   and of the final norm: L + 1 representations, the last one the final norm's.
2. At each representation build the k-NN graph (k = 5; sklearn ``kneighbors_graph``, then
   symmetrised: an edge i-j exists if j is among i's k nearest neighbours or i among j's) and
   its clique (flag) complex. The authors expand to dimension 4; 1-dimensional homology, all the
   criterion uses, depends only on the 2-skeleton, so triangles give the same H_1 bars.
3. Zigzag filtration K_0 ⊇ K_0∩K_1 ⊆ K_1 ⊇ ... : representation l at time 2l, the intersection
   of l and l+1 at time 2l+1 (a simplex is in the intersection iff it is in both). Zigzag
   persistence (dionysus) gives bars [b, d): alive at every time t with b <= t < d. The
   authors' CSV counts the same complexes from 1 and ends with every simplex removed, so its
   (birth, death) is our (b + 1, d + 1), with d = inf written as 2 (L + 1) (``authors_rows``).
4. "Effective" bars (the authors' ``find_eff_pis``): a bar is alive at representation m iff
   b <= 2m < d, so it covers ceil(b/2) .. ceil(d/2) - 1; bars living only in an intersection
   cover none and are ignored.
5. Inter-layer persistence (``find_ph_sim`` and ``similarity_persistance``), for H_1 and
   representations i, j::

       P(i, j)   = #bars alive at every representation between min(i, j) and max(i, j)
       beta_j    = P(j, j)                     (the Betti number b_1 of representation j)
       ILP(i, j) = P(i, j) / beta_j
       r_i       = (1 / n) * sum_j ILP(i, j)   (n = L + 1 representations)

   High r_i means the 1-cycles seen at i persist through the other representations: layer i
   changes the topology little, and the authors prune it (``layers_to_cut_given_r``): layer i
   (i < L; the final norm is never cut) is in the cut named "10%" if r_i >= 0.9 * max r and in
   "20%" if r_i >= 0.8 * max r, the max taken over all L + 1 entries. The names are the
   authors' thresholds, not shares of layers: a cut can remove any number of layers.

Choices we had to make
----------------------
* beta_j = 0 (no 1-cycle at representation j): the authors' ``benchmark.py`` divides 0 / 0,
  which makes every r_i NaN, and then cuts nothing. We count those terms as 0 and keep dividing
  by n (their rebuttal notebook also sets 0 / 0 to 0), so r_j = 0 and the other layers keep a
  defined score and cut. This differs from their cuts only when some, but not all,
  representations lack 1-cycles (none of their released diagrams with k >= 2); callers warn
  (``betti_numbers``).
* Duplicate points (texts whose last-token states coincide). We keep the N texts as N distinct
  vertices at every representation, as the authors do (sklearn excludes only the query's own
  index, so a duplicate is a legitimate neighbour at distance 0). A point is never its own
  neighbour (a self-edge crashes dionysus). Exact duplicates are detected and given distance
  exactly 0, and ties are broken by the lower index, so the graph is deterministic (sklearn's
  tie order is an implementation detail). A group of identical points becomes a clique, which
  adds no 1-cycle.
* If every r is 0 (no 1-cycles anywhere) there is no signal, and the cuts are empty.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from prune.core.errors import InvalidInput, MissingDependency

__all__ = [
    "knn_edges",
    "clique_triangles",
    "zigzag_diagrams",
    "zigzag_bars",
    "knn_zigzag",
    "inter_layer_persistence",
    "betti_numbers",
    "PERSISTENCE_THRESHOLDS",
    "persistence_cuts",
    "authors_rows",
    "bars_from_authors_rows",
]

# Cut name → threshold on r / max r (the authors' ``p``). The names are theirs and name the
# threshold: the "10%" cut takes every layer within 10 % of the most persistent, however many.
PERSISTENCE_THRESHOLDS = {"10%": 0.9, "20%": 0.8}

_INSTALL_HINT = (
    "The zigzag-persistence method needs the 'dionysus' package: run "
    "`pip install dionysus==2.2.3` (it compiles from source and needs the Debian packages "
    "libboost1.81-dev and cmake)."
)


def _dionysus():
    """Import dionysus lazily, so the rest of LayerCut works without it."""
    try:
        import dionysus
    except ImportError as exc:
        raise MissingDependency(_INSTALL_HINT) from exc
    return dionysus


def knn_edges(points: np.ndarray, k: int) -> set[tuple[int, int]]:
    """Symmetrised k-NN graph: the 1-skeleton of the paper's per-layer complex."""
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2:
        raise InvalidInput(f"Expected points of shape [N, D], got shape {x.shape}.")
    n = x.shape[0]
    if not 1 <= k < n:
        raise InvalidInput(f"k-NN with k = {k} needs more than k points; got {n} points.")
    if not np.all(np.isfinite(x)):
        raise InvalidInput("The hidden states contain NaN or infinite values.")
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
    np.maximum(d2, 0.0, out=d2)
    _, group = np.unique(x, axis=0, return_inverse=True)
    group = group.reshape(-1)
    d2[group[:, None] == group[None, :]] = 0.0  # exact duplicates: distance exactly 0
    np.fill_diagonal(d2, np.inf)  # never one's own neighbour
    nbrs = np.argsort(d2, axis=1, kind="stable")[:, :k]  # ties: lower index first
    i = np.repeat(np.arange(n), k)
    j = nbrs.reshape(-1)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return set(zip(lo.tolist(), hi.tolist()))


def clique_triangles(edges: Iterable[tuple[int, int]]) -> set[tuple[int, int, int]]:
    """Triangles of the clique (flag) complex of a graph: enough for 1-dimensional homology."""
    adj: dict[int, set[int]] = {}
    for a, b in edges:
        a, b = (a, b) if a < b else (b, a)
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set())
    tris = set()
    for a, higher in adj.items():
        for b in higher:
            for c in higher & adj[b]:
                tris.add((a, b, c))  # a < b < c since c in adj[b] (higher than b)
    return tris


def _presence_times(layers: Sequence[int], num_layers: int) -> list[int]:
    """dionysus insertion/removal times of a simplex present at the given (sorted) layers."""
    times: list[int] = []
    start = prev = layers[0]
    for m in list(layers[1:]) + [None]:
        if m is not None and m == prev + 1:
            prev = m
            continue
        times.append(2 * start)  # inserted with layer `start`
        if prev < num_layers - 1:
            times.append(2 * prev + 1)  # removed in the intersection prev ∩ prev+1
        if m is not None:
            start = prev = m
    return times


def zigzag_diagrams(
    edge_sets: Sequence[Iterable[tuple[int, int]]],
    triangle_sets: Sequence[Iterable[tuple[int, int, int]]] | None,
    num_vertices: int,
    dims: Sequence[int] = (0, 1),
) -> dict[int, list[tuple[float, float]]]:
    """Zigzag bars per homology dimension (representation l at time 2l, intersections at 2l+1).

    Only dimensions 0 and 1 are exact: the complexes stop at triangles.
    """
    num_layers = len(edge_sets)
    if num_layers == 0:
        return {dim: [] for dim in dims}
    edges = [_checked_edges(es, layer, num_vertices) for layer, es in enumerate(edge_sets)]
    if triangle_sets is None:
        triangles = [clique_triangles(es) for es in edges]
    else:
        if len(triangle_sets) != num_layers:
            raise ValueError("edge_sets and triangle_sets must have one entry per layer.")
        triangles = [_checked_triangles(ts, layer, edges[layer]) for layer, ts in enumerate(triangle_sets)]

    present: dict[tuple[int, ...], list[int]] = {}
    for layer in range(num_layers):
        for s in edges[layer] | triangles[layer]:
            present.setdefault(s, []).append(layer)

    d = _dionysus()
    simplices: list[list[int]] = [[v] for v in range(num_vertices)]
    times: list[list[int]] = [[0] for _ in range(num_vertices)]  # vertices live throughout
    for s in sorted(present, key=lambda s: (len(s), s)):  # faces before cofaces
        simplices.append(list(s))
        times.append(_presence_times(present[s], num_layers))
    _, dgms, _ = d.zigzag_homology_persistence(d.Filtration(simplices), times)
    diagrams = {}
    for dim in dims:
        bars = [(float(p.birth), float(p.death)) for p in dgms[dim]] if dim < len(dgms) else []
        diagrams[dim] = sorted(b for b in bars if b[1] > b[0])  # the authors drop empty bars too
    return diagrams


def _checked_edges(es, layer: int, num_vertices: int) -> set[tuple[int, int]]:
    norm = set()
    for a, b in es:
        a, b = int(a), int(b)
        if a == b:
            raise ValueError(f"Self-edge ({a}, {a}) at layer {layer}: dionysus cannot take it.")
        if not (0 <= a < num_vertices and 0 <= b < num_vertices):
            raise ValueError(f"Edge ({a}, {b}) at layer {layer} has a vertex out of range.")
        norm.add((a, b) if a < b else (b, a))
    return norm


def _checked_triangles(ts, layer: int, edges: set[tuple[int, int]]) -> set[tuple[int, int, int]]:
    norm = set()
    for t in ts:
        a, b, c = sorted(int(v) for v in t)
        if not {(a, b), (a, c), (b, c)} <= edges:
            raise ValueError(f"Triangle {(a, b, c)} at layer {layer} lacks one of its edges.")
        norm.add((a, b, c))
    return norm


def zigzag_bars(edge_sets, triangle_sets, num_vertices: int, dim: int = 1) -> list[tuple[float, float]]:
    """The bars of one dimension (see ``zigzag_diagrams``)."""
    return zigzag_diagrams(edge_sets, triangle_sets, num_vertices, dims=(dim,))[dim]


def knn_zigzag(states, k: int = 5) -> dict[int, list[tuple[float, float]]]:
    """H_0 and H_1 zigzag bars of the k-NN clique complexes of ``states`` [representations, N, D]."""
    if hasattr(states, "detach"):  # a torch tensor
        states = states.detach().cpu().float().numpy()
    x = np.asarray(states)
    if x.ndim != 3 or x.shape[0] < 2:
        raise InvalidInput(
            f"Expected states of shape [representations, points, hidden] with at least 2 "
            f"representations, got {x.shape}."
        )
    edge_sets = [knn_edges(x[p], k) for p in range(x.shape[0])]
    return zigzag_diagrams(edge_sets, None, x.shape[1])


def _pair_counts(bars: Iterable[tuple[float, float]], num_layers: int) -> np.ndarray:
    """P(i, j): bars alive at every representation between i and j (the authors' phsim)."""
    spans = np.array([(b, d) for b, d in bars], dtype=np.float64).reshape(-1, 2)
    first = np.ceil(spans[:, 0] / 2)
    end = np.minimum(np.ceil(np.minimum(spans[:, 1], 2.0 * num_layers) / 2), num_layers)
    pairs = np.zeros((num_layers, num_layers), dtype=np.float64)
    live = end > first
    covered, counts = np.unique(np.stack([first[live], end[live]], axis=1).astype(int), axis=0, return_counts=True)
    for (lo, hi), count in zip(covered.tolist(), counts.tolist()):
        pairs[lo:hi, lo:hi] += count  # alive at every representation between i and j
    return pairs


def inter_layer_persistence(bars: Iterable[tuple[float, float]], num_layers: int) -> np.ndarray:
    """The authors' r_i = mean_j P(i, j) / beta_j for each representation i (beta_j = 0 terms: 0)."""
    pairs = _pair_counts(bars, num_layers)
    betti = np.diag(pairs).copy()
    ratio = np.divide(pairs, betti[None, :], out=np.zeros_like(pairs), where=betti[None, :] > 0)
    return ratio.mean(axis=1)


def betti_numbers(bars: Iterable[tuple[float, float]], num_layers: int) -> np.ndarray:
    """beta at each representation (bars alive there); where beta_1 = 0 the authors' r is 0 / 0."""
    return np.diag(_pair_counts(bars, num_layers)).astype(int)


def persistence_cuts(persistence: np.ndarray) -> dict[str, list[int]]:
    """The authors' cuts: layers i < L with r_i >= threshold * max r (the max over all L + 1 r).

    ``persistence`` holds r for the L layers' representations and, last, the final norm's.
    """
    r = np.asarray(persistence, dtype=np.float64)
    top = float(np.max(r)) if r.size else 0.0
    signal = r.size > 1 and top > 0 and math.isfinite(top)  # no 1-cycle anywhere: no signal, no cut
    return {name: [int(i) for i in np.flatnonzero(r[:-1] >= p * top)] if signal else []
            for name, p in PERSISTENCE_THRESHOLDS.items()}


def authors_rows(diagrams: dict[int, list[tuple[float, float]]], representations: int) -> list[tuple[int, int, int]]:
    """Bars as rows (dimension, birth, death) of the authors' CSV (their times: ours + 1, inf → 2·reps)."""
    end = 2 * representations
    rows = []
    for dim in sorted(diagrams):
        for birth, death in diagrams[dim]:
            if not (0 <= birth < death and (math.isinf(death) or death <= end - 2)):
                raise InvalidInput(f"Bar ({birth}, {death}) does not fit {representations} representations.")
            rows.append((int(dim), int(birth) + 1, end if math.isinf(death) else int(death) + 1))
    return rows


def bars_from_authors_rows(rows: Iterable[Sequence[int]], representations: int) -> dict[int, list[tuple[float, float]]]:
    """The authors' CSV rows → bars per dimension in our times; their depth must be ``representations``.

    Every vertex lives to the end of their zigzag, so the last death is always 2·reps: a file
    whose last death differs comes from a model of another depth.
    """
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    end = 2 * representations
    last = int(rows[:, 2].max()) if len(rows) else None
    if last != end:
        found = "no bars" if last is None else f"{last // 2 - 1} layers + the final norm (last death {last})"
        raise InvalidInput(f"The zigzag file describes {found}, but the model has {representations - 1} "
                           f"layers + the final norm (last death {end}); "
                           "give the model (or depth) it was computed for.")
    bad = (rows[:, 1] < 1) | (rows[:, 1] >= rows[:, 2])
    if bad.any():
        dim, birth, death = rows[np.argmax(bad)].tolist()
        raise InvalidInput(f"Bad bar (dimension {dim}, birth {birth}, death {death}) in the zigzag file.")
    diagrams: dict[int, list[tuple[float, float]]] = {}
    for dim in np.unique(rows[:, 0]).tolist():
        births, deaths = rows[rows[:, 0] == dim, 1:].T.astype(np.float64)
        deaths = np.where(deaths == end, math.inf, deaths - 1)
        diagrams[dim] = sorted(zip((births - 1).tolist(), deaths.tolist()))
    return diagrams
