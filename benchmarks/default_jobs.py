"""Every default job of the page, timed twice on the default model, beside the estimate the page shows for it.

    python -m benchmarks.default_jobs              # the page's defaults, cut A as the page opens, B the best 6
    python -m benchmarks.default_jobs --training   # also a short rank search and a short heal (smaller settings)

The backend and the page are built as ``app.py`` builds them, the page opened (its startup: load, analysis,
stability), then each job run through the page's own handler with the values its inputs start with: once right
after launch (cold; a fresh results cache, so nothing is read back) and once more (warm: what a visitor who
presses the button again waits; benchmarks, perplexity and the sweep then come from the results cache). Each line
prints the seconds measured, the page's estimate (``ui.page.estimates``) and estimate / measured. Writes
``benchmarks/results/default_jobs.json`` (``--training``: ``default_jobs_training.json``).
"""

from __future__ import annotations

import os

from benchmarks import harness
from benchmarks.record import write_result

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def quiet_progress(*_args, **_kwargs) -> None:
    return None


def run_all(outputs) -> object:
    """A handler's last output (a streaming handler is run to its end)."""
    if isinstance(outputs, dict):
        return outputs
    last = None
    for last in outputs:
        pass
    return last


def jobs(page, handlers, training: bool) -> list[tuple[str, object, object]]:
    """(name, run(session), seconds estimate(session)) for each default job, with the page's starting values."""
    from evaluation.sweeps.search_splits import WIKITEXT

    gen, cut = page.generate, page.cut
    search = cut.search
    seconds = handlers.estimates.seconds
    values = {line.job: [setting.value for setting in line.settings] for line in handlers.estimates.lines}
    run = dict(progress=quiet_progress)

    def generate(session):
        answers = run_all(handlers.generate.generate(session, *values["generation"], gen.temperature.value,
                                                     gen.top_p.value, gen.seed.value, **run))[gen.answers]
        return handlers.generate.divergence(session, *values["generation"], answers, **run)

    found = [
        ("speed", lambda s: handlers.speed.speed(s, *values["speed"], **run)),
        ("memory", lambda s: handlers.speed.memory(s, **run)),
        ("benchmarks", lambda s: handlers.benchmarks.benchmarks(s, *values["benchmarks"], **run)),
        ("perplexity", lambda s: handlers.benchmarks.perplexity(s, *values["perplexity"], **run)),
        ("sweep", lambda s: run_all(handlers.benchmarks.sweep(s, *values["sweep"], **run))),
        ("sparsity", lambda s: run_all(handlers.benchmarks.sparsity_sweep(s, *values["sparsity"], **run))),
        ("generation", generate),
        ("stability", lambda s: handlers.cut.stability(s, cut.block_size.value, *values["stability"], **run)),
    ]
    if training:  # far from their defaults (tens of minutes here): small runs to check the estimates
        short_search = ["feature", WIKITEXT, 10, 1, "o_proj"]
        found += [("rank_search (1 layer, o_proj, 10 windows)",
                   lambda s: run_all(handlers.search.rank_search(s, *short_search[:2], search.tolerance.value,
                                                                 *short_search[2:], "default", "", None, 32, 128,
                                                                 **run))),
                  ("healing (lora, 3 steps)", lambda s: run_all(handlers.heal.heal(s, "lora", 3, 0, **run)))]
        values["rank_search (1 layer, o_proj, 10 windows)"] = short_search
        values["healing (lora, 3 steps)"] = ["lora", 3, 0]
    job_of = {"rank_search (1 layer, o_proj, 10 windows)": "rank_search", "healing (lora, 3 steps)": "healing"}
    return [(name, call, lambda s, name=name: getattr(seconds, job_of.get(name, name))(s, *values[name]))
            for name, call in found]


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--training", action="store_true", help="also a short rank search and a short heal")
    args = parser.parse_args()
    harness.in_fresh_cache(lambda: run(args))


def run(args) -> None:
    import torch

    from evaluation.serving.backend import Backend
    from prune.core.recipe import Recipe
    from ui.page import build_page
    from ui.session import Session

    backend = Backend()
    page = build_page(backend)
    handlers = page.handlers
    with harness.Clock() as clock:
        session = run_all(handlers.pick.startup(Session(), page.header.method.value, progress=quiet_progress))[
            page.view.session]
    opened = clock.wall
    print(f"page opened (load, analysis, stability) in {opened:.1f} s; torch threads "
          f"{torch.get_num_threads()}; rates {backend.models.rates(session.spec)}; {session.result.method} "
          f"{session.result.timing()}")
    start, end = session.result.best_block(6)
    session = session.with_cut(Recipe.block(session.info.num_layers, start, end, origin="benchmark"), "B")
    print("compared: " + ", ".join(f"{label} {recipe.short()}" for label, recipe in session.variants().items()))
    print(f"{'job':<44}{'cold s':>9}{'warm s':>9}{'estimate s':>12}{'est/cold':>10}{'est/warm':>10}  (warm: "
          "benchmarks, perplexity and the sweeps read back from the results cache)")
    todo = jobs(page, handlers, args.training)
    timed = {name: [] for name, _call, _estimate in todo}
    for _round in range(2):
        for name, call, _estimate in todo:
            with harness.Clock() as clock:
                call(session)
            timed[name].append(clock.wall)
    found = {}
    for name, _call, estimate in todo:
        cold, warm = timed[name]
        guess = estimate(session)
        ratios = "".join(f"{guess / t:>10.2f}" if guess is not None and t > 0 else f"{'—':>10}" for t in (cold, warm))
        print(f"{name:<44}{cold:>9.1f}{warm:>9.1f}{'—' if guess is None else f'{guess:.1f}':>12}{ratios}")
        found[name] = {"cold_s": round(cold, 2), "warm_s": round(warm, 2), "estimate_s": guess}
    figures = {"page_open_s": round(opened, 1), "threads": torch.get_num_threads(), "jobs": found,
               "compared": {label: recipe.short() for label, recipe in session.variants().items()}}
    write_result("default_jobs_training" if args.training else "default_jobs", figures, model=session.info.name,
                 how="each default job through the page's own handler with its starting values, once after launch "
                     "(cold, a fresh results cache) and once more (warm); estimate: ui.page.estimates")


if __name__ == "__main__":
    main()
