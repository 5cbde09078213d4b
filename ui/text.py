"""Words for what the page shows: a model, an analysis, a cut's numbers, generation, a search and the frontier."""

from __future__ import annotations

import html
import math

from prune.core.architectures import CAUSAL, KIND_WORDS, MASKED, SEQ2SEQ

from ui.help_text import STABILITY_BUTTON

def human_count(count: float) -> str:
    """134515008 → '134.5 M'."""
    count = float(count)
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= size:
            return f"{count / size:.1f} {suffix}"
    return f"{count:.0f}"


def model_markdown(info, step_s: float | None = None) -> str:
    """The model's line in the top bar; for a model read layer by layer, where its weights are and, with ``step_s``
    (one decode step's seconds, measured when it loaded), what a pass that brings them in costs."""
    held, total, cpu = (amount / 2**30 for amount in (info.resident_bytes, info.weight_bytes, info.cpu_held_bytes))
    cost = f"; one decode step, which brings them all, took {step_s:.2f} s here" if step_s is not None else ""
    streamed = ""
    if info.resident_bytes < info.weight_bytes and not info.cpu_held_bytes:
        streamed = (f" · read from disk layer by layer ({held:.2f} of {total:.2f} GiB in memory; each pass reads the "
                    f"other {total - held:.2f} GiB from its files{cost})")
    elif info.resident_bytes < info.weight_bytes:
        files = total - held - cpu
        sources = f"{cpu:.2f} GiB from CPU memory" + (f" and {files:.2f} GiB from its files" if files >= 0.005 else "")
        streamed = (f" · moved to {info.device} layer by layer ({held:.2f} of {total:.2f} GiB there; each pass brings "
                    f"the other {sources}{cost})")
    encoder = {CAUSAL: "", MASKED: " · an encoder (masked LM): it answers cloze tasks and can be sparsified and cut; "
                                   "it generates nothing here and has no perplexity",
               SEQ2SEQ: " · an encoder-decoder: it answers cloze tasks; its layers, the encoder's then the decoder's, "
                        "can be cut and sparsified; it generates nothing here and has no perplexity"}[info.kind]
    refused = (f"  \n*Not for this model:* {', '.join(info.refusals)} (a build says why in one line)"
               if info.refusals else "")
    return (f"**{info.name}** · {info.num_layers} layers · {human_count(info.num_params)} parameters · "
            f"{info.device} · {str(info.dtype).replace('torch.', '')}{streamed}{encoder}{refused}")


def no_feedback(info) -> str:
    """The feedback line's words for a cut of a model that predicts no next token."""
    return (f"No next-token feedback: {info.name} is {KIND_WORDS[info.kind]}. Compare this cut on the cloze tasks "
            "(**Benchmarks**).")


def not_generating(info) -> str:
    """The Generate tab's words for a model that generates nothing here."""
    return (f"**{info.name} is {KIND_WORDS[info.kind]}: it generates nothing here.** It fills blanks: ask it the "
            "cloze tasks (cbt_style_cn, cbt_style_ne, cbt_style_p) on the **Benchmarks** tab, and compare it cut or "
            "sparsified (angular distance, Block Influence and relative magnitude, the sparsity methods, and the "
            "sparsity sweep, in the method picker).")


def server_memory_markdown(found, turns: str = "") -> str:
    """The server's resident memory beside what the variant cache holds (``evaluation.serving.variants.ServerMemory``),
    and, once models have taken turns on the device, which are on it and what the last swap cost (``turns``)."""
    return (f"Server memory: {found.rss_bytes / 2**30:.2f} GiB resident · compressed models cached "
            f"{found.held_bytes / 2**30:.2f} of {found.budget_bytes / 2**30:.2f} GiB"
            + (f" · {turns}" if turns else ""))


def column_label(label: str, variants: dict) -> str:
    """A generation column's title: 'Original model' or 'A: cut 13–17'."""
    if label == "original":
        return "Original model"
    recipe = variants.get(label)
    return f"{label}: {recipe.short()}" if recipe else f"{label}: no cut"


def model_names(variants: dict) -> dict[str, str]:
    """Each compared model's name in a chart's legend, the same as its generation column's: {"original": "Original
    model", "A": "A: cut 13–17", …}."""
    return {label: column_label(label, variants) for label in ("original", *variants)}


DIVERGED_MARK = "▶"  # where a compressed answer leaves the original's: a sign beside the colour, never colour alone


def divergence_html(label: str, variants: dict, parts: tuple[str, str], first: int) -> str:
    """A compressed model's answer under its column's title, its text from where it leaves the original's
    highlighted and marked ▶, and a one-line legend (the page styles ``mark.lc-left``)."""
    title = html.escape(column_label(label, variants))
    before, after = (html.escape(part) for part in parts)
    words = f"{label}'s answer from token {first} on, where it leaves the original's"
    return (f'<span class="lc-title">{title}</span>\n'
            f'<div class="lc-answer">{before}<mark class="lc-left" title="{words}">{DIVERGED_MARK}\u2009{after}</mark>'
            f'</div>\n<p class="lc-legend"><mark class="lc-left">{DIVERGED_MARK} highlighted</mark> = {words}</p>')


def calibration_words(cal) -> str:
    """'WikiText-2 validation, 32 × 128 tokens' for recipe origins and the analysis line."""
    names = {"builtin": "the built-in text", "text": "your text", "file": "a text file", "wikitext2":
             "WikiText-2 validation", "hub": f"hub dataset {cal.dataset}"}
    return f"{names.get(cal.source, cal.source)}, {cal.n_samples} × {cal.seq_len} tokens"


def analysis_status(result) -> str:
    from prune import METHODS

    spec = METHODS.get(result.method)
    notes = "".join(f" {note}" for note in result.warnings)
    return f"{f'**{spec.label}**' if spec else result.method}: {result.timing()}.{notes}"


def named_cuts_label(result) -> dict:
    """The preset radio's label for an analysis with named cuts: the method that named them."""
    from prune import METHODS

    if result is None or not result.cuts:
        return {}
    spec = METHODS.get(result.method)
    return {"label": f"Cuts named by {spec.label if spec else result.method}"}


def stability_markdown(found) -> str:
    """'Best block of 5: [13, 18) wins 17 of 20 resamples (85 %); …' with the other winners' shares."""
    from prune import METHODS

    head = f"**{METHODS[found.method].label}, best block of {found.block_size}**: {found.summary()}"
    if found.resamples == 0:
        return head
    shares = ", ".join(f"[{a}, {b}) {100 * share:.0f} %" for (a, b), share in list(found.fractions.items())[:5])
    return f"{head}  \nWinners over {found.resamples} bootstrap resamples of {found.windows} windows: {shares}"


def stability_pending(block_size) -> str:
    """What replaces a stability line measured for another N: how to measure this one."""
    return f"N is now **{block_size}**: press *{STABILITY_BUTTON}* to measure its stability."


def sweep_summary(report) -> str:
    best, worst = report.sweep.best_start(), report.sweep.worst_start()
    k = report.sweep.block_size
    text = (f"Best cut measured: **[{best}, {best + k})**; worst: **[{worst}, {worst + k})** "
            f"({report.sweep.primary_metric}, {report.sweep.limit or 'all'} questions).")
    if report.failed:
        text += " Failed: " + "; ".join(f"{m} ({why})" for m, why in report.failed.items())
    return text


def generation_stats(side: dict | None) -> str:
    """'TTFT 0.12 s · 41.3 tokens/s' under each generated text."""
    if not side:
        return ""
    parts = []
    if _number(side.get("ttft_s")):
        parts.append(f"time to first token **{side['ttft_s']:.2f} s**")
    if _number(side.get("tokens_per_s")):
        parts.append(f"**{side['tokens_per_s']:.1f}** tokens/s")
    if side.get("waiting"):
        parts.append("waits its turn: the models do not fit on the device together")
    elif not side.get("done"):
        parts.append("generating…")
    return " · ".join(parts)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def options_text(options: dict) -> str:
    """A method's options as editable text: ``token=last, max_samples=4``."""
    return ", ".join(f"{name}={value}" for name, value in options.items())


def search_progress(points, metric: str) -> str:
    """While searching: the latest projection's rank and where the scores stand."""
    original, last = points[0], points[-1]
    if len(points) == 1:
        return f"Original: {metric} {original.search:.4g} on the search split, {original.test:.4g} on the test split."
    rank = "stays dense" if last.rank is None else f"rank {last.rank}"
    return (f"Layer {last.layer} {last.path.rpartition('.')[2]}: {rank} · {100 * last.params / original.params:.2f} % "
            f"of the parameters · search split {last.search:.4g} (original {original.search:.4g})")


def search_summary(result, metric: str, slot: str | None) -> str:
    """After the search: parameters and both splits' scores, and where the model went."""
    kept = 100 * result.params[1] / result.params[0]
    where = (f" It is now **{slot}** (*{len(result.ranks)} projections factored*): compare it under *Generate*, "
             "*Speed & memory* and *Benchmarks*." if slot else
             " No projection could be lowered within the tolerance: the slots are unchanged.")
    return (f"**Searched: {kept:.2f} % of the parameters** ({result.params[1]:,} of {result.params[0]:,}). "
            f"{metric}: search split {result.search[0]:.4g} → {result.search[1]:.4g}, held-out test split "
            f"{result.test[0]:.4g} → **{result.test[1]:.4g}**.{where}")


def divergence_markdown(report) -> str:
    """'**A** agrees on 87 % of next tokens (mean KL 0.31 nats) and leaves the original's answer at token 5 ('the').'"""
    lines = []
    for label, column in report.columns.items():
        where = ("and follows the original's answer to the end" if column.first is None else
                 f"and leaves the original's answer at token {column.first}" +
                 (f" (the original said {report.answer_tokens[column.first]!r})"
                  if column.first < len(report.answer_tokens) else " (it goes on)"))
        lines.append(f"**{label}** {column.caption()} (drift {column.mean_kl:.3f}: the mean KL in nats per token, "
                     f"fed the original's {len(report.answer_ids)}-token greedy answer) {where}.")
    return "  \n".join(lines)


def frontier_progress(result) -> str:
    """While the frontier runs: points measured and to go; then its front."""
    done = len(result.points)
    out = f"; {len(result.screened)} screened out (see the notes under the table)" if result.screened else ""
    if not result.complete:
        return f"Measuring in full… {done} of {done + result.pending} models so far (the original first){out}."
    front = ", ".join(p.label for p in result.front())
    return f"Measured {done} models in full beside the original{out}. On the Pareto front: {front}."
