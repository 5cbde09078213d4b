"""What the page says of the slots: the banner, the edited slot's pending numbers, the notes naming the models a
result measured (and saying when they are out of date), what a slot holds, the buttons that write one, exports,
shared comparisons and builds."""

from __future__ import annotations

from ui.text import human_count

def banner_markdown(session) -> str:
    """The banner above the tabs: one line for each of A and B (what it removes, which one is edited), for this
    visitor only; the page keeps it two lines high, so choosing a cell never moves what is below."""
    if session.loading:
        return f"**Loading {session.loading}…** — its heatmap and cuts appear when it is ready."
    if session.info is None:
        return "**No model yet** — loading…"
    lines = []
    for slot, recipe in zip(("A", "B"), session.cuts):
        mark = " (editing)" if slot == session.editing else ""
        if recipe is None:
            lines.append(f"**{slot}**{mark}: empty — choose *Cut {slot}* and pick a block to compare it too.")
            continue
        removed = session.info.removed_params(recipe)
        how = f" · *{recipe.origin}*" if recipe.origin else ""
        zeros = " (zeros are stored densely and still count)" if recipe.sparsity else ""
        lines.append(f"**{slot}**{mark}: {recipe.describe()} — {human_count(removed)} parameters "
                     f"({100 * removed / session.info.num_params:.1f} %) removed{zeros}{how}")
    return "\n\n".join(lines)


def feedback_pending(session) -> str:
    """What the edited slot's numbers against the original show while they are measured again: none of the old
    ones, which would read as the new cut's."""
    if session.info is None or session.loading or session.cut() is None:
        return ""
    return f'<span class="lc-pending">Measuring {session.editing} against the original…</span>'


def measured_what(session) -> tuple:
    """What a result measures: the model's name and the (A, B) recipes, for :func:`measured_note`."""
    return (session.spec.name if session.spec else "", tuple(session.cuts))


def measured_note(then: tuple, now: tuple) -> str:
    """'Measured on SmolLM2 · Original · A: cut 13–15', or, when the model or a slot changed since, a warning
    that names the change and what the numbers are still for."""
    model, cuts = then
    models = " · ".join(["Original", *(f"{slot}: {recipe.short()}" for slot, recipe in zip("AB", cuts) if recipe)])
    if then == now:
        return f"Measured on **{model}** · {models}"
    if model != now[0]:
        change = f"another model ({now[0] or 'none'}) is loaded"
    else:
        changed = [slot for slot, old, new in zip("AB", cuts, now[1]) if old != new]
        change = f"{' and '.join(changed)} {'has' if len(changed) == 1 else 'have'} changed"
    return (f'<span class="lc-stale">Out of date: {change} since.</span> These results are for {model} · {models}. '
            "Measure again.")


def slot_empty(slot: str) -> str:
    """The range of a slot that holds nothing: no selection, and how to make one."""
    return f"{slot} is empty — drag the range or click a heatmap cell to cut"


def slot_holds(slot: str, recipe) -> str:
    """The range of a slot whose model cuts no whole layers (sparsity, width, low rank, dropped blocks)."""
    return f"{slot} holds {recipe.describe()} — dragging here replaces it"


def _replaces(slot: str, recipe, how: str = "replaces") -> str:
    """' (replaces B: wanda 50%)' when ``slot`` holds ``recipe``; '' when it is empty."""
    return f" ({how} {slot}: {recipe.short()})" if recipe is not None else ""


def build_label(session, stack: bool) -> str:
    """Build's button: 'Build into B (replaces B: weight 80%)', or '(after B: …)' when it adds to B's model."""
    slot = session.editing
    return f"Build into {slot}" + _replaces(slot, session.cut(), "after" if stack else "replaces")


def heal_label(session) -> str:
    """Heal's button: 'Heal A into B (replaces B: weight 80%)'."""
    return f"Heal {session.editing} into {session.other}" + _replaces(session.other, session.cut(session.other))


def patch_label(session) -> str:
    """The patch's button beside the range, short to keep the first screen's height: "Patch the cut → B" (what it
    replaced in B, the status says after)."""
    return f"Patch the cut → {session.other}"


def search_label(session) -> str:
    """The rank search's button: 'Search ranks into A (replaces A: cut 13–15)'."""
    return f"Search ranks into {session.editing}" + _replaces(session.editing, session.cut())


NO_GGUF = "none"  # the export's GGUF type when no .gguf is written


def export_saved(slot: str, archive: str, size: int, mergekit: bool, llama: bool, gguf: str | None = None,
                 llama_refused: str | None = None) -> str:
    """After an export: which slot, the zip's name (never where it lies on the server), what it holds, and why it
    holds no llama.cpp argument for a cut llama.cpp would run wrong."""
    extras = "".join(part for part, held in ((", a mergekit config", mergekit),
                                             (", the llama.cpp `--prune-layers` argument", llama),
                                             (f", `{gguf}` (the model as one GGUF file, also offered alone)", gguf))
                     if held)
    extras += ", and SCALE_OUT.md: how to evaluate it on many GPUs"
    refused = f" No llama.cpp `--prune-layers` argument: {llama_refused}" if llama_refused else ""
    return (f"Saved **{slot}** as `{archive}` ({size / 2**30:.2f} GiB): a Hugging Face checkpoint folder with a "
            f"model card{extras}. Unzip it, and `AutoModelForCausalLM.from_pretrained` loads the folder.{refused}")


EXPORT_TOO_LARGE = ("It is too large to offer for download here: it stays in the *exports* folder of LayerCut's "
                    "cache on this machine.")


SHARE_HELP = (
    "**Save** writes the model's name, what A and B hold and the results shown as a small file. **Open** it here "
    "or on another LayerCut to see the same comparison: its model is loaded (where that server allows it; a gated "
    "model needs your token under *Advanced*), A and B are set as saved and the results show under *Benchmarks*. "
    "No token travels with the file."
)


def _slots_words(recipes: dict) -> str:
    return " · ".join(f"**{slot}**: {recipe.short() if recipe is not None else 'empty'}"
                      for slot, recipe in recipes.items())


def comparison_saved(comparison) -> str:
    return (f"Saved **{comparison.model}** · {_slots_words(comparison.recipes)} · {len(comparison.results)} results. "
            "Open the file here or on another LayerCut to see this comparison again.")


def comparison_opened(comparison) -> str:
    return (f"Opened **{comparison.model}** · {_slots_words(comparison.recipes)} · {len(comparison.results)} results "
            "(under *Benchmarks*).")


def mib(count: float) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 2**30 else f"{count / 2**20:.0f} MiB"


def building_status(recipes: dict, costs: dict, budget: int, on_disk: frozenset = frozenset()) -> str:
    """Before building: what each variant will own ('B will own ≈ 398 MiB of its own weights …'); those in
    ``on_disk`` (too large for memory) are built layer by layer into files of their own."""
    parts = [f"**{slot}** ({recipe.short()}): " + (
        "shares every weight with the original" if not costs[slot] else
        f"will be built layer by layer into files of its own (≈ **{mib(costs[slot])}** on disk: too large to keep in "
        "memory), and read back layer by layer" if slot in on_disk else
        f"will own ≈ **{mib(costs[slot])}** of weights of its own")
        for slot, recipe in recipes.items()]
    return (f"Building… {'; '.join(parts)}. Built variants are kept while they fit in {mib(budget)} of memory; "
            "the least recently used go first.")


BUILT = "Built in"  # how a build's status line begins


def built_status(recipes: dict, owned: dict, seconds: float, on_disk: frozenset = frozenset()) -> str:
    """After building: what each variant owns (or, for those in ``on_disk``, that it is read from its own files),
    and how long the build took."""
    parts = [f"**{slot}** ({recipe.short()}) " + ("is read from its own files layer by layer" if slot in on_disk else
                                                  f"owns {mib(owned[slot])}" if owned[slot] else "shares every weight")
             for slot, recipe in recipes.items()]
    return (f"{BUILT} {seconds:.0f} s: {'; '.join(parts)}. Compare under *Generate*, *Speed & memory* and "
            "*Benchmarks*.")


def model_notes(measurements, field: str) -> str:
    """One line per compared model whose measurements carry a note in ``details[field]`` (zeros, 2:4 kernels)."""
    notes = {m.model: m.details[field] for m in measurements if m.details and m.details.get(field)}
    return "  \n".join(f"**{model}**: {note}" for model, note in notes.items())
