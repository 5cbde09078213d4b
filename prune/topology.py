"""Zigzag-persistence layer importance (Gardinazzi et al., "Persistent Topological Features
in Large Language Models", arXiv 2410.11042, ICML 2025), as pure functions.

What we follow
--------------
The paper's pipeline, as implemented in the authors' released code
(github.com/YuriGardinazzi/conferenceProject: ``src/zigzag/zigzag_DL.py``,
``src/plots/post_process.py``, ``src/benchmark/benchmark.py``):

1. At each representation ("layer" of the zigzag) take the last-token states of the N prompts,
   build the k-NN graph (k = 5; sklearn ``kneighbors_graph``, then symmetrised: an edge i-j
   exists if j is among i's k nearest neighbours or i among j's) and its clique (flag) complex.
   Triangles suffice for 1-dimensional homology, which is all the pruning criterion uses.
2. Zigzag filtration K_0 ⊇ K_0∩K_1 ⊆ K_1 ⊇ ... : layer l at time 2l, the intersection of
   layers l and l+1 at time 2l+1 (a simplex is in the intersection iff it is in both).
   Zigzag persistence (dionysus) gives bars [b, d): alive at every time t with b <= t < d.
3. "Effective" bars on layers: a bar is alive at layer m iff b <= 2m < d, so it covers the
   layers ceil(b/2) .. ceil(d/2) - 1 (the authors' ``find_eff_pis``); bars living only in an
   intersection cover no layer and are ignored.
4. Inter-layer persistence (the paper's persistence-similarity matrix, ``find_ph_sim`` and
   ``similarity_persistance``), for H_1 and layers i, j::

       P(i, j)   = #bars alive at every layer between min(i, j) and max(i, j)
       beta_j    = P(j, j)                     (the Betti number b_1 of layer j)
       ILP(i, j) = P(i, j) / beta_j
       r_i       = (1 / n) * sum_j ILP(i, j)   (n = number of representations)

   High r_i means the 1-cycles seen at i persist through the other layers: the representation
   changes the topology little, and the paper prunes those layers (``layers_to_cut_given_r``):
   the "10%" cut is {i : r_i >= 0.9 * max r}, the "20%" cut {i : r_i >= 0.8 * max r}.

Choices we had to make
----------------------
* Positions vs layers. The authors take representation i *inside* layer i (its
  post-attention layernorm) plus the final norm, and drop the final norm's score. We get the
  residual stream: ``states[0]`` = embeddings (input of layer 0), ``states[l + 1]`` = output of
  layer l, so layer l transforms position l into position l + 1. We compute r over the L + 1
  positions exactly as above and score layer l by the mean of its input and output positions,
  ``(r_l + r_{l+1}) / 2`` (the midpoint of the layer, where the paper's representation sits).
  An identity layer (``states[l + 1] == states[l]``) then gets the largest score.
* beta_j = 0 (no 1-cycle at layer j): the released code divides 0 / 0; we count that term as 0
  and keep dividing the sum by n (as the authors' rebuttal notebook does).
* Duplicate points (prompts ending in the same token share their last-token state). We keep the
  N prompts as N distinct vertices at every layer, as the authors do (sklearn excludes only the
  query's own index, so a duplicate is a legitimate neighbour at distance 0). A point is never
  its own neighbour (a self-edge crashes dionysus). Exact duplicates are detected and given
  distance exactly 0, and ties are broken by the lower index, so the graph is deterministic
  (floating-point Gram-matrix distances of identical rows are not exactly 0). A group of
  identical points becomes a clique, which adds no 1-cycle.
* If every score is 0 (no 1-cycles anywhere) there is no signal, and the cuts are empty rather
  than "every layer".
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from prune.errors import InvalidInput, MissingDependency

__all__ = [
    "knn_edges",
    "clique_triangles",
    "zigzag_bars",
    "inter_layer_persistence",
    "layer_persistence",
    "persistence_cuts",
]

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


def zigzag_bars(
    edge_sets: Sequence[Iterable[tuple[int, int]]],
    triangle_sets: Sequence[Iterable[tuple[int, int, int]]] | None,
    num_vertices: int,
    dim: int = 1,
) -> list[tuple[float, float]]:
    """Zigzag persistence bars (layer l at time 2l, intersections at 2l+1) of one dimension."""
    num_layers = len(edge_sets)
    if num_layers == 0:
        return []
    edges = []
    for l, es in enumerate(edge_sets):
        norm = set()
        for a, b in es:
            a, b = int(a), int(b)
            if a == b:
                raise ValueError(f"Self-edge ({a}, {a}) at layer {l}: dionysus cannot take it.")
            if not (0 <= a < num_vertices and 0 <= b < num_vertices):
                raise ValueError(f"Edge ({a}, {b}) at layer {l} has a vertex out of range.")
            norm.add((a, b) if a < b else (b, a))
        edges.append(norm)
    if triangle_sets is None:
        triangles = [clique_triangles(es) for es in edges]
    else:
        if len(triangle_sets) != num_layers:
            raise ValueError("edge_sets and triangle_sets must have one entry per layer.")
        triangles = []
        for l, ts in enumerate(triangle_sets):
            norm_t = set()
            for t in ts:
                a, b, c = sorted(int(v) for v in t)
                if not {(a, b), (a, c), (b, c)} <= edges[l]:
                    raise ValueError(f"Triangle {(a, b, c)} at layer {l} lacks one of its edges.")
                norm_t.add((a, b, c))
            triangles.append(norm_t)

    present: dict[tuple[int, ...], list[int]] = {}
    for l in range(num_layers):
        for s in edges[l]:
            present.setdefault(s, []).append(l)
        for s in triangles[l]:
            present.setdefault(s, []).append(l)

    d = _dionysus()
    simplices: list[list[int]] = [[v] for v in range(num_vertices)]
    times: list[list[int]] = [[0] for _ in range(num_vertices)]  # vertices live throughout
    for s in sorted(present, key=lambda s: (len(s), s)):  # faces before cofaces
        simplices.append(list(s))
        times.append(_presence_times(present[s], num_layers))
    _, dgms, _ = d.zigzag_homology_persistence(d.Filtration(simplices), times)
    if len(dgms) <= dim:
        return []
    bars = [(float(p.birth), float(p.death)) for p in dgms[dim]]
    return sorted(b for b in bars if b[1] > b[0])


def inter_layer_persistence(bars: Iterable[tuple[float, float]], num_layers: int) -> np.ndarray:
    """The paper's r_i = mean_j P(i, j) / beta_j for each zigzag layer i (see module doc)."""
    pairs = np.zeros((num_layers, num_layers), dtype=np.float64)
    for birth, death in bars:
        first = math.ceil(birth / 2)
        end = num_layers if math.isinf(death) else min(math.ceil(death / 2), num_layers)
        if end > first:
            pairs[first:end, first:end] += 1.0  # alive at every layer between i and j
    betti = np.diag(pairs).copy()
    ratio = np.divide(pairs, betti[None, :], out=np.zeros_like(pairs), where=betti[None, :] > 0)
    return ratio.mean(axis=1)


def layer_persistence(states: np.ndarray, k: int = 5) -> np.ndarray:
    """Per-layer inter-layer persistence (higher = topology kept = more removable)."""
    if hasattr(states, "detach"):  # a torch tensor
        states = states.detach().cpu().float().numpy()
    x = np.asarray(states)
    if x.ndim != 3 or x.shape[0] < 2:
        raise InvalidInput(
            f"Expected hidden states of shape [layers + 1, prompts, hidden], got {x.shape}."
        )
    positions, n, _ = x.shape
    edge_sets = [knn_edges(x[p], k) for p in range(positions)]
    bars = zigzag_bars(edge_sets, None, n, dim=1)
    r = inter_layer_persistence(bars, positions)
    return (r[:-1] + r[1:]) / 2.0  # layer l maps position l to l + 1


def persistence_cuts(
    scores: np.ndarray, fractions: Sequence[float] = (0.9, 0.8)
) -> dict[str, list[int]]:
    """The paper's cuts: layers scoring >= fraction * max, keyed "10%" (0.9), "20%" (0.8)."""
    s = np.asarray(scores, dtype=np.float64)
    top = float(np.max(s)) if s.size else 0.0
    cuts: dict[str, list[int]] = {}
    for f in fractions:
        key = f"{round((1.0 - f) * 100)}%"
        if not (top > 0 and math.isfinite(top)):
            cuts[key] = []  # no 1-cycles anywhere: no signal, cut nothing
        else:
            cuts[key] = [int(i) for i in np.flatnonzero(s >= f * top)]
    return cuts
