"""Words about running jobs: how long one will take before it starts, and which differences are noise."""

from __future__ import annotations

import math

from evaluation.serving import comparison_rows, noise_band, noise_words, PERCENT_METRICS

ESTIMATE = "Estimate: "  # how an estimate line begins
NO_ESTIMATE = ""  # before a model is loaded, or while a setting is not a valid value


def estimate_line(seconds: float | None, *, at_most: bool = False) -> str:
    """'Estimate: ≈ 12 s on this machine' beside a job's button; 'at most' for jobs that can end sooner (words,
    not an emoji: a projector's machine may have no emoji font)."""
    if seconds is None or not math.isfinite(seconds):
        return NO_ESTIMATE
    if seconds < 1:
        words = "under a second"
    elif seconds < 90:
        words = f"≈ {seconds:.0f} s"
    elif seconds < 90 * 60:
        words = f"≈ {seconds / 60:.0f} min"
    else:
        words = f"≈ {seconds / 3600:.1f} h"
    return f"{ESTIMATE}{'at most ' if at_most else ''}{words} on this machine"


SWEEP_OTHERS_COST = "; plus a first analysis of each other method, a minute or more each"
CACHED = " (at once if measured before: results are kept)"
JUDGE_NOT_COUNTED = "; the judge not counted (its speed here is not known before it loads)"


def beyond_ideal_note(measurements) -> str:
    """One line per compressed model whose measured speedup beats its ideal, and what that means."""
    lines = []
    for row in comparison_rows(list(measurements)):
        if row.group == "speed" and row.speedup and row.ideal_speedup and row.speedup > row.ideal_speedup:
            bound = "bytes it reads" if row.pruned.details.get("ideal_by") == "bytes" else "compute it does"
            lines.append(f"**{row.variant}**, {row.name}: measured {row.speedup:.2f}× faster, more than the "
                         f"{row.ideal_speedup:.2f}× the {bound} allows: the original ran further from its own limit "
                         "(see the share of the limit reached), or the machine's other work and timer jitter moved "
                         "the figures.")
    return "  \n".join(lines)


def versus_original(sweep) -> str:
    """The best cut of a finished sweep against the uncut model, with the noise of the difference."""
    metric, best = sweep.primary_metric, sweep.best_start()
    value, base = sweep.metrics[metric][sweep.starts.index(best)], sweep.baseline[metric]
    higher = sweep.higher_is_better.get(metric, True)
    scale, unit = (100, " points") if metric in PERCENT_METRICS else (1, "")
    gap = scale * (value - base if higher else base - value)  # > 0: the cut scores better
    where = "above" if gap > 0 else "below"
    text = (f"It scores {abs(gap):.1f}{unit} {where} the uncut model ({scale * value:.3g} against "
            f"{scale * base:.3g})")
    band = noise_band(sweep.stderr(base), sweep.stderr(value))
    if band is None:
        return text + "."
    noise = noise_words(gap, scale * band)
    if gap > 0 and abs(gap) <= scale * band:
        return f"{text}: {noise} with {sweep.documents} questions, so removing these layers does not really help."
    return f"{text}: {noise} with {sweep.documents} questions."


def sweep_progress(sweep) -> str:
    """While a sweep runs: how many cuts are measured, and the uncut model's score."""
    metric = sweep.primary_metric
    total = sweep.num_layers - sweep.block_size + 1
    return (f"Measuring… {len(sweep.starts)} of {total} cuts so far; the uncut model scores "
            f"{sweep.baseline[metric]:.3g} ({metric}).")
