"""The header's pick events: the page opening on the default model, loading another, a method's description and
controls, and the analysis that scores every block."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr

import prune
from prune.core.architectures import CAUSAL
from prune.core.errors import ModelNotFound
from prune.depth.methods import options_for_cut
from prune.depth.selection import LAYERS, check_remove, check_selection, chosen_recipe
from prune.core.surgery import largest_cut
from prune.width.step import WIDTH_METHODS

from ui import catalog, help_text, inputs, text
from ui.handlers import Context, default_block_size, need_model, owner, reporter, user_errors
from ui.page.durations import Durations
from ui.page import first_screen
from ui.page.events import gpu
from ui.session import Session


class PickHandlers:
    """Model and method: what the header's buttons and pickers do to the edited slot and the status line."""

    def __init__(self, context: Context, page):
        self.context = context
        self.header, self.view, self.cut, self.generate = page.header, page.view, page.cut, page.generate
        self.startup_job = gpu(self.startup, Durations.analyze)  # a device job (ZeroGPU: in the GPU worker)
        self.settle_job = gpu(self.settled, Durations.analyze)

    @user_errors
    def opening(self, session: Session, method: str, request: gr.Request = None, progress=gr.Progress()):
        """Page opened: the first screen this server computed at start-up (``ui.page.first_screen``), at once and
        with no device job — waited for while it is still computed; else the page-load job."""
        first_screen.awaited(self.context, "shown", progress)
        first = self.context.first_screen
        shown = first.opening(session, method) if first is not None else None
        if shown is not None:
            return shown
        return self.startup_job(session, method, request, progress)

    @user_errors
    def startup(self, session: Session, method: str, request: gr.Request = None, progress=gr.Progress()):
        """The page-load job: this server's default model analyzed by ``method``, its best block of a tenth as A.

        A demo then needs no clicks to reach the heatmap; analyses are cached on disk, so a
        second visit is instant.
        """
        backend, calibration = self.context.backend, self.context.default_calibration
        spec = session.spec or self.context.default_model
        info = backend.models.load(spec, progress=reporter(progress), owner=owner(request), timed=False)
        session = session if session.spec == spec else Session().for_model(spec, info)
        size = default_block_size(info.num_layers)
        session, status = self._analyze(session, method, {}, calibration, size, "paper", request, progress)
        return {self.header.model: gr.update(value=spec.name, choices=self.context.model_choices()),
                **self.model_shown(info, session), self.header.analysis_md: status}

    @user_errors
    def settle(self, session: Session, request: gr.Request = None, progress=gr.Progress()):
        """After the page opened, what its first screen did not wait for: the model's speed here (in its line) and
        the opening block's stability — the start-up's when it computed them (waited for), else measured now."""
        first_screen.awaited(self.context, "done", progress)
        first = self.context.first_screen
        settled = first.settled_for(session) if first is not None else None
        return settled if settled is not None else self.settle_job(session, request, progress)

    @user_errors
    def settled(self, session: Session, request: gr.Request = None, progress=gr.Progress()):
        """The settle job: the timing probe (read from the disk cache after a restart) and the stability of the
        analysis's block of the default size (kept on disk too)."""
        info = need_model(session)
        loaded = self.context.backend.models.load(session.spec, progress=reporter(progress), owner=owner(request))
        shown = {self.header.model_md: self._model_line(loaded, session)}
        if session.result is not None:
            found = self.context.backend.analysis.stability(
                session.spec, session.result.method, default_block_size(info.num_layers),
                calibration=session.calibration, progress=reporter(progress), owner=owner(request),
                **dict(session.options))
            shown[self.cut.stability_md] = text.stability_markdown(found)
        return shown

    @user_errors
    def load_model(self, session: Session, name: str, token: str, trust_remote_code: bool, dtype: str,
                   request: gr.Request = None, progress=gr.Progress()):
        """Load a model (empty = the embedded default) for this visitor.

        Nothing of the previous model shows while it loads; a failure shows the previous model again.
        """
        spec = inputs.model_spec(name, token, trust_remote_code, dtype, self.context.policy)
        status = self.header.analysis_md
        yield {**self.view.show(session.while_loading(spec.name)), status: f"Loading {spec.name}…"}
        try:
            info = self.context.backend.models.load(spec, progress=reporter(progress), owner=owner(request))
        except Exception as err:
            yield {**self.view.show(session), status: text.analysis_status(session.result) if session.result else "",
                   self.view.feedback: ""}  # no measure follows a failed load
            if isinstance(err, ModelNotFound) and self.context.policy.shared:  # the same words, folder or not
                raise inputs.shared_not_found(spec.name) from None
            raise
        yield {**self.model_shown(info, session.for_model(spec, info)), status: "Analyzing…"}

    @user_errors
    def model_back(self, session: Session):
        """After a failed load: the picker names the model still loaded again (the load's error said why)."""
        if session.spec is None or session.info is None:
            return {self.header.model: gr.update(), self.header.model_md: gr.update()}
        return {self.header.model: gr.update(value=session.spec.name), self.header.model_md: self._model_line(
            session.info, session)}

    def _model_line(self, info, session: Session) -> str:
        rates = info.rates or (self.context.backend.models.rates(session.spec) if session.spec is not None else None)
        decodes = rates is not None and info.kind == CAUSAL  # an encoder's probe makes no decode step
        return text.model_markdown(info, rates.decode_s_per_token if decodes else None)

    def model_shown(self, info, session: Session) -> dict:
        """The model's line, its N-layers slider and index convention, the view of ``session``, and whether the
        Generate tab shows."""
        return {self.header.model_md: self._model_line(info, session),
                self.cut.block_size: gr.update(maximum=max(1, largest_cut(info.num_layers)),
                                               value=default_block_size(info.num_layers)),
                **self.view.show(session), self.cut.convention: help_text.index_convention(info.num_layers),
                self.cut.stability_md: help_text.STABILITY_HELP,  # a stability measured on another model is gone
                **self.generation_shown(info)}

    def generation_shown(self, info) -> dict:
        """The Generate tab's controls, or for a model that generates nothing here (an encoder) why not."""
        generates = info.kind == CAUSAL
        return {self.generate.body: gr.update(visible=generates),
                self.generate.kind_note: gr.update(visible=not generates, value="" if generates else
                                                   text.not_generating(info))}

    @user_errors
    def method_info(self, method: str):
        """The method's description and default options; a step method (width, sparsity, low rank) shows its
        level, pattern and Build instead of Analyze."""
        header, steps = self.header, self.header.steps
        step = catalog.is_step_method(catalog.check_method(method))
        if step:
            about, options = catalog.step_markdown(method), ""
        else:
            spec = prune.METHODS[method]
            about, options = help_text.method_markdown(spec), text.options_text(spec.options)
        shown = {header.method_about: about, header.options: gr.update(value=options, interactive=not step),
                 header.analyze_btn: gr.update(visible=not step), header.build_btn: gr.update(visible=step),
                 steps.row: gr.update(visible=step),
                 steps.pattern: gr.update(visible=step and catalog.choice(method).patterns),
                 steps.versus_btn: gr.update(visible=method in WIDTH_METHODS)}
        if step:
            shown[steps.level] = gr.update(**catalog.level_slider(method))
        return shown

    @user_errors
    def analyze(self, session: Session, method: str, options: str, source: str, detail: str, upload, samples,
                seq_len, block_size, selection: str = "paper", bos: str = "auto", remove: str = LAYERS,
                request: gr.Request = None, progress=gr.Progress()):
        """Score every block with ``method``, then put ``block_size`` layers it picks in the edited slot."""
        info = need_model(session)
        if catalog.is_step_method(catalog.check_method(method)):  # after a load with a step method: nothing to score
            label = catalog.choice(method).label
            return {**self.view.show(session), self.header.analysis_md: f"{label}: set its level and press *Build*."}
        spec = prune.METHODS[method]
        remove = check_remove(remove, method)
        calibration = inputs.calibration(source, detail, upload, samples, seq_len, self.context.policy,
                                         self.context.default_calibration, bos)
        size = inputs.whole_number(block_size, "The number of layers", minimum=1, maximum=largest_cut(info.num_layers))
        options = options_for_cut(spec, size, inputs.parse_options(options, spec))
        session, status = self._analyze(session, method, options, calibration, size, check_selection(selection),
                                        request, progress, remove)
        return {**self.view.show(session), self.header.analysis_md: status}

    def _analyze(self, session, method, options, calibration, size, selection, request, progress, remove=LAYERS):
        result = self.context.backend.analysis.score(session.spec, method, calibration=calibration,
                                                     progress=reporter(progress), owner=owner(request), **options)
        origin = f"{prune.METHODS[method].label} on {text.calibration_words(calibration)}"
        session = replace(session, result=result, origin=origin, calibration=calibration,
                          options=tuple(sorted(options.items())))
        session = session.with_cut(chosen_recipe(result, size, selection, origin, remove))
        return session, text.analysis_status(result)
