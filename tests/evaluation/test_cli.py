"""The command line: seed-compatible modes, output files, and one-line errors on bad input."""

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
import transformers

import prune

from conftest import REPO
from evaluation import cli as benchmark
from evaluation.quality import lm_eval_adapter
from prune.core.calibration import Calibration, default_calibration
from prune.healing.step import Heal
from prune.lowrank.step import Decompose
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify
from prune.width.step import WidthPrune


def _run(capsys, *args):
    code = benchmark.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_personalized_cut_writes_results_tables_and_checkpoint(tiny_folder, tmp_path, capsys):
    out_dir, export = tmp_path / "out", tmp_path / "cut"
    code, out, err = _run(capsys, "--personalized", "--start_block", 1, "--end_block", 2, "--model", tiny_folder,
                          "--task", "arc_easy", "--limit", 3, "--batch_size", 4, "--output_folder", out_dir,
                          "--export_dir", export)
    assert code == 0, err
    assert "%]" in err  # progress lines
    full = json.loads((out_dir / "results_full.json").read_text())
    pruned = json.loads((out_dir / "results_personalized.json").read_text())
    assert set(full["results"]["arc_easy"]) >= {"acc,none", "acc_norm,none", "acc_stderr,none"}
    assert pruned["config"]["removed_layers"] == [1, 2]  # --end_block is inclusive
    assert pruned["config"]["cut"] == "layers 1–2 (2 of 4) = block [1, 3)"
    assert pruned["n-samples"]["arc_easy"]["effective"] == 3
    table = (out_dir / "comparison.md").read_text()
    assert "| arc_easy acc |" in table and "Score kept %" in table and "| arc_easy acc |" in out
    rows = list(csv.DictReader((out_dir / "comparison.csv").open()))
    assert [r["Metric"] for r in rows] == ["arc_easy acc", "arc_easy acc_norm"]
    assert float(rows[0]["Original"]) == pytest.approx(full["results"]["arc_easy"]["acc,none"] * 100)
    saved = transformers.AutoConfig.from_pretrained(export)
    assert saved.num_hidden_layers == 2 and (export / "layercut.json").is_file()
    assert f"accelerate launch -m lm_eval run --model hf --model_args pretrained={export}," in out  # scale-out
    assert "pretrained=./cut," in (export / "SCALE_OUT.md").read_text()


def test_method_mode_cuts_the_best_block_and_says_when_the_analysis_came_from_the_cache(tiny_folder, tmp_path,
                                                                                         capsys, monkeypatch):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))  # no other test's analysis in it
    args = ("--method", "angular", "--num_layers", 2, "--model", tiny_folder, "--task", "arc_easy", "--limit", 2,
            "--output_folder", tmp_path)
    code, _, err = _run(capsys, *args)
    assert code == 0, err
    result = json.loads((tmp_path / "results_angular.json").read_text())
    removed = result["config"]["removed_layers"]
    assert len(removed) == 2 and removed[1] == removed[0] + 1
    assert "Angular distance (Gromov et al. 2024): scored in " in err and "cache" not in err
    code, _, err = _run(capsys, *args)
    assert code == 0, err
    assert "Angular distance (Gromov et al. 2024): read from the cache (scored in " in err and " s earlier)." in err


@pytest.mark.parametrize("selection", ["paper", "block"])
def test_method_mode_chooses_layers_by_the_selection_rule(tiny_folder, tmp_path, capsys, data_dir, selection):
    code, _, err = _run(capsys, "--method", "block_influence", "--num_layers", 2, "--selection", selection,
                        "--model", tiny_folder, "--task", "arc_easy", "--limit", 2, "--output_folder", tmp_path,
                        "--data_dir", data_dir)
    assert code == 0, err
    removed = json.loads((tmp_path / "results_block_influence.json").read_text())["config"]["removed_layers"]
    model, tokenizer = prune.load_model(str(tiny_folder))
    result = prune.score(model, tokenizer, "block_influence", calibration=default_calibration(data_dir),
                         use_cache=False)
    if selection == "paper":  # ShortGPT removes the two lowest-BI layers, wherever they are
        assert removed == sorted(np.argsort(result.layer_scores, kind="stable")[:2].tolist())
    else:  # the block of two whose input and output are most alike: 1 − cos(h_l, h_{l+2})
        start = int(np.nanargmin(result.block_scores[1]))
        assert removed == [start, start + 1]


@pytest.mark.slow
def test_persistence_mode_evaluates_both_cuts(tiny_folder, tmp_path, capsys):
    code, _, err = _run(capsys, "--persistence", "--model", tiny_folder, "--task", "arc_easy", "--limit", 2,
                        "--output_folder", tmp_path)
    assert code == 0 or "no removable layers" in err, err
    if code == 0:
        for mode in ("persistence_10", "persistence_20"):
            assert json.loads((tmp_path / f"results_{mode}.json").read_text())["config"]["removed_layers"]
        assert "persistence_20" in (tmp_path / "comparison.md").read_text()


@pytest.mark.parametrize("args, reason", [
    (["--full", "--task", "arc_easy,nonsense"], "Unknown task(s) 'nonsense'"),
    (["--personalized", "--start_block", 2, "--end_block", 5, "--task", "arc_easy"], "Cannot cut layers 2…5"),
    (["--personalized", "--start_block", 0, "--end_block", 3, "--task", "arc_easy"], "at least one must remain"),
    (["--personalized", "--start_block", 2, "--task", "arc_easy"], "needs --start_block and --end_block"),
    (["--method", "nope", "--num_layers", 2], "Unknown method 'nope'"),
    (["--method", "angular", "--num_layers", 2, "--drop", "mlp"], "scores whole layers only: to remove MLP blocks"),
    (["--full", "--task", "hellaswag", "--num_fewshot", 5], "Few-shot offline is only faithful"),
    (["--full", "--task", "arc_easy", "--data_dir", "/nonexistent/benchdata"], "does not exist"),
    (["--full", "--sparsity", 0.5], "--sparsity and --pattern go with --sparsify METHOD"),
    (["--full", "--sparsify", "wanda"], "Sparsity is a fraction from 0 to 0.99"),
    (["--full", "--sparsify", "lottery", "--sparsity", 0.5], "Unknown sparsity method 'lottery'"),
    (["--full", "--sparsify", "magnitude", "--pattern", "3:3"], "Unknown sparsity pattern '3:3'"),
    (["--full", "--width", 1.5], "The parameter ratio is the fraction"),
    (["--full", "--width_criterion", "llm-pruner"], "--width_criterion goes with --width RATIO"),
    (["--sweep", 2, "--sparsify", "magnitude", "--sparsity", 0.5], "not with --sweep, --sparsity_sweep or --frontier"),
    (["--full", "--levels", "0,0.5"], "--levels and --methods go with --sparsity_sweep"),
    (["--sparsity_sweep", "--levels", "0,half"], "--levels takes fractions separated by commas"),
    (["--sparsity_sweep", "--levels", "0,1.5"], "Sparsity levels are fractions from 0 to 0.99"),
    (["--sparsity_sweep", "--methods", "magnitude,lottery"], "Unknown sparsity method 'lottery'"),
    (["--full", "--export_dir", "x"], "not --full alone"),
    (["--full", "--decompose", "feature"], "--decompose feature|weight and --param_ratio R go together"),
    (["--full", "--param_ratio", 0.8], "--decompose feature|weight and --param_ratio R go together"),
    (["--full", "--decompose", "weight", "--param_ratio", 0], "The parameter ratio is the fraction"),
    (["--full", "--tolerance", 1], "go with --rank_search"),
    (["--rank_search", "weight", "--search_layers", 0], "--search_layers at least 1"),
    (["--rank_search", "weight", "--search_on", "nonsense"], "Unknown task(s) 'nonsense'"),
    (["--full", "--memory_budget", "lots"], "Memory budget 'lots' is not an amount"),
    (["--sweep", 2, "--speed"], "--speed adds speed and memory rows to a comparison"),
])
def test_bad_input_exits_with_a_one_line_reason(tiny_folder, tmp_path, capsys, args, reason):
    code, _, err = _run(capsys, *args, "--model", tiny_folder, "--limit", 2, "--output_folder", tmp_path)
    assert code == 2
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert len(error_lines) == 1 and reason in error_lines[0], err


def test_speed_adds_the_pages_speed_and_memory_rows_with_the_limit_to_the_report_and_its_json(tiny_folder, tmp_path,
                                                                                              capsys, data_dir):
    code, out, err = _run(capsys, "--full", "--quantize", "int8", "--quant_head", "--speed", "--model", tiny_folder,
                          "--task", "arc_easy", "--limit", 2, "--data_dir", data_dir, "--output_folder", tmp_path)
    assert code == 0, err
    saved = json.loads((tmp_path / "speed_memory.json").read_text())
    found = {(m["model"], m["name"]): m for m in saved["measurements"]}
    decode = "decode latency per token (batch 1, 32 new)"
    original, quantized = found[("original", decode)], found[("pruned", decode)]
    assert quantized["details"]["bytes_per_token"] < original["details"]["bytes_per_token"]
    assert quantized["details"]["ideal_by"] == "bytes" and "int8" in quantized["details"]["kernel"]
    for side in ("original", "pruned"):
        assert any(name.startswith("weight memory") for model, name in found if model == side)
        assert any(name.startswith("share of the bandwidth limit reached") for model, name in found if model == side)
    table = (tmp_path / "comparison.md").read_text()
    assert "| arc_easy acc |" in table and "bytes read per decoded token" in table and "peak memory" in table
    assert "the LM head in int8" in table and (tmp_path / "results_int8_head.json").exists()
    assert "floor per decoded token at" in out


def test_the_module_runs_as_a_script(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "evaluation.cli", "--full", "--task", "bogus",
                           "--output_folder", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("layercut-benchmark: error: Unknown task(s) 'bogus'")
    assert not list(Path(tmp_path).glob("results_*.json"))


def test_sweep_mode_measures_every_start_and_ranks_the_methods(tiny_folder, tmp_path, capsys):
    out = tmp_path / "sweep"
    code = benchmark.main(["--sweep", "2", "--model", tiny_folder, "--task", "arc_easy", "--limit", "3",
                 "--output_folder", str(out)])
    assert code == 0
    data = json.loads((out / "sweep_arc_easy_2.json").read_text())
    assert data["sweep"]["starts"] == [0, 1, 2]  # a 4-layer model has 3 blocks of 2
    assert set(data["rank_agreement"]) >= {"angular", "block_influence", "ppl", "taylor"}
    assert all(len(v) == 3 for v in data["method_scores"].values())
    printed = capsys.readouterr().out
    assert "[0, 2)" in printed and "rank agreement" in printed


def test_full_with_sparsify_compares_the_original_with_its_sparse_version(tiny_folder, tmp_path, capsys, data_dir):
    code, out, err = _run(capsys, "--full", "--sparsify", "magnitude", "--sparsity", 0.5, "--model", tiny_folder,
                          "--task", "arc_easy", "--limit", 3, "--output_folder", tmp_path)
    assert code == 0, err
    result = json.loads((tmp_path / "results_magnitude_50.json").read_text())
    assert Recipe.from_json(result["config"]["recipe"]) == Recipe((Sparsify.of("magnitude", 0.5),))
    assert result["config"]["removed_layers"] == [] and result["config"]["params_removed_pct"] == 0
    model, tokenizer = prune.load_model(str(tiny_folder))
    request = lm_eval_adapter.check_request(["arc_easy"], limit=3, data_dir=data_dir)
    by_hand = lm_eval_adapter.evaluate(prune.sparsify(model, tokenizer, "magnitude", 0.5), tokenizer, request)
    assert result["results"]["arc_easy"]["acc,none"] == by_hand["arc_easy"]["results"]["acc,none"]
    assert "magnitude, 50 % unstructured sparsity" in (tmp_path / "comparison.md").read_text()


def test_width_and_sparsify_follow_the_cut_in_that_order(tiny_folder, tmp_path, capsys, data_dir):
    code, _, err = _run(capsys, "--personalized", "--start_block", 1, "--end_block", 1, "--sparsify", "wanda",
                        "--sparsity", 0.3, "--width", 0.9, "--model", tiny_folder, "--task", "arc_easy",
                        "--limit", 2, "--output_folder", tmp_path, "--data_dir", data_dir)
    assert code == 0, err
    config = json.loads((tmp_path / "results_personalized_width_90_wanda_30.json").read_text())["config"]
    calibration = default_calibration(data_dir)
    assert Recipe.from_json(config["recipe"]) == Recipe.block(4, 1, 2).then(WidthPrune.of(0.9, calibration)).then(
        Sparsify.of("wanda", 0.3, calibration=calibration))
    assert config["removed_layers"] == [1] and config["params_removed_pct"] > 0


def test_width_by_llm_pruners_criterion_is_recorded_and_rebuilt_from_its_json(tiny_folder, tmp_path, capsys,
                                                                                data_dir):
    code, out, err = _run(capsys, "--full", "--width", 0.9, "--width_criterion", "llm-pruner", "--model", tiny_folder,
                          "--task", "arc_easy", "--limit", 2, "--output_folder", tmp_path, "--data_dir", data_dir)
    assert code == 0, err
    (found,) = tmp_path.glob("results_*width*.json")
    recipe = Recipe.from_json(json.loads(found.read_text())["config"]["recipe"])
    assert recipe == Recipe((WidthPrune.of(0.9, default_calibration(data_dir), "llm-pruner"),))
    assert recipe != Recipe((WidthPrune.of(0.9, default_calibration(data_dir)),))


def test_decompose_compares_the_original_with_its_low_rank_version(tiny_folder, tmp_path, capsys, data_dir):
    code, _, err = _run(capsys, "--full", "--decompose", "weight", "--param_ratio", 0.9, "--model", tiny_folder,
                        "--task", "arc_easy", "--limit", 3, "--output_folder", tmp_path)
    assert code == 0, err
    result = json.loads((tmp_path / "results_weight_90.json").read_text())
    assert Recipe.from_json(result["config"]["recipe"]) == Recipe((Decompose.of("weight", param_ratio=0.9),))
    model, tokenizer = prune.load_model(str(tiny_folder))
    request = lm_eval_adapter.check_request(["arc_easy"], limit=3, data_dir=data_dir)
    by_hand = lm_eval_adapter.evaluate(prune.decompose(model, tokenizer, space="weight", param_ratio=0.9), tokenizer,
                                       request)
    assert result["results"]["arc_easy"]["acc,none"] == by_hand["arc_easy"]["results"]["acc,none"]
    assert 0 < result["config"]["params_removed_pct"] <= 10.5


def test_rank_search_mode_prints_the_search_and_compares_the_searched_model(tiny_folder, tmp_path, capsys, data_dir):
    """A tolerance of 100 accuracy points lets every projection of the last layer take the first candidate, rank 1."""
    code, out, err = _run(capsys, "--rank_search", "weight", "--search_on", "arc_easy", "--search_limit", 10,
                          "--tolerance", 100, "--search_layers", 1, "--model", tiny_folder, "--task", "arc_easy",
                          "--limit", 3, "--output_folder", tmp_path)
    assert code == 0, err
    model, tokenizer = prune.load_model(str(tiny_folder))
    last = model.config.num_hidden_layers - 1
    paths = [p for p, m in model.model.layers[last].named_modules() if isinstance(m, torch.nn.Linear)]
    ranks = {(last, p): 1 for p in paths}
    result = json.loads((tmp_path / "results_rank_search.json").read_text())
    assert Recipe.from_json(result["config"]["recipe"]) == Recipe((Decompose.of("weight", ranks=ranks),))
    assert "| original |" in out and "| searched |" in out
    ranks_line = next(line for line in out.splitlines() if line.startswith("ranks: "))
    assert sorted(ranks_line[len("ranks: "):].split(", ")) == sorted(f"{last}.{p.rpartition('.')[2]} 1" for p in paths)
    request = lm_eval_adapter.check_request(["arc_easy"], limit=3, data_dir=data_dir)
    by_hand = lm_eval_adapter.evaluate(prune.decompose(model, tokenizer, space="weight", ranks=ranks), tokenizer,
                                       request)
    assert result["results"]["arc_easy"]["acc,none"] == by_hand["arc_easy"]["results"]["acc,none"]


def test_sparsity_sweep_mode_prints_the_table_and_writes_json(tiny_folder, tmp_path, capsys):
    code, out, err = _run(capsys, "--sparsity_sweep", "--levels", "0.5,0", "--methods", "magnitude",
                          "--ppl_seq_len", 32, "--ppl_windows", 2, "--model", tiny_folder, "--task", "arc_easy",
                          "--limit", 3, "--output_folder", tmp_path)
    assert code == 0, err
    data = json.loads((tmp_path / "sparsity_sweep_arc_easy.json").read_text())["sparsity_sweep"]
    assert data["levels"] == [0.0, 0.5] and data["methods"] == ["magnitude"] and data["metric"] == "acc_norm"
    assert data["accuracy"]["magnitude"][0] == data["dense_accuracy"]
    row = next(line for line in out.splitlines() if line.startswith("| magnitude |"))
    assert row.startswith(f"| magnitude | {100 * data['dense_accuracy']:.2f} / {data['dense_perplexity']:.4g} |")


def test_heal_follows_the_cut_and_reports_held_out_perplexity_before_and_after(tiny_folder, tmp_path, capsys,
                                                                               data_dir):
    code, out, err = _run(capsys, "--personalized", "--start_block", 1, "--end_block", 1, "--heal", "last_layers",
                          "--heal_steps", 2, "--ppl_seq_len", 128, "--ppl_windows", 2, "--model", tiny_folder,
                          "--task", "arc_easy", "--limit", 2, "--output_folder", tmp_path, "--data_dir", data_dir)
    assert code == 0, err
    config = json.loads((tmp_path / "results_personalized_last-3_2.json").read_text())["config"]
    text = Calibration(source="wikitext2", path=str(data_dir))
    assert Recipe.from_json(config["recipe"]) == Recipe.block(4, 1, 2).then(Heal.of("last_layers", 2, text=text))
    assert "Healing trained on WikiText-2 validation" in out and "on WikiText-2 test, never trained on" in out
    mode = "personalized_last-3_2"
    ppl = dict(re.findall(r"^\| ([\w -]+?) \| ([\d.]+)", out.split("Healing trained on")[1], re.M))
    assert set(ppl) == {"original", f"{mode} before healing", f"{mode} healed"}
    assert ppl[f"{mode} before healing"] != ppl[f"{mode} healed"]
    assert f"{mode}: last-layers healing (the last 3 layers, final norm and LM head), 2 steps" in out
    assert "2 steps done, held-out loss " in out


def test_heal_alone_or_its_options_alone_are_one_line_errors(tiny_folder, tmp_path, capsys):
    code, _, err = _run(capsys, "--full", "--heal", "lora", "--model", tiny_folder, "--output_folder", tmp_path)
    assert code == 2 and err.strip().splitlines()[-1].startswith("layercut-benchmark: error: A heal step follows")
    code, _, err = _run(capsys, "--full", "--heal_steps", 3, "--output_folder", tmp_path)
    assert code == 2 and "--heal_steps, --heal_budget_s and --heal_teacher go with --heal" in err


def test_the_patch_follows_the_cut_and_a_distilled_heal_follows_the_patch(tiny_folder, tmp_path, capsys, data_dir):
    from prune.patch.step import CALIBRATION, Patch

    code, out, err = _run(capsys, "--personalized", "--start_block", 1, "--end_block", 2, "--patch", "lstsq",
                          "--heal", "last_layers", "--heal_steps", 2, "--heal_teacher", "forward_kl",
                          "--ppl_seq_len", 128, "--ppl_windows", 2, "--model", tiny_folder, "--task", "arc_easy",
                          "--limit", 2, "--output_folder", tmp_path, "--data_dir", data_dir)
    assert code == 0, err
    (found,) = tmp_path.glob("results_personalized_*.json")
    recipe = Recipe.from_json(json.loads(found.read_text())["config"]["recipe"])
    calibration = Calibration(source="wikitext2", path=str(data_dir), **CALIBRATION)
    text = Calibration(source="wikitext2", path=str(data_dir))
    assert recipe == Recipe.block(4, 1, 3).then(Patch.of("lstsq", calibration)).then(
        Heal.of("last_layers", 2, text=text, teacher="forward_kl"))
    assert "by forward KL (KD) to the original (τ 1)" in out


def test_quantization_comes_last_after_the_cut_and_is_evaluated(tiny_folder, tmp_path, capsys, data_dir):
    from prune.quantize.step import Quantize

    code, out, err = _run(capsys, "--personalized", "--start_block", 1, "--end_block", 2, "--quantize", "int8",
                          "--ppl_seq_len", 128, "--ppl_windows", 2, "--model", tiny_folder, "--task", "arc_easy",
                          "--limit", 2, "--output_folder", tmp_path, "--data_dir", data_dir,
                          "--export_dir", tmp_path / "out", "--gguf", "Q8_0")
    assert code == 0, err
    (found,) = tmp_path.glob("results_personalized_*.json")
    recipe = Recipe.from_json(json.loads(found.read_text())["config"]["recipe"])
    assert recipe == Recipe.block(4, 1, 3).then(Quantize.of(8))
    assert "| arc_easy acc_norm | % |" in out
    gguf = AutoModelForCausalLM.from_pretrained(tmp_path / "out", gguf_file="out.Q8_0.gguf", dtype=torch.float32)
    assert gguf.config.num_hidden_layers == 2  # the cut's two layers, written from the int8 weights
    code, _, err = _run(capsys, "--full", "--model", tiny_folder, "--gguf", "F16")
    assert code == 2 and "--gguf goes with --export_dir." in err
