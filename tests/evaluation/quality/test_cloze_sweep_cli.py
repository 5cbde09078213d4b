"""The seed study's table with LayerCut's own CLI: a cloze task at 0 / 10 / 50 / 90 / 99 % sparsity, per method."""

from __future__ import annotations

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

import prune
from conftest import tiny_model
from evaluation import cli as benchmark
from evaluation.quality import cloze
from evaluation.quality.fast_lm import FastLM
import test_cloze
from test_cloze import TASK, best_by_hand

known_answers = test_cloze.known_answers  # the fixture: pytest finds it here by this name
LEVELS = [0.0, 0.1, 0.5, 0.9, 0.99]


def sweep_by_cli(folder, data_dir, tmp_path, capsys, *extra) -> tuple[dict, str]:
    """``--sparsity_sweep`` of the cloze task at LEVELS by magnitude and Wanda: (the JSON's sweep, the printed
    table)."""
    code = benchmark.main([str(a) for a in (
        "--sparsity_sweep", "--levels", ",".join(map(str, LEVELS)), "--methods", "magnitude,wanda", "--task", TASK,
        "--model", folder, "--batch_size", 4, "--data_dir", data_dir, "--no_cache", "--output_folder", tmp_path / "out",
        *extra)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads((tmp_path / "out" / f"sparsity_sweep_{TASK}.json").read_text())["sparsity_sweep"], out


@pytest.mark.parametrize("arch", ["gpt2", "llama"])  # GPT-2: the seed's decoder
def test_the_sparsity_sweep_of_a_cloze_task_starts_from_the_rule_by_hand(arch, tiny_tokenizer, known_answers, tmp_path,
                                                                         capsys, data_dir):
    folder = tmp_path / f"tiny-{arch}"
    tiny_model(arch, 2).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lm = FastLM(model, tokenizer, batch_size=4)
    rows = [dict(q) for q in cloze.questions(TASK)[:4]]
    for i, row in enumerate(rows):  # the dense model's own pick right in three questions of four
        best = best_by_hand(model, lm, row)
        row["answer"] = best if i < 3 else next(o for o in row["options"] if o != best)
    known_answers(rows)

    data, out = sweep_by_cli(folder, data_dir, tmp_path, capsys, "--ppl_seq_len", 32, "--ppl_windows", 2)
    assert data["levels"] == LEVELS and data["methods"] == ["magnitude", "wanda"] and data["metric"] == "acc"
    assert data["dense_accuracy"] == 0.75  # the rule applied by hand, on one plain forward pass per option
    half = prune.sparsify(model, tokenizer, "magnitude", 0.5)
    half_lm = FastLM(half, tokenizer, batch_size=4)
    expected = sum(best_by_hand(half, half_lm, row) == row["answer"] for row in rows) / len(rows)
    assert data["accuracy"]["magnitude"][:3] == [0.75, data["accuracy"]["magnitude"][1], expected]
    assert all(len(data["accuracy"][m]) == len(LEVELS) for m in data["methods"])
    assert "| magnitude | 75.00 / " in out and "| wanda | 75.00 / " in out
