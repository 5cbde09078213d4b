"""Known-answer tests for prune.topology (zigzag-persistence layer importance)."""

import sys

import numpy as np
import pytest

from prune.errors import InvalidInput, MissingDependency
from prune.topology import (
    clique_triangles,
    inter_layer_persistence,
    knn_edges,
    layer_persistence,
    persistence_cuts,
    zigzag_bars,
)

def needs_dionysus(test):
    """dionysus is part of the set-up; a missing one must fail these tests, not skip them."""
    return test

INF = float("inf")
SQUARE = {(0, 1), (1, 2), (2, 3), (0, 3)}  # a 4-cycle: one 1-dimensional hole, no triangle
SQUARE_B = {(4, 5), (5, 6), (6, 7), (4, 7)}


# --- knn_edges -------------------------------------------------------------------------------


def _line(xs):
    return np.array(xs, dtype=np.float64)[:, None]


def test_knn_edges_duplicates_are_neighbours_ties_by_lower_index():
    pts = _line([0, 0, 1, 10, 10, 12])
    # 0<->1 and 3<->4 are duplicates; 2 is at distance 1 from both 0 and 1 (tie -> 0);
    # 5 is at distance 2 from both 3 and 4 (tie -> 3).
    assert knn_edges(pts, 1) == {(0, 1), (0, 2), (3, 4), (3, 5)}
    assert knn_edges(pts, 2) == {(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)}


def test_knn_edges_more_duplicates_than_k_never_self():
    pts = _line([0, 0, 0, 3])  # three identical points: a query may meet a twin before itself
    assert knn_edges(pts, 1) == {(0, 1), (0, 2), (0, 3)}
    # with k = 2 the far point 3 also takes the two lowest-index twins
    assert knn_edges(pts, 2) == {(0, 1), (0, 2), (1, 2), (0, 3), (1, 3)}


def test_knn_edges_high_dimensional_duplicates():
    rng = np.random.default_rng(1)
    base = 1000.0 + 50.0 * rng.standard_normal((30, 64))  # large norms: Gram rounding != 0
    pts = np.concatenate([base, base[[3, 7, 7]]])  # 30 = twin of 3; 31, 32 = twins of 7
    edges = knn_edges(pts, 5)
    assert all(i < j for i, j in edges)  # undirected, i < j, hence no self edge
    assert {(3, 30), (7, 31), (7, 32), (31, 32)} <= edges
    # every point has at least k distinct neighbours
    degree = np.zeros(len(pts), int)
    for i, j in edges:
        degree[i] += 1
        degree[j] += 1
    assert degree.min() >= 5


def test_knn_edges_matches_brute_force():
    rng = np.random.default_rng(2)
    pts = rng.standard_normal((25, 7))
    d = np.linalg.norm(pts[:, None] - pts[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    expected = {(min(i, j), max(i, j)) for i in range(25) for j in np.argsort(d[i])[:3]}
    assert knn_edges(pts, 3) == expected


def test_knn_edges_rejects_too_few_points():
    with pytest.raises(InvalidInput):
        knn_edges(np.zeros((5, 3)), 5)


# --- clique_triangles ------------------------------------------------------------------------


def test_clique_triangles():
    assert clique_triangles(SQUARE) == set()
    assert clique_triangles(SQUARE | {(0, 2)}) == {(0, 1, 2), (0, 2, 3)}
    k4 = {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)}
    assert clique_triangles(k4) == {(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)}
    assert clique_triangles({(1, 0), (2, 1), (0, 2)}) == {(0, 1, 2)}  # unordered input


# --- zigzag_bars: hand-computed zigzags (layer l at time 2l, intersection l|l+1 at 2l+1) --------


@needs_dionysus
def test_nothing_changes_bar_lives_through():
    assert zigzag_bars([SQUARE] * 3, None, 4) == [(0.0, INF)]
    assert zigzag_bars([SQUARE], None, 4) == [(0.0, INF)]


@needs_dionysus
def test_square_filled_at_layer_3():
    # the diagonal 0-2 (and its two clique triangles) arrive with layer 3, at time 6
    assert zigzag_bars([SQUARE] * 3 + [SQUARE | {(0, 2)}], None, 4) == [(0.0, 6.0)]


@needs_dionysus
def test_square_broken_at_layer_3():
    # edge 2-3 is missing from layer 3, so it leaves in the intersection 2|3, at time 5
    assert zigzag_bars([SQUARE] * 3 + [SQUARE - {(2, 3)}], None, 4) == [(0.0, 5.0)]


@needs_dionysus
def test_cycle_only_in_an_intersection():
    # layer 0 filled by diagonal 0-2, layer 1 by diagonal 1-3: the intersection (time 1) is the
    # bare square, whose hole is born at 1 and filled at 2
    assert zigzag_bars([SQUARE | {(0, 2)}, SQUARE | {(1, 3)}], None, 4) == [(1.0, 2.0)]


@needs_dionysus
def test_cycle_closes_at_layer_1_and_two_cycles():
    path = SQUARE - {(0, 3)}
    assert zigzag_bars([path, SQUARE, SQUARE], None, 4) == [(2.0, INF)]
    # square A at layers 0-1 (dies in intersection 1|2 at time 3), square B from layer 1
    assert zigzag_bars([SQUARE, SQUARE | SQUARE_B, SQUARE_B], None, 8) == [(0.0, 3.0), (2.0, INF)]
    # broken in layer 1, restored in layer 2: the zigzag sees two different classes
    assert zigzag_bars([SQUARE, SQUARE - {(0, 1)}, SQUARE], None, 4) == [(0.0, 1.0), (4.0, INF)]


@needs_dionysus
def test_explicit_triangle_sets_and_dim0():
    filled = SQUARE | {(0, 2)}
    # without triangles the filled square has two independent holes
    assert zigzag_bars([filled], [set()], 4) == [(0.0, INF), (0.0, INF)]
    assert zigzag_bars([filled], [{(0, 1, 2)}], 4) == [(0.0, INF)]
    # H0: two components {0,1} and {2,3} merge when edge 1-2 arrives at layer 1 (time 2)
    assert zigzag_bars([{(0, 1), (2, 3)}, {(0, 1), (1, 2), (2, 3)}], None, 4, dim=0) == [
        (0.0, 2.0),
        (0.0, INF),
    ]


def test_zigzag_bars_rejects_self_edges_and_missing_faces():
    with pytest.raises(ValueError, match="Self-edge"):
        zigzag_bars([{(1, 1)}], None, 2)
    with pytest.raises(ValueError, match="lacks"):
        zigzag_bars([SQUARE], [{(0, 1, 2)}], 4)


# --- inter-layer persistence and cuts --------------------------------------------------------


def test_inter_layer_persistence_by_hand():
    # one bar through all 3 layers: every ILP(i, j) = 1
    np.testing.assert_allclose(inter_layer_persistence([(0.0, INF)], 3), [1, 1, 1])
    # bar (0, 3) covers layers 0-1, bar (2, inf) covers layers 1-2:
    # P = [[1,1,0],[1,2,1],[0,1,1]], beta = [1,2,1], ILP(i,j) = P(i,j)/beta_j
    # rows: [1, .5, 0], [1, 1, 1], [0, .5, 1] -> means .5, 1, .5
    np.testing.assert_allclose(inter_layer_persistence([(0.0, 3.0), (2.0, INF)], 3), [0.5, 1, 0.5])
    # a bar living only in an intersection covers no layer
    np.testing.assert_allclose(inter_layer_persistence([(1.0, 2.0)], 2), [0, 0])
    # beta_j = 0 terms count as 0: bar on layer 0 only, 2 layers -> rows [1, 0], [0, 0]
    np.testing.assert_allclose(inter_layer_persistence([(0.0, 1.0)], 2), [0.5, 0])


def test_persistence_cuts():
    scores = np.array([0.5, 1.0, 0.85, 0.95, 0.79, 0.9])
    assert persistence_cuts(scores) == {"10%": [1, 3, 5], "20%": [1, 2, 3, 5]}
    assert persistence_cuts(np.zeros(4)) == {"10%": [], "20%": []}


# --- layer_persistence end to end ------------------------------------------------------------


def _scrambled_states(identity_layer, num_layers=8, n=60, dim=6, seed=0):
    """Positions 0..L; every layer permutes the prompts' states except one identity layer."""
    rng = np.random.default_rng(seed)
    states = [rng.standard_normal((n, dim))]
    for layer in range(num_layers):
        prev = states[-1]
        states.append(prev.copy() if layer == identity_layer else prev[rng.permutation(n)])
    return np.stack(states)


@needs_dionysus
@pytest.mark.parametrize("identity_layer,seed", [(0, 0), (3, 1), (7, 2)])
def test_identity_layer_scores_highest_and_is_cut(identity_layer, seed):
    states = _scrambled_states(identity_layer, seed=seed)
    scores = layer_persistence(states, k=5)
    assert scores.shape == (8,)
    assert int(np.argmax(scores)) == identity_layer
    others = np.delete(scores, identity_layer)
    assert others.max() < 0.8 * scores[identity_layer]
    cuts = persistence_cuts(scores)
    assert cuts == {"10%": [identity_layer], "20%": [identity_layer]}


@needs_dionysus
def test_layer_persistence_all_identity_is_flat():
    x = np.random.default_rng(3).standard_normal((40, 5))
    scores = layer_persistence(np.stack([x] * 5), k=5)
    np.testing.assert_allclose(scores, np.ones(4))  # every 1-cycle persists everywhere


def test_layer_persistence_rejects_bad_shapes():
    with pytest.raises(InvalidInput):
        layer_persistence(np.zeros((1, 10, 3)))
    with pytest.raises(InvalidInput):
        layer_persistence(np.zeros((10, 3)))


# --- missing dependency ----------------------------------------------------------------------


def test_missing_dionysus_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "dionysus", None)  # makes `import dionysus` fail
    with pytest.raises(MissingDependency, match=r"pip install dionysus==2\.2\.3") as info:
        zigzag_bars([SQUARE], None, 4)
    assert "libboost1.81-dev" in str(info.value) and "cmake" in str(info.value)
