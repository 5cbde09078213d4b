"""The rows the repair benchmarks share (``heal.py``, ``recovery.py``): WikiText-2 test perplexity, the share of the
cut's perplexity gap won back, hellaswag acc_norm, through the app's Backend; and the markdown table they print."""

from __future__ import annotations

from benchmarks.harness import pairs


def quality_rows(backend, spec, variants: dict, repaired, ppl_windows: int, hellaswag: int) -> dict:
    """Rows by name → {column: text} for ``variants`` (name → recipe, the plain cut named "cut"); the gap won back
    for each of ``repaired``."""
    from evaluation.measure.measurement import ORIGINAL
    from evaluation.quality import lm_eval_adapter

    compared = pairs(variants)
    ppl = {m.model: m.value for pair in compared
           for m in backend.measure.perplexity(spec, pair, seq_lens=(128,), bos=(False,), max_windows=ppl_windows)}
    gap = ppl["cut"] - ppl[ORIGINAL]
    rows = {f"WikiText-2 test ppl ({ppl_windows} × 128)": {k: f"{v:.2f}" for k, v in ppl.items()},
            "gap to the original won back": {k: f"{100 * (ppl['cut'] - ppl[k]) / gap:.0f} %" for k in repaired}}
    if hellaswag:
        request = lm_eval_adapter.check_request(["hellaswag"], limit=hellaswag, data_dir=backend.models.data_dir)
        found = [m for pair in compared for m in backend.measure.benchmarks(spec, pair, request, batch_size=16)]
        acc = {m.model: m for m in found if m.name == "hellaswag acc_norm"}
        rows[f"hellaswag acc_norm ({hellaswag})"] = {k: f"{m.value:.1f} ± {m.spread:.1f}" for k, m in acc.items()}
    return rows


def print_table(rows: dict, columns: list, labels: dict | None = None, missing: str = "—") -> None:
    """``rows`` (name → {column: text}) as a Markdown table of ``columns``, headed by their ``labels``."""
    print()
    print("| | " + " | ".join((labels or {}).get(c, c) for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row.get(c, missing) for c in columns) + " |")
