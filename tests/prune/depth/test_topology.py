"""Known-answer tests for prune.depth.topology (zigzag-persistence layer importance) and the authors' CSV."""

import csv
import sys

import numpy as np
import pytest

from conftest import REPO
from evaluation.exports.zigzag_csv import read_bars_csv, result_from_csv, write_bars_csv
from prune.core.errors import InvalidInput, MissingDependency
from prune.depth.topology import (authors_rows, bars_from_authors_rows, betti_numbers, clique_triangles,
                                  inter_layer_persistence, knn_edges, knn_zigzag, persistence_cuts, zigzag_bars)

SHARED = REPO.parent / "shared" / "zigzag"  # two of the authors' released diagrams (see its README)

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


def test_betti_numbers():
    # (0, 3) covers representations 0-1, (2, inf) 1-2, (1, 2) none (it lives in an intersection)
    np.testing.assert_array_equal(betti_numbers([(0.0, 3.0), (2.0, INF), (1.0, 2.0)], 3), [1, 2, 1])


def test_persistence_cuts_the_authors_rule():
    # r for layers 0..5 and, last, the final norm: the max counts the final norm, which is never cut
    r = np.array([0.5, 1.0, 0.85, 0.95, 0.79, 0.9, 0.7])
    assert persistence_cuts(r) == {"10%": [1, 3, 5], "20%": [1, 2, 3, 5]}
    r = np.array([0.85, 0.95, 0.7, 1.0])  # the final norm is the most persistent
    assert persistence_cuts(r) == {"10%": [1], "20%": [0, 1]}
    assert persistence_cuts(np.zeros(4)) == {"10%": [], "20%": []}  # no 1-cycle anywhere: no signal
    # beta_1 = 0 at one layer (r = 0 there): the others are still cut
    assert persistence_cuts(np.array([0.0, 1.0, 0.5, 0.95])) == {"10%": [1], "20%": [1]}


# --- the pipeline on synthetic representations -----------------------------------------------


def _scrambled_states(pair, representations=9, n=60, dim=6, seed=0):
    """Representations 0..L: each permutes the texts' points of the previous one, except that
    representation pair + 1 repeats representation pair."""
    rng = np.random.default_rng(seed)
    states = [rng.standard_normal((n, dim))]
    for m in range(1, representations):
        prev = states[-1]
        states.append(prev.copy() if m == pair + 1 else prev[rng.permutation(n)])
    return np.stack(states)


@needs_dionysus
@pytest.mark.parametrize("pair,seed", [(0, 0), (3, 1), (7, 2)])
def test_a_repeated_representation_is_the_most_persistent_and_cut(pair, seed):
    r = inter_layer_persistence(knn_zigzag(_scrambled_states(pair, seed=seed), k=5)[1], 9)
    assert r.shape == (9,)
    assert r[pair] == r[pair + 1] == r.max()  # the two share every 1-cycle
    assert np.delete(r, [pair, pair + 1]).max() < 0.8 * r.max()
    cut = [m for m in (pair, pair + 1) if m < 8]  # representation 8 is the final norm: never cut
    assert persistence_cuts(r) == {"10%": cut, "20%": cut}


@needs_dionysus
def test_identical_representations_persist_fully():
    x = np.random.default_rng(3).standard_normal((40, 5))
    diagrams = knn_zigzag(np.stack([x] * 5), k=5)
    np.testing.assert_allclose(inter_layer_persistence(diagrams[1], 5), np.ones(5))
    assert all(death == INF for _, death in diagrams[1])
    assert persistence_cuts(np.ones(5)) == {"10%": [0, 1, 2, 3], "20%": [0, 1, 2, 3]}


def test_knn_zigzag_rejects_bad_shapes():
    with pytest.raises(InvalidInput):
        knn_zigzag(np.zeros((1, 10, 3)))
    with pytest.raises(InvalidInput):
        knn_zigzag(np.zeros((10, 3)))


# --- the authors' CSV ---------------------------------------------------------------------------


def test_authors_times_by_hand():
    # theirs = ours + 1; alive to the end (ours inf) = 2 * representations
    diagrams = {0: [(0.0, INF)], 1: [(0.0, 1.0), (1.0, 4.0), (3.0, INF)]}  # times 0..4: 3 representations
    rows = authors_rows(diagrams, 3)
    assert rows == [(0, 1, 6), (1, 1, 2), (1, 2, 5), (1, 4, 6)]
    assert bars_from_authors_rows(rows, 3) == diagrams
    with pytest.raises(InvalidInput, match="2 layers"):
        bars_from_authors_rows(rows, 4)  # the file's last death says 3 representations, not 4
    with pytest.raises(InvalidInput):
        authors_rows({1: [(0.0, 6.0)]}, 3)  # a finite death past the last representation


@pytest.fixture(scope="module")
def shared():
    """The authors' released diagrams; their absence fails, never skips."""
    if not SHARED.is_dir():
        pytest.fail(f"missing {SHARED}: the authors' zigzag outputs (see ../shared/zigzag/README.md)")
    return SHARED


@pytest.mark.parametrize("name, cut_10, cut_20", [
    ("sst_llama_2_7b_knn_5.csv", range(20, 30), range(18, 32)),
    ("pile_pythia_6.9b_knn_5.csv", range(19, 30), range(16, 32)),
])
def test_authors_files_give_the_authors_cuts(shared, name, cut_10, cut_20):
    result = result_from_csv(shared / name, 32)  # both models: 32 layers + the final norm
    assert result.cuts == {"10%": list(cut_10), "20%": list(cut_20)}
    assert result.cut_sizes["10%"] == {"layers": len(cut_10), "fraction": len(cut_10) / 32}
    assert len(result.params["persistence"]) == 33 and result.layer_scores.shape == (32,)
    assert np.argmin(result.layer_scores) in cut_10  # lower = more removable
    with pytest.raises(InvalidInput, match="32 layers"):
        result_from_csv(shared / name, 30)


def test_authors_file_reads_and_writes_back_unchanged(shared, tmp_path):
    source = shared / "pile_pythia_6.9b_knn_5.csv"
    write_bars_csv(read_bars_csv(source, 33), 33, tmp_path / "again.csv")
    with source.open() as a, (tmp_path / "again.csv").open() as b:
        original, again = list(csv.reader(a)), list(csv.reader(b))
    assert again[0] == original[0] == ["dimension", "birth", "death"]
    assert sorted(map(tuple, again[1:])) == sorted(map(tuple, original[1:]))


@needs_dionysus
def test_our_bars_round_trip_through_the_csv(tmp_path):
    states = _scrambled_states(2, representations=5, n=40, seed=4)
    diagrams = knn_zigzag(states, k=5)
    write_bars_csv(diagrams, 5, tmp_path / "ours.csv")
    assert (tmp_path / "ours.csv").read_text().splitlines()[0] == "dimension,birth,death"
    assert read_bars_csv(tmp_path / "ours.csv", 5) == diagrams
    result = result_from_csv(tmp_path / "ours.csv", 4)
    np.testing.assert_allclose(result.params["persistence"], inter_layer_persistence(diagrams[1], 5))


def test_a_small_file_by_hand(tmp_path):
    # 4 layers (5 representations); our times: A (2, 7) x3 covers 1-3, D (2, 5) covers 1-2,
    # B (0, 1) covers 0, C (8, inf) covers 4. beta = [1, 4, 4, 3, 1];
    # r_1 = r_2 = (1 + 1 + 1) / 5, r_3 = (3/4 + 3/4 + 1) / 5 = 0.5, r_0 = r_4 = 1/5
    rows = [(0, 1, 10)] + [(1, 3, 8)] * 3 + [(1, 3, 6), (1, 1, 2), (1, 9, 10)]
    (tmp_path / "small.csv").write_text("dimension,birth,death\n" + "".join(f"{d},{b},{e}\n" for d, b, e in rows))
    result = result_from_csv(tmp_path / "small.csv", 4)
    np.testing.assert_allclose(result.params["persistence"], [0.2, 0.6, 0.6, 0.5, 0.2])
    assert result.params["betti_1"] == [1, 4, 4, 3, 1]
    assert result.cuts == {"10%": [1, 2], "20%": [1, 2, 3]}
    assert result.cut_sizes["20%"] == {"layers": 3, "fraction": 0.75}
    assert any("removes 3 of 4 layers" in w for w in result.warnings)  # more than half


@pytest.mark.parametrize("text, match", [
    ("birth,death\n1,2\n", "first line"),
    ("dimension,birth,death\n1,x,3\n", "malformed"),
    ("dimension,birth,death\n1,3\n", "malformed"),
    ("dimension,birth,death\n1,1.5,3\n", "malformed"),
    ("dimension,birth,death\n1,3,2\n0,1,10\n", "Bad bar"),
])
def test_malformed_files_are_refused(tmp_path, text, match):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(InvalidInput, match=match):
        read_bars_csv(tmp_path / "bad.csv", 5)
    with pytest.raises(InvalidInput, match="does not exist"):
        read_bars_csv(tmp_path / "missing.csv", 5)


# --- missing dependency ----------------------------------------------------------------------


def test_missing_dionysus_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "dionysus", None)  # makes `import dionysus` fail
    with pytest.raises(MissingDependency, match=r"pip install dionysus==2\.2\.3") as info:
        zigzag_bars([SQUARE], None, 4)
    assert "libboost1.81-dev" in str(info.value) and "cmake" in str(info.value)
