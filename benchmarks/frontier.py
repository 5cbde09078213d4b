"""The default model's frontier: every family at 90 / 80 / 70 % of the bytes as stored, its table and its figure.

    .venv/bin/python -m benchmarks.frontier                     # measure (each point cached)
    .venv/bin/python -m benchmarks.frontier --sizes 50,30,20 --name frontier_compound   # with compounds
    .venv/bin/python -m benchmarks.frontier --sizes 50,30,20 --repair kd 120 --name frontier_kd120
    .venv/bin/python -m benchmarks.frontier --from results/frontier_params.json --png assets/frontier.png
    .venv/bin/python -m benchmarks.frontier --from results/frontier_params.json \
        --also results/frontier_mib.json --retime --png assets/frontier.png

Measures as ``python -m evaluation.cli --frontier --task hellaswag --limit 200`` does (WikiText-2 test perplexity
over 16 × 512 tokens, hellaswag's first 200, decode at batch 1 timed in turns with the original), or reads what that
command wrote; prints the table, the seconds the points took to build and to measure, and draws the figure into a
PNG through Debian's Chromium (plotly's own JavaScript, offline).

``--retime`` times every point again, all in one run and taking turns run by run (5 runs each), so that the
machine's load falls on every model alike: the frontier times each point in turns with the original only, when it
is measured, and a busy machine moves those times between points. ``--also`` adds the points of another axis's
run (sparsity and 2:4 from ``--axis params``, int8 and int4 from a run by bytes; an older ``frontier_mib.json``
reads as one by bytes) to the figure and the re-timing. ``--sizes``, ``--families`` and ``--repair`` as the CLI's.
Writes ``benchmarks/results/<--name>.json`` (default ``frontier.json``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import prune
from benchmarks import harness
from benchmarks.record import write_result
from evaluation.frontier import compound
from evaluation.frontier.plan import DEFAULT_AXIS, DEFAULT_SIZES, FAMILIES, check_sizes
from evaluation.frontier.result import FrontierResult, format_table
from evaluation.quality import lm_eval_adapter
from evaluation.serving.backend import Backend
from evaluation.core.pool import ModelSpec
from evaluation.frontier.run import SPEED
from evaluation.measure import speed
from evaluation.core.jobs import final
from ui.frontier_plots import frontier_figure


def measured(args) -> FrontierResult:
    if args.source:
        return FrontierResult.from_json(json.loads(Path(args.source).read_text())["frontier"])
    backend = Backend()
    request = lm_eval_adapter.check_request([args.task], limit=args.limit, data_dir=backend.models.data_dir)
    families = tuple(f.strip() for f in args.families.split(";")) if args.families else FAMILIES
    repair = compound.check_repair(args.repair[0], float(args.repair[1])) if args.repair else None
    return final(backend.frontier.run(ModelSpec(prune.DEFAULT_MODEL), request, axis=args.axis,
                                      sizes=check_sizes(args.sizes) if args.sizes else DEFAULT_SIZES,
                                      families=families, repair=repair,
                                      progress=lambda f, m: print(f"[{100 * f:5.1f}%] {m}", file=sys.stderr,
                                                                  flush=True)))


def retimed(result: FrontierResult) -> FrontierResult:
    """Every point's decode latency measured again in one run, the models taking turns (see the module docstring)."""
    model, tokenizer = prune.load_model()
    models = {"original": model}
    for point in result.points:
        print(f"building {point.recipe.short()}…", file=sys.stderr, flush=True)
        models[point.recipe.key] = point.recipe.apply(model, tokenizer)
    found = speed.measure_speed(models, batch_sizes=(1,), prompt_len=SPEED["prompt_len"],
                                new_tokens=SPEED["new_tokens"], repeats=5, job=None)
    decode = {m.model: m for m in found if m.name.startswith(speed.DECODE)}

    def again(point, key: str):
        return replace(point, ms=decode[key].value, dense_ms=decode["original"].value,
                       floor_ms=decode[key].details.get("floor_ms", point.floor_ms))

    return replace(result, dense=again(result.dense, "original"),
                   points=tuple(again(p, p.recipe.key) for p in result.points))


def merged(result: FrontierResult, other: FrontierResult) -> FrontierResult:
    """``result`` with ``other``'s points that it lacks (on ``result``'s axis: int8 and int4 keep every parameter)."""
    known = {p.recipe.key for p in result.points}
    return replace(result, points=result.points + tuple(p for p in other.points if p.recipe.key not in known))


def draw(result: FrontierResult, png: Path) -> None:
    from playwright.sync_api import sync_playwright

    figure = frontier_figure(result).update_layout(width=1400, height=560)
    with tempfile.TemporaryDirectory() as folder:
        html = Path(folder) / "frontier.html"
        figure.write_html(html, include_plotlyjs=True, full_html=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1420, "height": 580})
            page.goto(html.as_uri())
            page.wait_for_selector(".scatterlayer")
            page.locator(".plot-container").screenshot(path=str(png))
            browser.close()


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--from", dest="source", default=None, help="a frontier_<axis>.json the CLI wrote")
    parser.add_argument("--axis", default=DEFAULT_AXIS)
    parser.add_argument("--task", default="hellaswag")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--png", default=None, help="draw the figure into this PNG")
    parser.add_argument("--also", default=None, help="another frontier_<axis>.json whose extra points join")
    parser.add_argument("--retime", action="store_true", help="time every point again, all taking turns")
    parser.add_argument("--sizes", default=None, help="fractions of the original, e.g. '50,30,20' (default 90/80/70)")
    parser.add_argument("--families", default=None, help="the families tried, ';'-separated (default: all)")
    parser.add_argument("--repair", nargs=2, default=None, metavar=("KIND", "SECONDS"), help="kd|lora and seconds")
    parser.add_argument("--name", default="frontier", help="the results file's name (default frontier)")
    args = parser.parse_args()
    with harness.Clock() as clock:
        result = measured(args)
    if args.also:
        result = merged(result, FrontierResult.from_json(json.loads(Path(args.also).read_text())["frontier"]))
    if args.retime:
        result = retimed(result)
    print(format_table(result))
    build = sum(p.build_s for p in result.everything())
    measure = sum(p.measure_s for p in result.everything())
    print(f"\n{len(result.points)} points beside the original: building {build:.0f} s, measuring {measure:.0f} s "
          f"(analyses and loading not included); {clock.wall:.0f} s in all.")
    write_result(args.name, {"frontier": result.to_json(), "build_s": round(build, 1), "measure_s": round(measure, 1),
                             "wall_s": round(clock.wall, 1), "read_from": [args.source, args.also],
                             "retimed": args.retime, "repair": args.repair},
                 model=prune.DEFAULT_MODEL, how=f"as the CLI's --frontier: WikiText-2 test perplexity over 16 × 512 "
                 f"tokens, {args.task}'s first {args.limit}, decode at batch 1 timed in turns with the original"
                 + ("; every point timed again in one run, taking turns (5 runs each)" if args.retime else ""))
    if args.png:
        draw(result, Path(args.png))
        print(f"Figure: {args.png}")


if __name__ == "__main__":
    main()
