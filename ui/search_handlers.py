"""The surgical rank search in the page: its inputs checked, the live plot of parameters against the scores,
and the searched model put in the edited slot (see :meth:`evaluation.serving.backend.Backend.rank_search`)."""

from __future__ import annotations

import gradio as gr

from evaluation.serving.backend import RankSearchDone
from evaluation.quality.offline_tasks import SUPPORTED_TASKS
from evaluation.sweeps.search_splits import WIKITEXT, metric_name, tolerance_for
from prune.core.errors import InvalidInput, quoted
from prune.lowrank.decomposition import check_space
from prune.lowrank.rank_search import Point

from ui import inputs, plots, text
from ui.handlers import Handlers, _need_model, _owner, _rank_map, reporter, user_errors
from ui.session import Session

NO_CHANGE = 10  # the cut outputs (8), the rank map's box and plot: unchanged while the search runs


class SearchHandlers:
    """The rank search's event; it shares the page's :class:`~ui.handlers.Handlers` (backend, policy, outputs)."""

    def __init__(self, handlers: Handlers):
        self.h = handlers

    @user_errors
    def rank_search(self, session: Session, space: str, criterion: str, tolerance, limit, last_layers,
                    projections: str, source: str, detail: str, upload, samples, seq_len, bos: str = "auto",
                    request: gr.Request = None, progress=gr.Progress()):
        """Search the ranks of the original's last N layers, plotting each projection as it is decided; the
        searched model goes into the edited slot.

        Outputs: the plot, the summary, the cut outputs, the rank map's box and plot.
        """
        info = _need_model(session)
        space = check_space(space)
        if criterion != WIKITEXT and criterion not in SUPPORTED_TASKS:
            raise InvalidInput(f"Search on {WIKITEXT} or a benchmark task, not {quoted(criterion)}.")
        tolerance = inputs.real_number(tolerance, "The tolerance", minimum=0, maximum=100)
        count = inputs.whole_number(last_layers, "The layers searched", minimum=1, maximum=info.num_layers)
        names = [n.strip() for n in (projections or "").split(",") if n.strip()] or None
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.h.policy,
                                         self.h.default_calibration, bos)
        metric, bound = metric_name(criterion), tolerance_for(criterion, tolerance)
        points: list[Point] = []
        for item in self.h.backend.rank_search(
                session.spec, space=space, criterion=criterion, tolerance=tolerance,
                limit=self.h.policy.limit(limit, "Windows or questions"),
                layers=range(info.num_layers - count, info.num_layers), projections=names, calibration=calibration,
                progress=reporter(progress), owner=_owner(request)):
            if isinstance(item, RankSearchDone):
                break
            points.append(item)
            figure = plots.rank_search_figure(points, metric, bound.bound(points[0].search, len(points) - 1))
            yield figure, text.search_progress(points, metric), *[gr.update()] * NO_CHANGE
        figure = plots.rank_search_figure(points, metric, bound.bound(points[0].search, len(points) - 1))
        if item.recipe is None:
            yield figure, text.search_summary(item.result, metric, None), *[gr.update()] * NO_CHANGE
            return
        session = session.with_cut(item.recipe)
        yield (figure, text.search_summary(item.result, metric, session.editing), *self.h._cut_outputs(session),
               *_rank_map(session, {session.editing: item.recipe}))

