"""Measurements as data (issue 42): the docs' generated tables agree with the benchmarks' JSON, a block that names a
missing file or a result without a renderer fails, and a benchmark's result carries where it came from."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import record, tables
from conftest import REPO

RENDERED_NOW = ("deployed_default", "deployed_llama1b_8layers", "deployed_llama1b_16layers", "engines_default",
                "engines_llama1b", "quantized_head", "budget_cli", "first_screen", "two_four_kernels", "space_build",
                "explain", "turns", "lowrank", "sparsity", "quantization",
                "sublayer_vs_layers", "width", "gpu_decode_NVIDIA_H200", "gpu/2026-11-27-0733-NVIDIA_H200",
                "gpu/2026-11-27-0730-NVIDIA_H200", "frontier", "heal", "recovery", "taylor_memory",
                "default_jobs", "gguf_roundtrip", "big_model", "taylor_memory_folder",
                "offload", "sparsity_sweep_arc_easy",
                "sparsity_sweep_cbt_style_cn", "shared_probe")


def test_every_generated_table_in_the_docs_matches_its_json():
    problems = tables.check(REPO)
    assert not problems, "\n".join(problems) + f"\nregenerate the tables with: {tables.REGENERATE}"


@pytest.mark.parametrize("name", RENDERED_NOW)
def test_each_committed_result_renders_under_a_caption_naming_its_file(name):
    rendered = tables.render(name)
    assert rendered.startswith(f"*`benchmarks/results/{name}.json`: ") and "\n| " in rendered


def _docs(tmp_path, text: str, where: str = "README.md"):
    """A repository in ``tmp_path``: one Markdown file and a results folder holding budget_cli.json."""
    (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / where).write_text(text)
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (results / "budget_cli.json").write_text((tables.RESULTS / "budget_cli.json").read_text())
    return results


def test_a_block_is_filled_from_its_json_and_a_changed_figure_is_named(tmp_path):
    results = _docs(tmp_path, "Text.\n\n<!-- results: budget_cli -->\n<!-- /results -->\n\nMore.\n", "docs/memory.md")
    assert tables.check(tmp_path) == ["docs/memory.md: block 'budget_cli' differs from what budget_cli.json renders"]
    changed, problems = tables.regenerate(tmp_path)
    assert changed == [tmp_path / "docs/memory.md"] and problems == [] and tables.check(tmp_path) == []
    page = (tmp_path / "docs/memory.md").read_text()
    assert page.startswith("Text.\n\n<!-- results: budget_cli -->\n*`benchmarks/results/budget_cli.json`: ")
    assert "| 1GiB | 3.41 | 168.8 |" in page and page.endswith("<!-- /results -->\n\nMore.\n")
    (tmp_path / "docs/memory.md").write_text(page.replace("| 1GiB | 3.41 |", "| 1GiB | 3.14 |"))
    assert tables.check(tmp_path) == ["docs/memory.md: block 'budget_cli' differs from what budget_cli.json renders"]
    found = json.loads((results / "budget_cli.json").read_text())
    found["runs"][1]["peak_anonymous_GiB"] = 3.14  # the figure changed in the file: the table follows it
    (results / "budget_cli.json").write_text(json.dumps(found))
    assert tables.check(tmp_path) == []


def test_a_block_inside_a_list_item_keeps_its_indent(tmp_path):
    _docs(tmp_path, "- memory:\n\n  <!-- results: budget_cli -->\n  <!-- /results -->\n- next\n")
    tables.regenerate(tmp_path)
    lines = (tmp_path / "README.md").read_text().splitlines()
    assert all(line.startswith("  ") or not line for line in lines[2:-1]) and lines[-1] == "- next"


def test_a_marker_shown_in_fenced_code_or_named_in_prose_is_text(tmp_path):
    text = ("Put a table between `<!-- results: NAME -->` and `<!-- /results -->`:\n\n```markdown\n"
            "<!-- results: budget_cli -->\n<!-- /results -->\n```\n")
    _docs(tmp_path, text)
    assert tables.check(tmp_path) == [] and tables.regenerate(tmp_path)[0] == []


def test_a_block_naming_a_result_without_json_or_without_renderer_fails(tmp_path):
    results = _docs(tmp_path, "<!-- results: budget_cli -->\nunclosed\n<!-- results: nowhere -->\n<!-- /results -->\n\n"
                              "<!-- results: odd -->\n<!-- /results -->\n")
    (results / "odd.json").write_text(json.dumps({"value": 1.0, "date": "2026-11-27"}))
    problems = tables.check(tmp_path)
    assert len(problems) == 3
    assert "block 'nowhere': LookupError: no results file nowhere.json" in problems[0]
    assert "block 'odd': LookupError: no renderer for 'odd'" in problems[1]
    assert "without a '<!-- /results -->'" in problems[2]
    assert tables.regenerate(tmp_path)[0] == []  # nothing it cannot render is touched, nor the unclosed block


def test_a_result_without_a_renderer_of_its_own_falls_back_to_its_flat_columns(tmp_path):
    results = _docs(tmp_path, "<!-- results: flat -->\n<!-- /results -->\n")
    (results / "flat.json").write_text(json.dumps({"columns": {"A": {"ms": 1.25, "kernel": "dense"}, "B": {"ms": 2}}}))
    tables.regenerate(tmp_path)
    text = (tmp_path / "README.md").read_text()
    assert "machine not recorded; date not recorded; commit not recorded" in text
    assert "|  | ms | kernel |\n|---|---:|---:|\n| A | 1.25 | dense |\n| B | 2 | — |" in text


def test_a_result_carries_its_provenance_and_refuses_figures_that_would_hide_it(tmp_path):
    path = record.write_result("sub/run", {"columns": {"a": {"ms": 1.5, "spread": math.nan}}, "shape": (1, 2)},
                               how="a test", model="tiny", folder=tmp_path)
    found = json.loads(path.read_text())
    assert path == tmp_path / "sub" / "run.json"
    assert found["columns"] == {"a": {"ms": 1.5, "spread": None}} and found["shape"] == [1, 2]
    assert found["model"] == "tiny" and found["how"] == "a test" and found["device"] == "CPU"
    assert "CPU cores" in found["machine"]
    assert torch.backends.cpu.get_cpu_capability() in found["machine"]  # which kernels a CPU's figures came from
    assert {"python", "torch", "transformers"} <= set(found["versions"])
    assert found["commit"] == record.CODE[0] and found["dirty"] == record.CODE[1] and found["date"].count("-") == 2
    assert found["command"].startswith("python ")
    with pytest.raises(ValueError, match="commit"):
        record.write_result("clash", {"commit": "mine"}, how="a test", folder=tmp_path)


def test_the_results_folder_can_be_moved_for_trial_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYERCUT_RESULTS_DIR", str(tmp_path))
    assert record.write_result("trial", {"x": 1}, how="a test").parent == tmp_path
    assert record.device_name("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3" and record.device_name("cpu") == "CPU"


def test_a_view_of_the_frontier_keeps_the_original_and_its_size_alone_on_the_axis_it_names():
    """The README's headline table is ``frontier#bytes80``: the frontier page's points sized by bytes, at 80 %."""
    whole, view, by_bytes = (tables.render(name) for name in ("frontier", "frontier#80", "frontier#bytes80"))

    def rows(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("| ") and line.split(" | ")[0].endswith("%")]

    assert {row.split(" | ")[0] for row in rows(view)} == {"| 100 %", "| 80 %"}
    assert {"| 90 %", "| 70 %"} <= {row.split(" | ")[0] for row in rows(whole)}
    assert set(rows(view)) <= set(whole.splitlines())
    assert "Frontier by parameters" in view and "Frontier by weight bytes" in by_bytes
    family = {row.split(" | ")[1].split(" ")[0]: row for row in rows(by_bytes)}
    assert "int8" in family and "int8" not in {row.split(" | ")[1].split(" ")[0] for row in rows(view)}
    assert "sparsity" not in family  # its zeros are stored: by bytes it is no smaller than the original


def test_a_screened_runs_time_is_split_by_its_points_own_seconds():
    """The frontier screen's time table: the front's builds and full measurements (summed here from the JSON by
    hand: the original and each point named on the front), the builds screened out, and the rest, adding up to the
    run's wall time."""
    from benchmarks.renderers import screen_time

    found = json.loads((tables.RESULTS / "screen_target.json").read_text())
    run, frontier = found["screened"], found["screened"]["frontier"]
    front = [p for p in frontier["points"] if p["families"] in (["int8"], ["int4"])]
    assert len(front) == 2 and found["front_screened"] == ["int4", "int8", "original"]
    front_s = frontier["dense"]["build_s"] + frontier["dense"]["measure_s"] + sum(p["build_s"] + p["measure_s"]
                                                                                  for p in front)
    out_s = sum(p["build_s"] for p in frontier["screened"])
    rows = {line.split(" | ")[0].strip("| "): float(line.split(" | ")[1]) for line in screen_time(run).splitlines()
            if line.startswith("| ") and not line.startswith("| part")}
    assert rows["the front, built and measured in full"] == round(front_s)
    assert rows["builds of the candidates screened out"] == round(out_s)
    assert rows["other points measured in full (the original off the front, the best few at a size)"] == 0
    rest = run["wall_s"] - front_s - out_s
    assert rows["the rest: analyses, the screens' perplexity windows, loading"] == round(rest)
    assert rows["**all**"] == round(run["wall_s"])
