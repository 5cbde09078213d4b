"""The expert heatmap (a mixture of experts, on the "Analyze & cut" tab): each layer's experts coloured by saliency
(REAP or a baseline), how many to remove from each layer by a slider or a click, the edited slot set to that expert
pruning (or merging) with the bytes it stores and reads said at once; its numbers against the original follow like a
depth cut's. A dense model says in one line why it has none."""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from prune.core.errors import InvalidInput, quoted
from prune.core.recipe import Recipe
from prune.experts.map import ExpertMap
from prune.experts.removal import removed_count
from prune.experts.step import CRITERIA, MAX_FRACTION, MERGE, ExpertPrune

from ui import inputs
from ui.expert_plots import expert_figure
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import SliderInput
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.plot_view import PlotView
from ui.plots import empty_figure
from ui.session import Session

HEIGHT = 380
DENSE = ("This model is dense: it has no experts to map or remove. The expert heatmap and expert pruning are for a "
         "mixture of experts (Mixtral, Qwen3-MoE, gpt-oss, DeepSeek-V3, …).")
INTRO = ("Each row is a layer, each cell an expert, coloured by its saliency within its layer. Pick how many experts "
         "every layer loses (the slider, or click an expert: it and every expert less salient in its layer go); the "
         "edited slot becomes that model, its numbers below the range.")


@dataclass
class ExpertsBox:
    note: gr.Markdown  # what the map shows, or why a model has none
    criterion: gr.Dropdown
    ranked: gr.Checkbox  # each layer's experts sorted, least salient first
    button: gr.Button
    removed: SliderInput  # experts removed from each layer
    plot: PlotView
    line: gr.Markdown  # the choice's bytes stored and read per token

    @classmethod
    def layout(cls) -> ExpertsBox:
        with gr.Accordion("Experts: which matter, and how many to keep (a mixture of experts)", open=False,
                          elem_id="experts-box"):
            note = gr.Markdown(INTRO, elem_id="experts-note")
            with gr.Row(equal_height=True):
                criterion = gr.Dropdown([(label, name) for name, label in CRITERIA.items()], value="reap",
                                        label="Saliency (merging: the experts merge by frequency)", scale=2,
                                        elem_id="expert-criterion")
                ranked = gr.Checkbox(False, label="Sort each layer, least salient first", scale=1,
                                     elem_id="expert-ranked")
                button = gr.Button("Map the experts", scale=1, elem_id="experts-btn")
            removed = SliderInput(0, 1, value=0, step=1, label="Experts removed from each layer",
                                  elem_id="experts-removed")
            plot = PlotView(height=HEIGHT, elem_id="expert-map")
            line = gr.Markdown(elem_id="experts-line")
        return cls(note, criterion, ranked, button, removed, plot, line)


def saliency_of(criterion: str) -> str:
    """The saliency the map shows for a criterion: merging keeps the most frequently routed experts."""
    return "frequency" if criterion == MERGE else criterion


def largest(found: ExpertMap) -> int:
    """The most experts a layer may lose (90 % of them, as the step allows)."""
    return max(0, min(found.experts - 1, removed_count(found.experts, MAX_FRACTION)))


def bytes_line(found: ExpertMap, removed: int, criterion: str) -> str:
    """'**4 of 16 experts removed from each of 30 layers** (REAP): stored 538 → 417 MB (77 %) · read per token …'."""
    fraction = removed / found.experts
    stored, read = (found.stored_bytes(0), found.stored_bytes(fraction)), (found.read_bytes(0),
                                                                           found.read_bytes(fraction))
    left = found.experts - removed
    how = "merged into the kept" if criterion == MERGE else "removed"
    reads = ("the same: a token still reads its top-"
             f"{found.top_k}" if left >= found.top_k else f"{left} experts a layer are left, fewer than its top-"
             f"{found.top_k}")
    return (f"**{removed} of {found.experts} experts {how} from each of {len(found.layers)} layers** "
            f"({CRITERIA[criterion]}): weights stored {_size(stored[0])} → {_size(stored[1])} "
            f"({100 * stored[1] / stored[0]:.0f} %) · read per token {_size(read[0])} → {_size(read[1])} "
            f"({reads}) · " + (f"saliency read in {found.seconds:.1f} s" if found.seconds else
                               "saliency from the cache"))


def _size(count: int) -> str:
    """'412 MB', '1.3 GB', '760 kB'."""
    return f"{count / 1e9:.2f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB" if count >= 1e7 else \
        f"{count / 1e6:.1f} MB" if count >= 1e6 else f"{count / 1e3:.0f} kB"


class ExpertHandlers:
    """The map as a device job; the slider and clicks as light events that set the edited slot."""

    def __init__(self, context: Context, page):
        self.context, self.view, self.box, self.session = context, page.view, page.cut.experts, page.session

    def _has_experts(self, session: Session) -> bool:
        return any(m.experts > 1 for layer in need_model(session).size.matrices for m in layer)

    @user_errors
    def opened(self, session: Session):
        """The box as the loaded model allows: its map, or the one line why there is none."""
        if session.info is None or session.loading or not self._has_experts(session):
            note = DENSE if session.info is not None and not session.loading else INTRO
            return {self.box.note: note, self.box.plot: empty_figure(""), self.box.line: ""}
        refusal = session.info.refusals.get("Expert pruning")
        return {self.box.note: refusal or INTRO, self.box.plot: self._figure(session, False), self.box.line: ""}

    @user_errors
    def map(self, session: Session, criterion: str, ranked: bool, request: gr.Request = None,
            progress=gr.Progress()):
        """Read the experts' saliency (once per model and text: then every criterion is instant)."""
        if not self._has_experts(session):
            raise InvalidInput(DENSE)
        criterion = _criterion(criterion)
        found = self.context.backend.experts.saliency(session.spec, saliency_of(criterion),
                                                      calibration=session.calibration, progress=reporter(progress),
                                                      owner=owner(request))
        session = replace(session, experts=found)
        removed = min(self._removed(session), largest(found))
        if removed:  # the edited slot's expert pruning follows the criterion shown
            return {**self._chosen(session, criterion, removed, ranked),
                    self.box.removed: gr.update(maximum=largest(found), value=removed)}
        return {**self.view.show(session), self.box.plot: self._figure(session, ranked),
                self.box.removed: gr.update(maximum=largest(found), value=0),
                self.box.line: bytes_line(found, 0, criterion)}

    @user_errors
    def choose(self, session: Session, criterion: str, removed, ranked: bool):
        """The edited slot loses ``removed`` experts from each layer (0: the slot goes empty)."""
        found = self._found(session)
        removed = inputs.whole_number(removed, "The experts removed from each layer", minimum=0,
                                      maximum=largest(found))
        return self._chosen(session, _criterion(criterion), removed, ranked)

    @user_errors
    def click(self, session: Session, criterion: str, ranked: bool, evt: gr.EventData):
        """A click on an expert removes it and every expert less salient in its layer (from each layer as many)."""
        found = self._found(session)
        try:
            column, row = int(evt.x), int(evt.y)
            scores = found.scores[row]
        except (AttributeError, TypeError, ValueError, IndexError):
            raise InvalidInput("Click an expert of the map to remove it and those below it.") from None
        rank = column if ranked else sorted(range(found.experts), key=lambda e: (scores[e], e)).index(column)
        return self._chosen(session, _criterion(criterion), min(rank + 1, largest(found)), ranked)

    @user_errors
    def redraw(self, session: Session, ranked: bool):
        return self._figure(session, ranked) if session.experts else gr.update()

    def _chosen(self, session: Session, criterion: str, removed: int, ranked: bool) -> dict:
        found = session.experts
        calibration = session.calibration or self.context.backend.models.default_calibration
        step = ExpertPrune.of(criterion, removed / found.experts, calibration)
        recipe = Recipe((step,), origin=f"{CRITERIA[criterion]} on the original") if removed else None
        session = session.with_cut(recipe)
        return {**self.view.show(session), self.box.plot: self._figure(session, ranked),
                self.box.removed: gr.update(value=removed), self.box.line: bytes_line(found, removed, criterion)}

    def _found(self, session: Session) -> ExpertMap:
        need_model(session)
        if session.experts is None:
            raise InvalidInput("Map the experts first: the choice comes from their saliency.")
        return session.experts

    def _removed(self, session: Session) -> int:
        """Experts a layer loses in the edited slot's recipe (0: none)."""
        recipe = session.cut()
        step = recipe.first("experts") if recipe else None
        return int(session.experts.removed(step.fraction)) if step and session.experts else 0

    def _figure(self, session: Session, ranked: bool):
        if session.experts is None:
            return empty_figure("Map the experts to see which matter")
        return expert_figure(session.experts, self._removed(session), bool(ranked))


def _criterion(value: str) -> str:
    if value not in CRITERIA:
        raise InvalidInput(f"Unknown expert criterion {quoted(value)}. Choose one of: {', '.join(CRITERIA)}.")
    return value


def wire(page, handlers) -> dict:
    box, session, experts = page.cut.experts, page.session, handlers.experts
    outputs = [*page.view.outputs(), box.plot, box.removed, box.line]
    mapped = box.button.click(gpu(experts.map, handlers.durations.experts), [session, box.criterion, box.ranked],
                              outputs, api_name="map_experts", show_progress_on=[box.plot], **DEVICE)
    criterion = box.criterion.input(gpu(experts.map, handlers.durations.experts), [session, box.criterion,
                                                                                   box.ranked],
                                    outputs, api_name="expert_criterion", show_progress_on=[box.plot], **DEVICE)
    chosen = box.removed.release(experts.choose, [session, box.criterion, box.removed, box.ranked], outputs,
                                 api_name="set_experts", **LIGHT)
    clicked = box.plot.point_click(experts.click, [session, box.criterion, box.ranked], outputs,
                                   api_name="expert_cell", **LIGHT)
    box.ranked.input(experts.redraw, [session, box.ranked], [box.plot], api_name="expert_ranked", **LIGHT)
    return by_name(mapped, criterion, chosen, clicked)
