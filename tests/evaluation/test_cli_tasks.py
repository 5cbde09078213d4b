"""The command line's MT-Bench and C4 end to end: a tiny chat model judged by a scripted loopback endpoint, C4 from
a small shard, their flags refused in one line where they do not belong; and MT-Bench self-judged on the default
model (slow)."""

import json

import pytest

from evaluation import cli
from evaluation.quality import c4
from own_tasks import chat_folder, scripted_judge, write_shard

SECRET = "sk-cli-SECRET-42"


def _run(capsys, *args):
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return chat_folder(tmp_path_factory.mktemp("chat-llama"))


def test_mt_bench_with_a_scripted_endpoint_writes_scores_win_rates_and_never_the_key(folder, tmp_path, capsys,
                                                                                    monkeypatch, data_dir):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LAYERCUT_JUDGE_API_KEY", SECRET)
    out_dir = tmp_path / "out"
    with scripted_judge() as (url, judge):
        code, out, err = _run(capsys, "--personalized", "--start_block", 1, "--end_block", 2, "--model", folder,
                              "--task", "mt_bench", "--limit", 2, "--judge", url, "--answer_tokens", 6,
                              "--data_dir", data_dir, "--output_folder", out_dir)
    assert code == 0, err
    assert judge.calls > 0 and all(r["headers"]["Authorization"] == f"Bearer {SECRET}" for r in judge.requests)
    assert "MT-Bench: 2 questions × 1 turn(s), 2 model(s), judged by gpt-4 at " in err  # said before it runs
    full = json.loads((out_dir / "results_full.json").read_text())
    cut = json.loads((out_dir / "results_personalized.json").read_text())
    run = json.loads((out_dir / "mt_bench.json").read_text())
    overall = run["tally"]["personalized"]["overall"]
    assert cut["results"]["mt_bench"]["win_rate,none"] == overall["win_rate"]
    assert full["results"]["mt_bench"]["score,none"] == run["tally"]["original"]["overall"]["score"]
    assert "win_rate,none" not in full["results"]["mt_bench"] and run["questions"] == [81, 82]
    assert full["config"]["mt_bench"]["judge"].startswith("gpt-4 at http://127.0.0.1:")
    assert "| mt_bench win_rate |" in out and "## MT-Bench, judged by gpt-4 at" in out
    assert "## MT-Bench" in (out_dir / "comparison.md").read_text()
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert not [text for text in [*written, out, err] if SECRET in text]


def test_c4_and_mt_bench_together_beside_the_original(folder, tmp_path, capsys, monkeypatch, data_dir):
    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "mt_bench").symlink_to(data_dir / "mt_bench", target_is_directory=True)
    write_shard(data / c4.LOCAL, ["The cat sat on the mat and looked at the door for a long while."] * 200)
    with scripted_judge() as (url, _):
        code, out, err = _run(capsys, "--full", "--model", folder, "--task", "c4,mt_bench", "--limit", 1,
                              "--judge", url, "--answer_tokens", 4, "--data_dir", data, "--output_folder", tmp_path)
    assert code == 0, err
    results = json.loads((tmp_path / "results_full.json").read_text())
    assert results["config"]["tasks"] == ["c4", "mt_bench"]
    assert results["results"]["c4"]["perplexity,none"] > 1 and results["n-samples"]["c4"]["effective"] == 1
    assert "| c4 perplexity |" in out and "| mt_bench score |" in out


def test_c4_offline_without_the_file_is_one_line(tmp_path, capsys, folder):
    code, _, err = _run(capsys, "--full", "--model", folder, "--task", "c4", "--data_dir", tmp_path,
                        "--output_folder", tmp_path)
    assert code == 2 and "Traceback" not in err and "Loading" not in err  # said before the model loads
    assert err.strip() == (f"layercut-benchmark: error: C4 perplexity needs allenai/c4's "
                           f"en/c4-validation.00000-of-00008.json.gz: the Hub cannot be reached, so download it and "
                           f"put it at {tmp_path}/c4/c4-validation.00000-of-00008.json.gz.")


@pytest.mark.parametrize("args, reason", [
    (["--full", "--judge", "default"], "--judge go with --task mt_bench"),
    (["--full", "--task", "mt_bench", "--turns", 3], "MT-Bench has 2 turns"),
    (["--full", "--task", "mt_bench", "--turns", 0], "MT-Bench has 2 turns"),
    (["--full", "--task", "mt_bench", "--judge_tokens", 0], "A judge's token cap must be 1…"),
    (["--full", "--task", "mt_bench", "--judge_model", "gpt-4"], "--judge_model names the model an endpoint serves"),
    (["--sweep", 2, "--task", "mt_bench"], "goes with a comparison"),
    (["--full", "--task", "mt_bench", "--judge", "https://user:pw@host/v1"], "without a user, password or query"),
    (["--full", "--task", "mt_bench", "--data_dir", "/nonexistent"], "MT-Bench is missing"),
])
def test_bad_mt_bench_flags_are_one_line(args, reason, capsys):
    code, _, err = _run(capsys, *args)
    assert code == 2 and reason in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_mt_bench_self_judged_on_the_default_model(tmp_path, capsys, data_dir):
    code, out, err = _run(capsys, "--personalized", "--start_block", 15, "--end_block", 20, "--task", "mt_bench",
                          "--limit", 2, "--answer_tokens", 16, "--judge_tokens", 16, "--data_dir", data_dir,
                          "--output_folder", tmp_path)
    assert code == 0, err
    run = json.loads((tmp_path / "mt_bench.json").read_text())
    assert run["judge"]["judge"] == "the original itself (self-judged)" and run["done"]["answers"] == 4
    assert len(run["graded"]) == 4 and len(run["games"]) == 2 and all(run["answers"]["original"].values())
    assert "Self-judged" in out  # its time is the benchmarks' to measure, not a test's to bound
