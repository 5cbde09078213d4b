"""The surgical rank search in the page: its inputs checked, the live plot of parameters against the scores,
and the searched model put in the edited slot (see :meth:`evaluation.serving.training.Training.rank_search`)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evaluation.serving import metric_name, RANK_SEARCH, RankSearchDone, TASKS, tolerance_for, WIKITEXT
from prune.core.errors import InvalidInput, quoted
from prune.lowrank.decomposition import SPACES, check_space
from prune.lowrank.rank_search import Point

from ui import explain_plots, help_text, inputs, plots, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, by_name, gpu
from ui.plot_view import PlotView
from ui.session import Session


@dataclass
class SearchBox:
    space: gr.Radio
    criterion: gr.Dropdown  # WikiText-2 perplexity or a benchmark task
    tolerance: NumberInput
    limit: NumberInput
    last_layers: NumberInput
    projections: gr.Textbox
    button: gr.Button
    estimate: gr.Markdown
    summary: gr.Markdown
    plot: PlotView

    @classmethod
    def layout(cls, context: Context) -> SearchBox:
        with gr.Accordion("Surgical rank search (low-rank): lower each projection's rank while a score holds",
                          open=False, elem_id="search-box"):
            gr.Markdown(help_text.RANK_SEARCH_HELP)
            with gr.Row(equal_height=True):
                settings = dict(
                    space=gr.Radio(list(SPACES), value=SPACES[0], label="Space", elem_id="search-space"),
                    criterion=gr.Dropdown([WIKITEXT, *help_text.task_choices()], value=WIKITEXT, label="Score",
                                          elem_id="search-on"),
                    tolerance=NumberInput(RANK_SEARCH.tolerance, label="Tolerance (points, or % per projection)",
                                          minimum=0, elem_id="search-tolerance"),
                    limit=NumberInput(RANK_SEARCH.limit, minimum=0, elem_id="search-limit",
                                      label=f"Windows (256 tokens) or questions ({context.policy.limit_words()})"),
                    last_layers=NumberInput(2, label="Last N layers", minimum=1, elem_id="search-layers"),
                    projections=gr.Textbox("", label="Projections (empty: all)", elem_id="search-names"),
                    button=gr.Button("Search ranks", variant="primary", elem_id="search-btn", scale=0, min_width=240))
            estimate = gr.Markdown(elem_id="search-estimate")
            summary = gr.Markdown(elem_id="search-summary")
            plot = PlotView(plots.empty_figure("Search to see parameters against the scores"), height=420,
                            elem_id="search-plot")
        return cls(**settings, estimate=estimate, summary=summary, plot=plot)


class SearchHandlers:
    """The rank search's event: the plot and summary while it runs, then the view and the rank map."""

    def __init__(self, context: Context, page):
        self.context = context
        self.box, self.view, self.rank_map = page.cut.search, page.view, page.cut.rank_map

    @user_errors
    def rank_search(self, session: Session, space: str, criterion: str, tolerance, limit, last_layers,
                    projections: str, source: str, detail: str, upload, samples, seq_len, bos: str = "auto",
                    request: gr.Request = None, progress=gr.Progress()):
        """Search the ranks of the original's last N layers, plotting each projection as it is decided; the
        searched model goes into the edited slot."""
        info = need_model(session)
        space = check_space(space)
        if criterion != WIKITEXT and criterion not in TASKS:
            raise InvalidInput(f"Search on {WIKITEXT} or a benchmark task, not {quoted(criterion)}.")
        tolerance = inputs.real_number(tolerance, "The tolerance", minimum=0, maximum=100)
        count = inputs.whole_number(last_layers, "The layers searched", minimum=1, maximum=info.num_layers)
        names = [n.strip() for n in (projections or "").split(",") if n.strip()] or None
        policy = self.context.policy
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, policy,
                                         self.context.default_calibration, bos)
        metric, bound = metric_name(criterion), tolerance_for(criterion, tolerance)
        points: list[Point] = []

        def drawn():  # the search so far, and the tolerance's bound on its score
            return explain_plots.rank_search_figure(points, metric, bound.bound(points[0].search, len(points) - 1))

        for item in self.context.backend.training.rank_search(
                session.spec, space=space, criterion=criterion, tolerance=tolerance,
                limit=policy.limit(limit, "Windows or questions"),
                layers=range(info.num_layers - count, info.num_layers), projections=names, calibration=calibration,
                progress=reporter(progress), owner=owner(request)):
            if isinstance(item, RankSearchDone):
                break
            points.append(item)
            yield {self.box.plot: drawn(), self.box.summary: text.search_progress(points, metric)}
        figure = drawn()
        if item.recipe is None:
            yield {self.box.plot: figure, self.box.summary: text.search_summary(item.result, metric, None)}
            return
        session = session.with_cut(item.recipe)
        yield {self.box.plot: figure, self.box.summary: text.search_summary(item.result, metric, session.editing),
               **self.view.show(session), **self.rank_map.show(session, {session.editing: item.recipe})}


def wire(page, handlers) -> dict:
    box = page.cut.search
    search = box.button.click(
        gpu(handlers.search.rank_search, handlers.durations.rank_search),
        [page.session, box.space, box.criterion, box.tolerance, box.limit, box.last_layers, box.projections,
         *page.header.calibration.inputs()],
        [box.plot, box.summary, *page.view.outputs(), *page.cut.rank_map.outputs()], api_name="rank_search",
        show_progress_on=[box.summary], **DEVICE)
    return by_name(search)
