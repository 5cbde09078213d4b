"""The "Analyze & cut" tab's events: which slot is edited, the cut by range, heatmap cell, preset or name, the
best block's stability, the numbers beside the range, and the export."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

from evaluation.serving import Cancelled
from prune.core.architectures import CAUSAL
from prune.core.errors import InvalidInput, quoted
from prune.core.recipe import Recipe
from prune.depth.selection import LAYERS, check_remove, check_selection, chosen_recipe
from prune.core.surgery import largest_cut

from ui import inputs, slot_text, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.page.durations import Durations
from ui.page import first_screen
from ui.page.events import gpu
from ui.range_control import parse_range
from ui.session import SLOTS, Session
from ui.slot_text import NO_GGUF


class CutHandlers:
    """Each event that changes the edited slot's cut shows the view of the new session."""

    def __init__(self, context: Context, page):
        self.context, self.view, self.export_box, self.slot_targets = context, page.view, page.cut.export, page.targets
        self.feedback_job = gpu(self.feedback, Durations.explain)  # a device job (ZeroGPU: in the GPU worker)

    @user_errors
    def edit_slot(self, session: Session, slot: str):
        """Choose which compressed model (A or B) the range, the heatmap and the presets edit."""
        if slot not in SLOTS:
            raise InvalidInput(f"Choose one of {', '.join(SLOTS)}.")
        return self.view.show(replace(session, editing=slot))

    @user_errors
    def targets(self, session: Session, stack: bool = False):
        """Build, Heal and the rank search name the slot they will write and what it holds now."""
        return self.slot_targets.show(session, bool(stack))

    @staticmethod
    def status_after_change(session: Session, status: str):
        """A build's "Built … B (…) owns …" line gives way to the analysis's once a slot changes another way: it
        would describe a B that is no longer there."""
        if not (status or "").startswith(slot_text.BUILT):
            return gr.update()
        return text.analysis_status(session.result) if session.result else ""

    @user_errors
    def clear_slot(self, session: Session):
        """Compare one compressed model fewer: the edited slot goes empty."""
        return self.view.show(session.with_cut(None))

    @user_errors
    def set_cut(self, session: Session, value):
        """Cut the block ``value = [start, end]`` (end exclusive) in the edited slot."""
        info = need_model(session)
        start, end = parse_range(value, info.num_layers)
        return self.view.show(session.with_block(start, end, "chosen by hand"))

    @user_errors
    def select_cell(self, session: Session, evt: gr.EventData):
        """A heatmap click at (start, block size) selects that block."""
        info = need_model(session)
        try:
            start, size = int(evt.x), int(evt.y)
        except (AttributeError, TypeError, ValueError):
            raise InvalidInput("Click a cell of the heatmap to select its block.") from None
        start, end = parse_range([start, start + size], info.num_layers)
        return self.view.show(session.with_block(start, end, f"{session.origin}: heatmap cell"))

    @user_errors
    def best_block(self, session: Session, size, selection: str = "paper", remove: str = LAYERS):
        """The N layers the analysis picks (as its paper does, or the best contiguous block) in the edited slot;
        with ``remove`` = "attention" / "mlp", its N most removable such blocks."""
        need_model(session)
        if session.result is None:
            raise InvalidInput("Analyze first: the choice comes from the importance scores.")
        remove = check_remove(remove, session.result.method)
        size = inputs.whole_number(size, "The number of layers", minimum=1,
                                   maximum=largest_cut(session.info.num_layers))
        return self.view.show(session.with_cut(chosen_recipe(session.result, size, check_selection(selection),
                                                             session.origin, remove=remove)))

    @user_errors
    def named_cut(self, session: Session, name: str):
        """A named cut of the analysis (e.g. persistence "10%"), contiguous or not."""
        need_model(session)
        if session.result is None or name not in (session.result.cuts or {}):
            raise InvalidInput(f"No cut named {quoted(name)} in this analysis.")
        recipe = Recipe.cut(session.info.num_layers, session.result.cuts[name], origin=f"{session.origin}: {name} cut")
        if 2 * len(recipe.depth_cut.layers) > session.info.num_layers:
            gr.Warning(f"The {name} cut removes more than half of the layers "
                       f"({len(recipe.depth_cut.layers)} of {session.info.num_layers}).")
        return self.view.show(session.with_cut(recipe))

    @user_errors
    def stability(self, session: Session, block_size, resamples, request: gr.Request = None, progress=gr.Progress()):
        """How often the analysis's best block of N wins over bootstrap resamples of the calibration windows."""
        info = need_model(session)
        if session.result is None:
            raise InvalidInput("Analyze first: stability re-scores the analysis on resampled calibration windows.")
        size = inputs.whole_number(block_size, "The block size", minimum=1, maximum=largest_cut(info.num_layers))
        found = self.context.backend.analysis.stability(
            session.spec, session.result.method, size, calibration=session.calibration,
            resamples=inputs.whole_number(resamples, "Resamples", minimum=2, maximum=200),
            progress=reporter(progress), owner=owner(request), **dict(session.options))
        return text.stability_markdown(found)

    @staticmethod
    def stability_pending(block_size) -> str:
        """A new N: the stability shown was for another block size, so it gives way to how to measure this one."""
        return text.stability_pending(block_size)

    @user_errors
    def shown_feedback(self, session: Session, request: gr.Request = None):
        """The edited slot's numbers: the first screen's as computed at start-up (no device job; waited for while it
        is), else measured."""
        first_screen.awaited(self.context, "measured")
        first = self.context.first_screen
        found = first.feedback_for(session) if first is not None else None
        return found if found is not None else self.feedback_job(session, request)

    @user_errors
    def feedback(self, session: Session, request: gr.Request = None):
        """The edited slot's model against the original on a small fixed slice: agreement, KL and perplexity.

        A newer release of the same visitor supersedes this one: it then changes nothing.
        """
        recipe = session.cut()
        if session.info is None or session.loading or recipe is None:
            return ""
        if session.info.kind != CAUSAL:
            return text.no_feedback(session.info)
        try:
            found = self.context.backend.explain.cut_feedback(session.spec, recipe, owner=owner(request))
        except Cancelled:
            return gr.update()  # a newer release (or Stop) took over: its own numbers will show
        how = "resumed from layer {}".format(found.resumed_at) if found.resumed else "the whole model run"
        took = "cached" if found.cached else f"{found.seconds:.1f} s, {how}"
        return (f"**{session.editing} against the original** on {found.tokens} next tokens of the calibration text: "
                f"**{found.summary()}** · {took}")

    @user_errors
    def export_follows(self, slot: str):
        """The export's slot follows the edited one (the visitor may then pick the other)."""
        return gr.update(value=slot) if slot in SLOTS else gr.update()

    @user_errors
    def export(self, session: Session, folder: str, slot: str | None = None, gguf: str | None = NO_GGUF,
               request: gr.Request = None, progress=gr.Progress()):
        """Save a slot's model (default: the edited one) as a Hugging Face checkpoint with a model card, offered as
        one zip; with a GGUF type, the model as one .gguf too, in the zip and beside it. No message names a folder
        of the server: files are named by their names only."""
        need_model(session)
        slot = slot or session.editing
        if slot not in SLOTS:
            raise InvalidInput(f"Export one of {', '.join(SLOTS)}, not {quoted(slot)}.")
        recipe = session.cut(slot)
        if recipe is None:
            raise InvalidInput(f"{slot} is empty: choose a cut for it first; there is nothing to export yet.")
        scores = [m for m in session.results if m.model in ("original", slot)]
        gguf = None if gguf in (None, "", NO_GGUF) else gguf
        done = self.context.backend.exports.offer(session.spec, recipe, folder or "", self.context.downloads,
                                                  scores=scores, gguf=gguf, progress=reporter(progress),
                                                  owner=owner(request))
        message = slot_text.export_saved(slot, done.archive.name, done.size, done.mergekit, done.llama_prune,
                                         done.gguf and done.gguf.name, done.llama_refused)
        message += "\n\n" + done.scale_out
        box = self.export_box
        if done.offered:
            return {box.status: message, box.files: [str(done.archive)] + ([str(done.gguf)] if done.gguf else [])}
        return {box.status: message + " " + slot_text.EXPORT_TOO_LARGE, box.files: None}
