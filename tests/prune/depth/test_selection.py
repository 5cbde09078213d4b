"""Which N layers a method removes: its paper's rule or the best block; and BOS on calibration windows."""

import numpy as np
import pytest
import torch

from prune.core.calibration import Calibration, token_windows
from prune.core.errors import InvalidInput
from prune.depth.result import ImportanceResult, blocks_from_layers
from prune.depth.selection import check_remove, chosen_layers, chosen_recipe, rule

#            layer: 0  1  2  3  4  5
LAYER_SCORES = [5, 1, 9, 1, 5, 5]  # two lone low layers (1, 3) around a high one (2)


def _result(method: str, protected=frozenset()) -> ImportanceResult:
    scores = np.array(LAYER_SCORES, float)
    return ImportanceResult(method, blocks_from_layers(scores, protected), "test", layer_scores=scores)


def test_the_papers_rules_differ_where_the_methods_papers_do():
    # block sums of 2: [6, 10, 10, 6, 10] → the first lowest block is [0, 2); the two lowest layers are 1 and 3
    assert chosen_layers(_result("block_influence"), 2, "paper") == [1, 3]  # ShortGPT: N lowest layers
    assert chosen_layers(_result("ppl"), 2, "paper") == [1, 3]  # Shortened LLaMA
    assert chosen_layers(_result("taylor"), 2, "paper") == [1, 3]
    assert chosen_layers(_result("block_influence"), 2, "block") == [0, 1]
    assert chosen_layers(_result("angular"), 2, "paper") == [0, 1]  # Gromov et al.: a contiguous block
    assert rule("angular", "paper") == "block" and rule("block_influence", "paper") == "layers"
    assert rule("block_influence", "block") == "block"


def test_protected_layers_are_never_chosen_by_either_rule():
    result = _result("taylor", protected={1})
    assert chosen_layers(result, 2, "paper") == [0, 3]  # 1 is protected: then 3, then the first 5
    assert 1 not in chosen_layers(result, 3, "paper")
    assert 1 not in chosen_layers(result, 2, "block")


def test_the_recipe_says_how_it_was_chosen():
    recipe = chosen_recipe(_result("block_influence"), 2, "paper", origin="Block Influence on test")
    assert recipe.depth_cut.layers == (1, 3) and recipe.origin.endswith("2 least important layers")
    recipe = chosen_recipe(_result("block_influence"), 2, "block", origin="BI")
    assert recipe.depth_cut.span == (0, 2) and recipe.origin == "BI: best block of 2 layers"


def test_an_unknown_selection_is_a_clear_error():
    with pytest.raises(InvalidInput, match="paper, block"):
        chosen_layers(_result("angular"), 2, "greedy")


def test_attention_or_mlp_blocks_are_chosen_only_from_a_method_that_scores_them():
    assert check_remove("layers", "angular") == "layers" and check_remove("attention", "sublayer") == "attention"
    with pytest.raises(InvalidInput, match="Angular distance .* scores whole layers only: to remove attention blocks, "
                                           "analyze with Attention / MLP drop"):
        chosen_recipe(_result("angular"), 2, "paper", origin="angular", remove="attention")
    with pytest.raises(InvalidInput, match="not 'heads'"):
        check_remove("heads", "sublayer")


class _Tokenizer:
    """Each character is a token (its code point); ``adds_bos``: like Gemma's, BOS by default."""

    def __init__(self, bos_token_id, adds_bos):
        self.bos_token_id, self.adds_bos = bos_token_id, adds_bos

    def __call__(self, text, add_special_tokens=True):
        ids = [ord(c) for c in text]
        return {"input_ids": ([self.bos_token_id] if add_special_tokens and self.adds_bos else []) + ids}


TEXT = "abcdefghijklmnopqrstuvwxyz" * 4  # 104 tokens


@pytest.mark.parametrize("bos, adds_bos, expect_bos", [
    (None, True, True), (None, False, False), (True, False, True), (False, True, False)])
def test_bos_is_prepended_when_asked_or_when_the_tokenizer_does(bos, adds_bos, expect_bos):
    windows = token_windows(_Tokenizer(1, adds_bos), Calibration(source="text", text=TEXT, n_samples=4, seq_len=10,
                                                                 bos=bos))
    assert windows.shape == (4, 10)  # a window with BOS still has seq_len tokens
    assert bool((windows[:, 0] == 1).all()) == expect_bos
    text = torch.tensor([ord(c) for c in TEXT])
    body = windows[:, 1:] if expect_bos else windows
    for row in body:  # the rest is consecutive text
        start = int(row[0]) - ord("a")
        assert torch.equal(row, text[start : start + len(row)])


def test_bos_on_without_a_bos_token_is_a_clear_error():
    with pytest.raises(InvalidInput, match="no BOS token"):
        token_windows(_Tokenizer(None, False), Calibration(source="text", text=TEXT, n_samples=2, seq_len=8, bos=True))
