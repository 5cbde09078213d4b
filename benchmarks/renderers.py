"""The renderers of ``benchmarks/tables.py``: one per kind of result, each turning a benchmark's JSON into the
Markdown of its table, and the few Markdown helpers they share. Register one with ``@renders("name_*")``."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

_MIB = 2**20

RENDERERS: dict[str, Callable[[dict], str]] = {}  # a result's name, or a pattern of names → its Markdown


def renders(*patterns: str):
    """Register a renderer for the results whose names match ``patterns`` (``fnmatch``: ``deployed_*``)."""
    def register(function: Callable[[dict], str]) -> Callable[[dict], str]:
        RENDERERS.update(dict.fromkeys(patterns, function))
        return function
    return register


def renderer(name: str, found: dict) -> Callable[[dict], str] | None:
    """The renderer registered for ``name``; else the generic one when its figures are a flat table; else None."""
    for pattern, function in RENDERERS.items():
        if fnmatch.fnmatchcase(name, pattern):
            return function
    return generic if _flat(found.get("columns")) else None


# ---------------------------------------------------------------- Markdown helpers


def table(header: list[str], rows: list[list], align: str = "") -> str:
    """A Markdown table; ``align``: one letter a column, ``l`` or ``r`` (default: the first left, the rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def num(value, spec: str = ".1f", missing: str = "—") -> str:
    """``value`` formatted, or ``missing`` when absent."""
    return missing if value is None else format(value, spec)


def pct(share) -> str:
    return "—" if share is None else f"{100 * share:.0f} %"


def pct_1(share) -> str:
    return "—" if share is None else f"{100 * share:.1f} %"


def _flat(columns) -> bool:
    return isinstance(columns, dict) and bool(columns) and all(isinstance(c, dict) for c in columns.values())


def generic(found: dict) -> str:
    """The fallback for results without a renderer of their own whose "columns" map names to flat figures: a row
    per column of the results, a column per figure (a nested figure shown as JSON)."""
    columns = found["columns"]
    keys = list(dict.fromkeys(key for row in columns.values() for key in row))

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "—" if value is None else json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) \
            else str(value)

    return table(["", *keys], [[label, *(cell(row.get(key)) for key in keys)] for label, row in columns.items()])


# ---------------------------------------------------------------- one renderer per kind of result


@renders("deployed_*")
def deployed(found: dict) -> str:
    """benchmarks/deployed.py: each column's batch-1 decode against the bandwidth floor, eager and compiled."""
    columns = found["columns"]
    bandwidth = next(iter(columns.values())).get("bandwidth_GBps")
    rows = []
    for label, c in columns.items():
        compiled = c.get("compiled")
        rows.append([label, num(c["decode_ms_per_token"]), num(c["speed_vs_original"], ".2f"),
                     num(c["bytes_per_token"] / _MIB, ",.0f"), num(c["floor_ms"]), pct(c["limit_share"]),
                     f"{compiled['decode_ms_per_token']:.1f} ({compiled['speed_vs_original']:.2f})" if compiled
                     else "—", f"{c['timing_memory']['rise_MiB']} ({c['timing_memory']['kv_cache_MiB']})"
                     if c.get("timing_memory", {}).get("rise_MiB") is not None else "—"])
    return (f"{found['dtype']}; the bandwidth probe read {num(bandwidth, '.0f')} GB/s.\n\n" +
            table(["column", "decode ms/token", "× original", "MiB read/token", "floor ms", "share of limit",
                   "compiled ms (× orig.)", "timing memory rise MiB (KV cache)"], rows))


@renders("engines_*")
def engines(found: dict) -> str:
    """benchmarks/engines.py: each column in LayerCut beside its GGUF export in llama.cpp."""
    rows = [[f"{label} ↔ {c['llama_cpp_type']}",
             f"{c['layercut_tokens_per_s']:.1f} ({pct(c['layercut_share_of_floor'])})",
             f"{c['llama_cpp_tokens_per_s']:.1f} ({pct(c['llama_cpp_share_of_floor'])})",
             num(c["layercut_over_llama_cpp_speed"], ".2f")] for label, c in found["columns"].items()]
    return (f"{found['dtype']} in LayerCut; llama-cpp-python {found.get('llama_cpp_python') or '?'}; the bandwidth "
            f"probe read {num(found.get('bandwidth_GBps'), '.0f')} GB/s.\n\n" +
            table(["pair", "LayerCut tok/s (share of floor)", "llama.cpp tok/s (share of floor)",
                   "LayerCut ÷ llama.cpp"], rows))


@renders("quantized_head")
def quantized_head(found: dict) -> str:
    """benchmarks/quantized_head.py: quality and bytes of int8 and int4, each with and without an int8 head."""
    columns = found["columns"]

    def accuracy(c) -> str:
        value = c.get("hellaswag_acc_norm")
        return "—" if value is None else f"{value[0]:.1f} ± {value[1]:.1f}"

    rows = [["WikiText-2 perplexity", *(num(c.get("wikitext2_ppl"), ".2f") for c in columns.values())],
            ["hellaswag acc_norm", *(accuracy(c) for c in columns.values())],
            ["MiB stored", *(num(c["weights_MiB"]) for c in columns.values())],
            ["MiB read a token", *(num(c["read_per_token_MiB"]) for c in columns.values())]]
    return table(["", *columns], rows)


@renders("quantized_scoring*")
def quantized_scoring(found: dict) -> str:
    """benchmarks/quantized_scoring.py: int8 and int4 models scored through their kernels and widened, beside the
    float original."""
    peaks = found["peak_gflops"]
    rows = [[name, num(c["median_s"]), num(c["task_s"]), num(c["perplexity_s"]), num(c["perplexity_gflops"], ".0f"),
             pct(c["perplexity_gflops"] / peaks["float32"]), num(c["acc_norm"], ".3f"), num(c["perplexity"], ".3f")]
            for name, c in found["columns"].items()]
    ratios = "; ".join(f"{bits} widened takes {1 / r['widened_over_kernel_speedup']:.2f}× its kernel's time (the "
                       f"kernel {r['kernel_over_float_time']:.2f}× the float32 original's, widened "
                       f"{r['widened_over_float_time']:.2f}×)" for bits, r in found["bits"].items())
    return (table(["route", "s (median)", "hellaswag s", "perplexity s", "perplexity GFLOP/s",
                   "of the float32 peak", "hellaswag acc_norm", "perplexity"], rows)
            + f"\n\n{ratios}. Here int4 {'widens' if found['int4_widens_here'] else 'keeps its kernel'}. "
              "Matrix-product peak here (4,096 × 1,536 × 576): "
            + ", ".join(f"{dtype} {value:.0f} GFLOP/s" for dtype, value in peaks.items()) + ".")


@renders("budget_cli")
def budget_cli(found: dict) -> str:
    """benchmarks/budget_cli.py: the CLI's anonymous memory peak, whole and under a budget."""
    rows = [[run["budget"] or "none (loaded whole)", num(run["peak_anonymous_GiB"], ".2f"), num(run["wall_s"])]
            for run in found["runs"]]
    return table(["memory budget", "peak anonymous memory (GiB)", "wall time (s)"], rows)


@renders("first_screen")
def first_screen(found: dict) -> str:
    """benchmarks/first_screen.py: from ``python app.py`` to the heatmap, cold and warm; each start-up step; the
    talk's path after the heatmap."""
    rows, runs = [], (("cold cache", "cold"), ("warm restart", "warm_restart"))
    for label, key in runs:
        run = found[key]
        again = run.get("page_open_to_heatmap_s") or {}
        rows.append([label, num(run["launch_to_server_up_s"]), num(run["launch_to_heatmap_s"]),
                     num(run["first_page_open_to_heatmap_s"], ".2f"),
                     f"{num(again.get('median'), '.2f')} ({num(again.get('max'), '.2f')})"])
    out = table(["launch", "server up (s)", "heatmap drawn (s)", "first page open → heatmap (s)",
                 "page open → heatmap, median (max) (s)"], rows)
    steps = {key: found[key].get("start_up_steps_s") or {} for _, key in runs}
    names = list(dict.fromkeys(name for key in steps for name in steps[key]))
    if names:
        out += ("\n\nThe server's start-up, step by step (seconds; the heatmap shows after *analysis*, the rest "
                "follows):\n\n") + table(["launch", *names], [[label, *(num(steps[key].get(name)) for name in names)]
                                                             for label, key in runs])
    pair = found.get("side_by_side")
    if pair:
        mine, theirs = (pair["page_open_to_heatmap_s"][label]["median"] for label in ("this checkout", pair["against"]))
        out += (f"\n\nPage open → heatmap on two warm servers opened in turn (median seconds): this checkout "
                f"{num(mine, '.2f')}, `{pair['against']}` {num(theirs, '.2f')} "
                f"(× {num(pair['this_checkout_over_against'], '.2f')}).")
    talk = found["cold"].get("talk_s")
    if talk:
        out += "\n\nThe talk's path on the cold launch's page (seconds):\n\n" + table(
            list(talk), [[num(seconds) for seconds in talk.values()]])
    return out


@renders("space_build")
def space_build(found: dict) -> str:
    """benchmarks/space_build.py: the Space's build and the package's, each timed step by step."""
    rows = []
    for label, key in (("Space (requirements.txt)", "space"), ("package (pip install .)", "package")):
        part = found.get(key)
        if part:
            rows.append([label, Path(part["python"]).name, num(part.get("apt_s")), num(part["pip_s"]),
                         num(part.get("venv_mib"), ","), num(part.get("launch_to_server_up_s")),
                         num(part.get("launch_to_heatmap_s")), f"{part.get('date')}, {part.get('commit')}"])
    return table(["build", "Python", "apt (s)", "pip (s)", "venv (MiB)", "server up (s)", "heatmap drawn (s)",
                  "built on"], rows, "llrrrrrl")


@renders("two_four_kernels")
def two_four_kernels(found: dict) -> str:
    """benchmarks/two_four_kernels.py: dense against 2:4 products per GPU, weight shape and input rows."""
    rows = []
    for run in found["runs"]:
        torch = run.get("torch") or run.get("versions", {}).get("torch")
        for r in run["rows"]:
            rows.append([f"{run['device']} (torch {torch})", f"{r['in']} → {r['out']}", r["rows"],
                         num(r["dense_ms"], ".3f"), num(r["sparse_ms"], ".3f"),
                         num(r["dense_ms"] / r["sparse_ms"], ".2f")])
    notes = "".join(f"\n\n{run['device']}: {run['source']}." for run in found["runs"] if run.get("source"))
    return table(["GPU", "in → out", "input rows", "dense (ms)", "2:4 (ms)", "dense ÷ 2:4"], rows, "llrrrr") + notes


@renders("decode_floor_dry_run", "gpu_decode_*")
def decode_floor(found: dict) -> str:
    """benchmarks/decode_floor.py (gpu_check.py's decode step): batch-1 decode, eager and compiled, against the
    floor."""
    rows = []
    for r in found["rows"]:
        if "error" in r:
            rows.append([r["model"], r["mode"], f"failed: {r['error']}", *[""] * 6])
            continue
        rows.append([r["model"], r["mode"], num(r["decode_ms"], ".2f"), num(r["floor_ms"], ".3f"),
                     f"{r['floor_share']:.1%}", num(r.get("compile_s"), ".1f", ""), num(r["weights_mib"], ",.1f"),
                     num(r["kv_cache_mib"], ",.2f"), num(r.get("peak_above_resident_mib"), ",.0f", "")])
    return (f"{found['device']}, bandwidth measured {found['bandwidth_gb_s']:.0f} GB/s, batch 1, "
            f"{found['prompt_len']} + {found['new_tokens']} tokens\n\n" +
            table(["model", "mode", "decode ms/token", "floor ms", "share of floor", "compile s", "weights MiB",
                   "KV cache MiB", "peak above resident MiB"], rows, "lllllllll"))


@renders("gpu/*", "gpu_check_dry_run")
def gpu_check(found: dict) -> str:
    """benchmarks/gpu_check.py: one run's steps, each with its seconds and peak GPU memory."""
    rows = [[s["step"], num(s["seconds"], ".1f", ""), num(s["peak_gpu_GiB"], ".2f", ""), s["note"]]
            for s in found["steps"]]
    return table(["step", "seconds", "peak GPU memory (GiB)", "note"], rows, "llll") + \
        ("" if found.get("finished", True) else "\n\nThe run stopped before its last step.")


@renders("screen_*")
def frontier_screen(found: dict) -> str:
    """benchmarks/frontier_screen.py: the screened frontier beside the exhaustive one (each from a cold results
    cache, one run), and the screen's error per family against the full measurement of the same candidate."""
    asked = f"target {found['target']}" if found.get("target") else f"sizes {found['sizes']}"
    same = lambda flag: "yes" if flag else "**no**"  # noqa: E731
    out = table(["frontier", "screened (s)", "exhaustive (s)", "× faster", "first early answer (s)",
                 "screen done (s)", "measured in full (screened / exhaustive)", "screened out", "same front",
                 "same best", "front points screened out"],
                [[f"{asked}, {found['task']} {found['limit']}", num(found["screened_wall_s"], ".0f"),
                  num(found["exhaustive_wall_s"], ".0f"), num(found["speedup"], ".2f"),
                  num(found["screened_first_answer_s"], ".0f"), num(found["screened_screened_s"], ".0f"),
                  f"{found['measured_in_full']['screened']} / {found['measured_in_full']['exhaustive']}",
                  found["screened_out"], same(found["same_front"]),
                  same(found["same_best"]) if found.get("target") else "—", found["front_points_screened_out"]]])
    errors = found["error_by_family"]
    out += (f"\n\nThe screen against the full measurement of the same candidate, per family (the original's screen "
            f"perplexity is {num(found['screen_over_full_original'], '.3f')} × its full one):\n\n") + table(
        ["family", "candidates", "largest \\|(screen ÷ full perplexity) ÷ the original's − 1\\|", "screened out",
         "of them on the exhaustive front"],
        [[family, e["points"], pct_1(e["max_ratio_error"]), e["screened_out"], e["front_screened_out"]]
         for family, e in errors.items()])
    return out + f"\n\nFront (both runs): {', '.join(found['front_exhaustive'])}.\n\n" + screen_time(found["screened"])


def screen_time(run: dict) -> str:
    """Where a screened run's seconds went, from its points' own build and measurement times: the front (the least
    any screen must spend to answer in full), the other points measured in full, the builds it screened out, the
    rest (analyses, the screens' perplexity windows, loading)."""
    from evaluation.frontier.result import FrontierResult

    result = FrontierResult.from_json(run["frontier"])
    front = {p.recipe.key for p in result.front()}
    spent = lambda points: sum(p.build_s + p.measure_s for p in points)  # noqa: E731
    parts = {"the front, built and measured in full": spent(p for p in result.everything() if p.recipe.key in front),
             "other points measured in full (the original off the front, the best few at a size)":
                 spent(p for p in result.everything() if p.recipe.key not in front),
             "builds of the candidates screened out": sum(p.build_s for p in result.screened)}
    parts["the rest: analyses, the screens' perplexity windows, loading"] = run["wall_s"] - sum(parts.values())
    rows = [[part, num(seconds, ".0f"), pct_1(seconds / run["wall_s"])] for part, seconds in parts.items()]
    return "Where the screened run's time went:\n\n" + table(["part", "s", "share"], rows + [
        ["**all**", num(run["wall_s"], ".0f"), pct_1(1.0)]])


@renders("frontier", "frontier_*")
def frontier(found: dict, view: str = "") -> str:
    """benchmarks/frontier.py: the CLI's own frontier table. A view names an axis, a size in percent or both:
    ``80`` (the original and the 80 % rows, then what they show in words written from them), ``bytes`` (the same
    points sized by their bytes as stored), ``bytes80``."""
    from evaluation.frontier.result import FrontierResult, format_table, what_it_shows

    axis, size = re.fullmatch(r"(params|bytes|ms)?(\d*)", view).groups()
    result = FrontierResult.from_json(found["frontier"])
    result = replace(result, axis=axis) if axis else result
    if not size:
        return format_table(result)
    return f"{format_table(replace(result, sizes=(int(size) / 100,)))}\n\n{what_it_shows(result, int(size) / 100)}"


@renders("explain")
def explain(found: dict) -> str:
    """benchmarks/explain.py: each cut's feedback on the slice, its first release's seconds and a full forward's."""
    rows = []
    for c in found["cuts"]:
        f = c["feedback"]
        release, full = min(c["release_wall_s"]), min(c["full_forward_wall_s"])
        rows.append([f"[{c['cut'][0]}, {c['cut'][1]})", f"{f['perplexity']:,.1f}", num(f["kl"], ".3f"),
                     f"{f['agreement_pct']:.1f} %", num(c["release_wall_s"][0], ".2f"), num(release, ".2f"),
                     num(full, ".2f"), num(release / full, ".2f")])
    original = found["cuts"][0]["feedback"]["original_perplexity"] if found["cuts"] else None
    return (f"The original's slice perplexity {num(original)}; its one-off states "
            f"{num(found['one_off_wall_s'], '.2f')} s; the first release of a cut: median "
            f"{num(found['first_release_median_s'], '.2f')} s (target ≤ 2 s). Wall seconds; \"best\": the best of "
            f"{len(found['cuts'][0]['release_wall_s']) if found['cuts'] else 0}, alternating.\n\n" +
            table(["cut", "slice perplexity", "KL (nats/token)", "top-1 agreement", "first release (s)",
                   "best release (s)", "full forward (s)", "release ÷ forward"], rows))


@renders("sparsity")
def sparsity(found: dict) -> str:
    """benchmarks/sparsity.py: each method's perplexity and prune time at 50 % and 2:4; decode with zeros stored."""
    rows = [[r["method"], r["sparsity"], "—" if r["method"] == "dense" else num(r["prune_s"]),
             pct_1(r["zero_fraction"]), num(r["perplexity"], ".2f")] for r in found["rows"]]
    decode = [[d["batch"], f"{d['dense_ms']:.1f} ± {d['dense_iqr_ms']:.1f}", f"{d['zeros_ms']:.1f} ± "
               f"{d['zeros_iqr_ms']:.1f}", f"{d['ratio']:.2f}×"] for d in found.get("decode", [])]
    return (table(["method", "sparsity", "prune time (s)", "zero weights in layers", "WikiText-2 perplexity"], rows,
                  "llrrr") + "\n\nDecode latency per token, dense against Wanda 50 % stored densely (median ± IQR):"
            "\n\n" + table(["batch", "dense (ms)", "dense with zeros (ms)", "dense / zeros"], decode, "rrrr"))


@renders("turns")
def turns(found: dict) -> str:
    """benchmarks/turns.py: variant B streamed from its files beside the original, against B brought in (turns)."""
    streamed, turn, again = found["streamed"], found["turns"], found.get("again") or {}
    rows = [["B's decode speed (tokens/s)", num(streamed["tokens_per_s"], ".2f"),
             f"{turn['tokens_per_s']:.2f} ({turn['over_streamed']:.2f} ×)"],
            ["B's first token (s)", num(streamed["ttft_s"], ".2f"), num(turn["ttft_s"], ".2f")],
            ["the swap (s)", "—", f"{turn['swap_s']:.2f} the first time, which writes the original's file; "
                                  f"{num(again.get('swap_s'), '.2f')} the second time"],
            [f"process memory after (GiB, RSS; budget {found['budget_GiB']:.2f})", num(streamed["rss_GiB"], ".2f"),
             num(turn["rss_GiB"], ".2f")]]
    same = "the same" if turn.get("same_answer") else "NOT the same"
    return (table(["", "B streamed from its files", "B brought in (turns)"], rows, "lll") +
            f"\n\nB's answers streamed and in turns are {same} token for token.")


@renders("lowrank")
def lowrank(found: dict) -> str:
    """benchmarks/lowrank.py: weight against feature space at each ratio: parameters, time, perplexity."""
    total = found["parameters"]

    def perplexity(value) -> str:
        return "—" if value is None else f"{value:,.0f}" if value >= 1000 else f"{value:.2f}"

    rows = [[r["space"], r["asked"], f"{r['parameters']:,} ({100 * r['parameters'] / total:.1f} %)",
             "—" if r["space"] == "dense" else num(r["decompose_s"]), perplexity(r["perplexity"])]
            for r in found["quality"]]
    return table(["space", "asked", "parameters", "decompose time (s)", "WikiText-2 perplexity"], rows, "lrrrr")


@renders("sublayer_vs_layers")
def sublayer_vs_layers(found: dict) -> str:
    """benchmarks/sublayer_vs_layers.py: an attention drop against the whole-layer cuts that bracket its size."""
    rows = []
    for label, c in found["columns"].items():
        acc, kv = c["hellaswag_acc_norm"], c.get("kv_cache")
        rows.append([c.get("recipe") or label, f"{acc[0]:.1f} ± {acc[1]:.1f}" if acc[1] is not None else num(acc[0]),
                     f"{c['speedup']:.2f}× ({c['ideal_speedup']:.2f}×)", num(c["decode_ms_per_token"]),
                     f"{kv[0]:.2f} {kv[1]}" if kv else "—"])
    return table(["", "hellaswag acc_norm", "decode speedup (ideal)", "decode ms/token", "KV cache"], rows, "lrrrr")


@renders("quantization")
def quantization(found: dict) -> str:
    """benchmarks/quantization.py: dense, Wanda 50 % and a cut, each without, with int8 and with int4 weights."""
    columns = found["columns"]
    names = {"dense": "dense", "wanda50": "Wanda 50 %", "cut": "cut"}

    def label(key: str) -> str:
        base, _, bits = key.partition("+")
        return f"{names.get(base, base)} {bits}".strip() if base != "wanda50" or not bits else f"Wanda {bits}"

    def accuracy(c: dict) -> str:
        value = c.get("hellaswag_acc_norm")
        return "—" if value is None else f"{value[0]:.1f} ± {value[1]:.1f}"

    rows = [["WikiText-2 test perplexity", *(num(c.get("wikitext2_ppl"), ".2f") for c in columns.values())]]
    if any(c.get("hellaswag_acc_norm") for c in columns.values()):
        rows.append(["hellaswag acc_norm", *(accuracy(c) for c in columns.values())])
    rows += [["weight memory, MiB (real bytes)", *(num(c["weight_MiB"]) for c in columns.values())],
             ["owned beside the original, MiB", *(num(c["owned_MiB"], ".1f") for c in columns.values())],
             ["decode ms/token (batch 1)", *(num(c["decode_ms_per_token"]) for c in columns.values())],
             ["decode speed against dense", *(f"{c['speed_vs_dense']:.2f}×" for c in columns.values())],
             ["build time (s)", *(num(c.get("build_s")) for c in columns.values())]]
    return table(["", *(label(k) for k in columns)], rows)


@renders("calibration_agreement")
def calibration_agreement(found: dict) -> str:
    """benchmarks/calibration_agreement.py: each method's best block on the calibration against the measured
    sweep; the opening cut."""
    rows = [[name, num(m["time_s"], ".1f"), f"[{m['best_block'][0]}, {m['best_block'][1]})",
             f"{m['measured']:+.3f}", f"{m['rho']:+.3f}", m["stability"] or "—"]
            for name, m in found["methods"].items()]
    best = found["measured_best"]
    text = (f"Calibration: {found['calibration']} (residual stream {found['residual_s']:.1f} s); {found['task']}, "
            f"first {found['limit']} documents, {found['metric']} {found['baseline']:.3f} uncut; the measured best "
            f"{found['block']}-layer cut [{best[0]}, {best[1]}).\n\n")
    text += table(["method", "analysis (s)", f"best {found['block']}", "measured change", "Spearman ρ", "stability"],
                  rows, "lrlrrl")
    if opening := found.get("opening_cut"):
        block = f"[{opening['block'][0]}, {opening['block'][1]})"
        text += (f"\n\nThe opening cut (angular, {opening['layers']} layers): {opening['stability'] or block}; "
                 f"{opening['prompt']!r} → {opening['answer']!r}.")
    return text


@renders("fast_scorer", "fast_scorer_dry_run")
def fast_scorer(found: dict) -> str:
    """benchmarks/fast_scorer.py: the fast scorer against HFLM, and the cut sweep against each cut on its own."""
    scorer, sweep = found["scorer"], found.get("sweep")
    rows = [["fast scorer against HFLM", num(scorer["hflm_s"]), num(scorer["fast_s"]),
             f"{scorer['fast_s'] / scorer['hflm_s']:.3f}", f"{scorer['fast_cpu_s'] / scorer['hflm_cpu_s']:.3f}",
             "≤ 0.5", "identical" if scorer["identical"] else
             f"differ (max Δ log-likelihood {scorer['max_ll_diff']:.1e})"]]
    if sweep:
        timed = len(sweep["naive_timed_starts"])
        rows.append([f"the sweep against each cut on its own ({timed} cuts timed)", num(sweep["naive_s"]),
                     num(sweep["sweep_s"]), f"{sweep['sweep_s'] / sweep['naive_s']:.3f}",
                     f"{sweep['sweep_cpu_s'] / sweep['naive_cpu_s']:.3f}", "≤ 0.55",
                     "identical" if not sweep["mismatches"] else f"differ at starts {sweep['mismatches']}"])
    args = found.get("args", {})
    return (f"{args.get('task', '')}, the first {args.get('limit', '')} documents, batch {args.get('batch_size', '')}, "
            f"torch threads {args.get('threads', '')}:\n\n" +
            table(["", "before (s)", "after (s)", "after ÷ before, wall", "CPU", "target", "metrics"], rows, "lrrrrrl"))


@renders("width", "heal", "recovery")
def printed_rows(found: dict) -> str:
    """benchmarks/width.py, heal.py and recovery.py: the table they print, its rows already formatted, a column per
    model."""
    labels = found["columns"]  # key → the column's name
    rows = [[name, *(row.get(key, "") for key in labels)] for name, row in found["rows"].items()]
    return table(["", *labels.values()], rows)


@renders("taylor_memory", "taylor_memory_*")
def taylor_memory(found: dict) -> str:
    """benchmarks/taylor_memory.py: Taylor+'s peak memory over the weights, beside whole-sequence logits (and the
    textbook backward with ``--reference``)."""
    ways = {"whole_sequence_logits": "whole-sequence logits (run first)", "taylor": "Taylor+ as prune.score runs it",
            "plain_backward": "one plain backward, every gradient kept"}
    rows = [[label, f"{m['parameters'] / 1e9:.3f} B", num(m["weights_MiB"], ",.0f"), name, num(w["peak_MiB"], ",.0f"),
             f"{w['peak_over_weights']:.2f}×", num(w["seconds"], ".0f")]
            for label, m in found["models"].items() for key, name in ways.items() if (w := m.get(key))]
    same = "; ".join(f"{label}: {'the same' if m['same_scores'] else 'different'} scores both ways"
                     for label, m in found["models"].items())
    return table(["model", "parameters", "weights MiB", "computed as", "peak MiB", "peak ÷ weights", "seconds"],
                 rows, "lrrlrrr") + f"\n\n{same}."


@renders("sparsity_sweep_*")
def sparsity_sweep(found: dict) -> str:
    """benchmarks/sparsity_sweep.py: the app's and the CLI's own sweep table, and the seconds of every point."""
    from evaluation.sweeps.sparsity import SparsitySweepResult, format_table

    result = SparsitySweepResult.from_json(found["sweep"])
    rows = [[method, *(f"{p:.0f} + {m:.0f}" for p, m in zip(result.prune_s[method], result.measure_s[method]))]
            for method in result.methods]
    return (format_table(result) + f"\n\nSeconds per point, prune + measure (the dense point: measure only); the run "
            f"took {found['wall_s'] / 60:.0f} min on {found['threads']} threads:\n\n" +
            table(["method", *(f"{100 * level:g} %" for level in result.levels)], rows))


@renders("default_jobs", "default_jobs_training")
def default_jobs(found: dict) -> str:
    """benchmarks/default_jobs.py: each default job of the page, cold and warm, beside the estimate it shows."""
    def ratio(estimate, seconds) -> str:
        return "—" if estimate is None or not seconds else f"{estimate / seconds:.2f}"

    rows = [[name, num(j["cold_s"]), num(j["warm_s"]), num(j["estimate_s"]), ratio(j["estimate_s"], j["cold_s"])]
            for name, j in found["jobs"].items()]
    compared = "; ".join(f"{label}: {recipe}" for label, recipe in found["compared"].items())
    return (f"The page opened (load, analysis, stability) in {found['page_open_s']:.1f} s on {found['threads']} "
            f"threads; compared: {compared}. Warm: the same job again (benchmarks, perplexity and the sweeps read "
            "back from the results cache).\n\n" +
            table(["job", "cold (s)", "warm (s)", "estimate (s)", "estimate ÷ cold"], rows))


@renders("gguf_roundtrip")
def gguf_roundtrip(found: dict) -> str:
    """benchmarks/gguf_roundtrip.py: real GGUFs in, cut, and out in each type, read back against the folder."""
    rows, notes = [], []
    for m in found["models"].values():
        cut = f"{m['gguf']}, [{m['cut'][0]}, {m['cut'][1]})"
        for i, (kind, t) in enumerate(m["types"].items()):
            rows.append([cut if i == 0 else "", kind, f"{t['export_s']:.1f} s", f"{t['gguf_MiB']:.1f} MiB",
                         f"{t['max_logit_difference']:.3g}", f"{t['top1_agreement_pct']:.1f} %",
                         f"{t['perplexity_folder']:.2f} → {t['perplexity_gguf']:.2f}"])
        load = "converted into the cache" if m["converted"] else "already in the cache"
        notes.append(f"{m['gguf']} ({m['layers']} layers): first load {m['first_load_s']:.1f} s ({load}), then "
                     f"{m['cached_load_s']:.1f} s; uncut perplexity {m['uncut_perplexity']:.2f}; greedy from its "
                     f"{m['greedy']['type']} file: {m['greedy']['text']!r}.")
        if broken := m.get("broken_cut"):
            said = f"refused: \"{broken['refused']}\"" if broken["refused"] else "NOT refused"
            notes.append(f"The cut [{broken['cut'][0]}, {broken['cut'][1]}) of {m['gguf']}: {said}")
    return (table(["model, cut", "type", "export", "GGUF size", "largest logit difference", "top-1 agreement",
                   "perplexity: folder → GGUF"], rows, "llrrrrr") + "\n\n" + "\n\n".join(notes))


@renders("shared_probe", "shared_probe_partial")
def shared_probe(found: dict) -> str:
    """benchmarks/shared_probe.py: what hostile visitors' inputs got from a shared server, and its isolation checks."""
    s = found["summary"]
    rows = [[s["inputs"], s["tracebacks"], s["server_paths"], s["crashes"], s["catch_all"], s["bare_errors"],
             s["long_messages"], s["hangs"], "yes" if s["marker_files"] else "no", s["server_log_tracebacks"],
             f"{s['seconds'] / 60:.0f} min"]]
    checks = found["checks"]
    failed = [f"{c['name']}: {c['detail']}" for c in checks if not c["passed"]]
    return (table(["inputs", "tracebacks", "server paths", "crashes", "catch-all", "bare \"Error\"", "long echoes",
                   "hangs", "visitor code ran", "server-log tracebacks", "took"], rows, "r" * 11) +
            f"\n\n{len(checks) - len(failed)} of {len(checks)} checks passed (isolation of cuts, results, Stop and "
            "exports; `/config`; the file route without a session)" + (": failed: " + "; ".join(failed) if failed
                                                                        else "."))


@renders("big_model", "big_model_dry_run")
def big_model(found: dict) -> str:
    """benchmarks/big_model.py: each forward-only job on a model larger than the memory budget, with its peaks."""
    gpu = found.get("device") not in (None, "CPU")
    rows = [[s["step"], num(s["seconds"], ".0f"), num(s["peak_resident_GiB"], ".2f"),
             *([num(s["peak_gpu_GiB"], ".2f")] if gpu else [])] for s in found["steps"]]
    shown = [[m["model"], m["name"], f"{m['value']:,.2f} {m['unit']}"] for m in found["measurements"]]
    start, end = found["cut"]
    return (f"Budget {found['budget']}; weights {found['weights_GiB']:.2f} GiB, {found['resident_GiB']:.2f} GiB of "
            f"them in memory. A: the angular method's best 4-layer cut, layers [{start}, {end}); B: Wanda 2:4 "
            "from its own files.\n\n" +
            table(["step", "seconds", "peak resident so far (GiB, VmHWM)",
                   *(["peak GPU memory so far (GiB)"] if gpu else [])], rows) + "\n\n" +
            table(["model", "measured", "value"], shown, "llr"))


@renders("offload")
def offload(found: dict) -> str:
    """benchmarks/offload.py: the same work whole and under a memory budget, each in a fresh process."""
    runs, gib = found["runs"], 2**30
    rows = [["read from disk layer by layer", *("yes" if r["offloaded"] else "no" for r in runs.values())],
            ["weights in memory (GiB)", *(f"{r['resident'] / gib:.2f}" for r in runs.values())],
            ["peak resident (GiB, VmHWM: mapped file pages included)", *(f"{r['peak'] / gib:.2f}"
                                                                          for r in runs.values())],
            ["peak anonymous (GiB, RssAnon, read every 2 ms)", *(f"{r['anonymous peak'] / gib:.2f}"
                                                                 for r in runs.values())]]
    steps = list(next(iter(runs.values()))["times"])
    rows += [[f"{step} (s)", *(num(r["times"][step]) for r in runs.values())] for step in steps]
    whole, budget = runs.values()
    saved = whole["peak"] - budget["peak"]
    equal = "equal" if found["scores_equal"] and found["logits_equal"] else "NOT equal"
    return (table(["", *runs], rows, "l" + "r" * len(runs)) +
            f"\n\nThe angular scores and the cut's logits are {equal} (bit for bit); the budget's peak is "
            f"{saved / gib:.2f} GiB lower: {saved / found['weights_bytes']:.2f} × the weights "
            f"({found['weights_bytes'] / gib:.2f} GiB).")


@renders("agent_session")
def agent_session(found: dict) -> str:
    """benchmarks/agent_session.py: an MCP client's calls on the embedded model, each answer and its seconds."""
    best = found["best"]
    scores = ", ".join(f"{label} {num(value)} %" for label, value in found["hellaswag"].items())
    rows = [["analyze_model", num(found["analyze_model"]["seconds"]),
             "the best block of 6: layers {start}–{last}".format(last=found["best_block_of_6"]["end"] - 1,
                                                                 **found["best_block_of_6"])],
            ["best_under_target", num(found["best_under_target"]["seconds"]),
             f"{found['measured']} models measured for {found['target']}; best: {best['label']}, "
             f"{best['weight_bytes'] / 2**20:.1f} MiB, perplexity {num(best['perplexity'], '.2f')}"],
            ["compare_models", num(found["compare_models"]["seconds"]),
             f"hellaswag acc_norm {scores}"]]
    return (f"Tools listed: {', '.join(found['tools'])}; every answer read with json.loads and given as structured "
            "content too.\n\n" + table(["tool", "seconds", "answer"], rows, "lrl"))


@renders("llama_engine_*")
def llama_engine(found: dict, view: str = "timing") -> str:
    """benchmarks/llama_engine.py: ``timing``, the Speed rows' llama.cpp ms/token beside an independent llama.cpp
    process's; ``quality``, perplexity from llama.cpp's logits beside LayerCut's, and Q4_0 against Q4_K_M."""
    if view == "timing":
        rows = [[label, c["gguf_type"], num(c["speed_row_ms"], ".2f"), num(c["independent_ms"], ".2f"),
                 f"{c['difference_pct']:+.1f} %", num(c["bytes_per_token_MiB"]), pct(c["share_of_floor"])]
                for label, c in found["timing"].items()]
        return table(["column", "GGUF", "Speed row (ms/token)", "independent (ms/token)", "difference",
                      "MiB a token", "share of floor"], rows, "llrrrrr")
    rows = [[label, c["gguf_type"], num(c["layercut_ppl"], ".2f"), num(c["llama_cpp_ppl"], ".2f"),
             f"{c['ppl_difference_pct']:+.2f} %", num(c["top1_agreement_pct"], ".1f")]
            for label, c in found["quality"].items()]
    files = [[name, num(f["MiB"]), num(f["ppl"], ".2f"), num(f["top1_agreement_with_original_pct"], ".1f")]
             for name, f in found["int4_files"].items()]
    return (table(["column", "GGUF", "LayerCut ppl", "llama.cpp ppl", "difference",
                   "top-1 agreement with the column in PyTorch (%)"], rows, "llrrrr") +
            "\n\nThe original written in 4 bits two ways, each file's top-1 next tokens against the original in "
            "PyTorch:\n\n" + table(["GGUF", "MiB", "perplexity", "top-1 agreement with the original (%)"], files,
                                    "lrrr"))


@renders("gptq")
def gptq(found: dict) -> str:
    """benchmarks/gptq.py: each quantization rounded to nearest and solved by GPTQ, and the gap GPTQ recovers."""
    columns = found["columns"]

    def accuracy(c: dict) -> str:
        value = c.get("hellaswag_acc_norm")
        return "—" if value is None else f"{value[0]:.1f} ± {value[1]:.1f}"

    rows = [["WikiText-2 test perplexity", *(num(c["wikitext2_ppl"], ".2f") for c in columns.values())],
            ["hellaswag acc_norm", *(accuracy(c) for c in columns.values())],
            ["weight memory, MiB", *(num(c.get("weight_MiB")) for c in columns.values())],
            ["build time (s)", *(num(c.get("build_s")) for c in columns.values())]]
    bases = {"int4": "original", "int8": "original", "sparsegpt50 + int4": "sparsegpt50"}

    def gap(name: str, share: float) -> str:
        lost = columns[f"{name} rtn"]["wikitext2_ppl"] - columns[bases[name]]["wikitext2_ppl"]
        return f"{name} {share:.0f} %" if lost > 0 else f"{name}: round to nearest loses nothing ({lost:+.2f})"

    gaps = "; ".join(gap(name, share) for name, share in found["gap_recovered_pct"].items())
    return (table(["", *columns], rows) + f"\n\nShare of round-to-nearest's perplexity gap that GPTQ closes: {gaps}.")


ARCHITECTURE_FAMILIES = ("depth cut", "attention drop", "MLP drop", "Wanda", "width", "low rank", "int8", "int4",
                         "int4 GPTQ", "GGUF")


@renders("architectures")
def architectures(found: dict) -> str:
    """benchmarks/architectures.py: each type transformers ships, how LayerCut read it, its layers' kinds and what
    each family does with it (✓, or a numbered reason under the table)."""
    reasons: dict[str, int] = {}

    def cell(value: str) -> str:
        if value == "yes":
            return "✓"
        general = re.sub(r"this is \w+\.?$", "this is another class",
                         re.sub(r"model type '[^']+'", "this model type", value)).rstrip(".")
        general = re.sub(r"\d+ % of this model's parameters", "a share of this model's parameters",  # any share
                         re.sub(r"Model \w+ is not supported", "its class is not supported", general))
        return f"✗ {reasons.setdefault(general, len(reasons) + 1)}"

    rows = [[f"`{name}`", row["kind"], row["read"], "; ".join(row["layer_kinds"]),
             "✓" if row["reloads_alike"] else "✗", *(cell(row[f]) for f in ARCHITECTURE_FAMILIES)]
            for name, row in found["architectures"].items()]
    notes = "\n".join(f"{number}. {reason}." for reason, number in reasons.items())
    return (table(["type", "kind", "read from", "layer kinds", "cut reloads alike", *ARCHITECTURE_FAMILIES], rows,
                  "lllll" + "c" * len(ARCHITECTURE_FAMILIES)) + "\n\n" + notes)


@renders("llama_builds")
def llama_builds(found: dict) -> str:
    """benchmarks/llama_builds.py: llama.cpp's portable build against a native one, per GGUF type."""
    rows = []
    for file_type, row in found["types"].items():
        cells = [f"{row[b]['decode_ms']:.2f} / {row[b]['prefill_ms']:.0f}" if "decode_ms" in row[b] else row[b]["died"]
                 for b in ("portable", "native")]
        ratio = row.get("portable_over_native", {})
        rows.append([file_type, *cells, num(ratio.get("decode_ms"), ".2f"), num(ratio.get("prefill_ms"), ".2f")])
    return table(["GGUF", "portable: decode ms/token / prefill ms", "native: decode ms/token / prefill ms",
                  "decode, portable ÷ native", "prefill, portable ÷ native"], rows, "lllrr")


@renders("expert_pruning")
def expert_pruning(found: dict) -> str:
    """benchmarks/expert_pruning.py: each criterion's perplexity at each share of experts removed, the best of each
    share in bold, REAP against frequency and merging at the largest share, and the expert heatmap's seconds."""
    columns = found["columns"]
    shares = list(next(iter(columns.values())))
    best = {share: min(row[share] for row in columns.values()) for share in shares}
    rows = [[label, *(f"**{row[s]:.1f}**" if row[s] == best[s] else f"{row[s]:.1f}" for s in shares)]
            for label, row in columns.items()]
    last = shares[-1]
    reap = columns["REAP"][last]
    against = "; ".join(f"{reap / columns[rival][last]:.2f}× {rival}'s" for rival in columns
                        if rival not in ("REAP", "random"))
    return (f"{found['layers']} layers of {found['experts']} experts, {found['top_k']} a token; the learned MoE's own "
            f"perplexity {found['original_perplexity']:.1f} (WikiText-2 test, {found['ppl_windows']} × "
            f"{found['ppl_seq_len']} tokens). The expert heatmap's pass took {found['analysis_s']:.1f} s; the numbers "
            f"of REAP's first choice ({shares[0]}) {found['feedback_s']:.1f} s, with the original's states on the "
            f"slice (once), the next choice's {found['feedback_again_s']:.1f} s: {found['feedback']}.\n\n"
            + table(["criterion", *(f"perplexity, {s}" for s in shares)], rows)
            + f"\n\nWith {last}: REAP's perplexity is {against}.")
