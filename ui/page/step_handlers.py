"""The step methods' events (width, sparsity, low rank: one step on every layer): Build into the edited slot, and
width pruning against a depth cut of the same size."""

from __future__ import annotations

import time
from dataclasses import replace

import gradio as gr

from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe
from prune.depth.selection import check_selection, chosen_recipe
from prune.width.shrink import matching_depth_layers
from prune.width.step import NAME as WIDTH_PRUNING, WidthPrune, criterion_for

from ui import catalog, inputs, slot_text, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.session import SLOTS, Session


class StepHandlers:
    """Build a step method's model; the status says its cost before and what it owns after."""

    def __init__(self, context: Context, page):
        self.context = context
        self.view, self.status, self.rank_map = page.view, page.header.analysis_md, page.cut.rank_map

    @user_errors
    def build(self, session: Session, method: str, level, pattern: str, stack: bool, source: str, detail: str,
              upload, samples, seq_len, bos: str = "auto", request: gr.Request = None, progress=gr.Progress()):
        """Build a step method into the edited slot, alone or after its cut (``stack``).

        The status says what the variant will own before building; the build reports each layer.
        """
        need_model(session)
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.context.policy,
                                         self.context.default_calibration, bos)
        level = inputs.real_number(level, "The level", minimum=0, maximum=100) if catalog.has_level(method) else None
        item = catalog.step_for(method, level, pattern, calibration)
        before = session.cut()
        if stack and before is not None:
            recipe = before.then(item)
        else:
            recipe = Recipe((item,), origin=f"{catalog.choice(method).label} on the original")
        session = session.with_cut(recipe)
        yield from self._building(session, {session.editing: recipe}, request, progress)

    @user_errors
    def width_vs_depth(self, session: Session, level, selection: str, source: str, detail: str, upload, samples,
                       seq_len, bos: str = "auto", method: str = WIDTH_PRUNING, request: gr.Request = None,
                       progress=gr.Progress()):
        """A: the analysis's depth cut of about the size ``level`` % keeps; B: width pruning to ``level`` % by the
        picked width ``method`` (Wanda-sp or LLM-Pruner's criterion)."""
        criterion = criterion_for(method)
        info = need_model(session)
        if session.result is None:
            raise InvalidInput("Analyze with a depth method first: cut A is the layers that analysis picks.")
        ratio = inputs.real_number(level, "The share of parameters kept", minimum=1, maximum=99) / 100
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.context.policy,
                                         self.context.default_calibration, bos)
        depth = chosen_recipe(session.result, matching_depth_layers(info.size, ratio), check_selection(selection),
                              f"{session.origin}: as many parameters as width pruning removes")
        width = Recipe((WidthPrune.of(ratio, calibration, criterion),),
                       origin="width against depth at the same size")
        session = replace(session.with_cut(depth, SLOTS[0]).with_cut(width, SLOTS[1]), editing=SLOTS[0])
        yield from self._building(session, dict(zip(SLOTS, (depth, width))), request, progress)

    def _building(self, session: Session, recipes: dict, request, progress):
        """Yield a status saying what ``recipes`` will cost; build them; yield the view, the cost and the rank map.
        The page keeps its cuts until the build succeeds."""
        backend = self.context.backend
        costs = {slot: backend.models.estimated_bytes(session.spec, recipe) for slot, recipe in recipes.items()}
        on_disk = frozenset(slot for slot, recipe in recipes.items() if backend.models.built_into_files(session.spec,
                                                                                                        recipe))
        yield {self.status: slot_text.building_status(recipes, costs, backend.models.variants.budget_bytes, on_disk)}
        started = time.perf_counter()
        try:
            owned = {slot: backend.models.build(session.spec, recipe, progress=reporter(progress), owner=owner(request))
                     for slot, recipe in recipes.items()}
        except Exception:
            yield {self.status: text.analysis_status(session.result) if session.result else ""}
            raise
        built = slot_text.built_status(recipes, owned, time.perf_counter() - started, on_disk)
        yield {**self.view.show(session), self.status: built, **self.rank_map.show(session, recipes)}

    @user_errors
    def cut_size(self, session: Session):
        """The "N layers to cut" slider set to the edited slot's depth cut (width against depth just filled A)."""
        recipe = session.cut()
        cut = recipe.depth_cut if recipe else None
        return gr.update(value=len(cut.layers)) if cut else gr.update()
