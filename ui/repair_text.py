"""The words of a repair as it runs and when it is done: healing's loss and steps, the linear patch's fit."""

from __future__ import annotations

def heal_objective(options: dict) -> str:
    """What a heal's training loss is, for its curve."""
    from prune.healing.distill import NAMES

    if "teacher" not in options:
        return "next-token loss"
    ratio = options["kd_ratio"]
    share = "" if ratio == 1 else f" × {ratio:g} + next-token loss × {1 - ratio:g}"
    return f"{NAMES[options['teacher']]} to the original{share}"


def patch_started(step, source: str, target: str) -> str:
    return f"Patching {source}'s cut into {target}: {step.describe()}…"


def patch_refused(source: str, err: Exception) -> str:
    """The status line when the patch could not be made: why, in one line (the other slot is left as it was)."""
    return f"**{source}'s cut was not patched:** {err}"


def patch_line(record: dict, found, source: str, target: str) -> str:
    """The status line after the one-click patch, its numbers first (the line is cut at the screen's edge; the
    Benchmarks tab's table holds them all)."""
    values = " · ".join(f"{m.model} {m.value:.1f}" for m in found)
    fits = ", ".join(f"{b['error']:.2f} (plain cut {b['unpatched_error']:.2f})" for b in record.get("blocks", []))
    return (f"**{target} = {source} patched** · test ppl {values} · {record.get('seconds', 0):.0f} s, fit error "
            f"{fits}")


def patch_done(record: dict, source: str, target: str, replaced=None) -> str:
    """After a patch: where, how well each block's map fits against the plain cut, how long it took."""
    was = f" It replaced {target}'s {replaced.short()}." if replaced is not None else ""
    fits = "; ".join(f"block [{b['block'][0]}, {b['block'][1]}) → layer {b['block'][0] - 1}'s down projection, fit "
                     f"error {b['error']:.3f} (plain cut {b['unpatched_error']:.3f})" for b in record.get("blocks", []))
    return (f"**{target} is now {source} patched** ({record.get('method')}, {record.get('seconds', 0):.1f} s, no "
            f"gradient step on the model): {fits}.{was}")


def heal_progress(points, source: str, target: str) -> str:
    last = points[-1]
    held = next((p.heldout for p in reversed(points) if p.heldout is not None), None)
    where = f"held-out {held:.3f} (before: {points[0].heldout:.3f})" if held is not None else ""
    return (f"Healing {source} into {target}: step {last.step} of {last.steps} · training loss {last.train:.3f} · "
            f"{where}")


def heal_done(record: dict, source: str, target: str, replaced=None) -> str:
    budget = " (stopped by the time budget)" if record.get("stopped_by_budget") else ""
    was = f" It replaced {target}'s {replaced.short()}." if replaced is not None else ""
    return (f"**{target} is now {source} healed**: {record.get('steps_done', record.get('steps'))} steps{budget}.{was} "
            f"Compare the three columns under *Generate*, *Speed & memory* and *Benchmarks*.")


def heal_perplexity(found, windows: int, seq_len: int) -> str:
    values = " · ".join(f"{m.model} **{m.value:.2f}**" for m in found)
    return f"WikiText-2 *test* perplexity (never trained on; {windows} windows of {seq_len} tokens): {values}."
