"""LayerCut's page, built part by part: the header, then the tabs "Analyze & cut" (with the rank search, healing and
sharing), "Generate", "Speed & memory" and "Benchmarks" (with MT-Bench and the frontier). Each part lays out its
components in a dataclass, its handlers return updates keyed by those components, and it wires its own events; here
they are put together, with what spans the page: after each change of the cut its numbers, the buttons' slots, the
estimates and the results' notes; Stop; the memory line; a closed page."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evaluation.serving import Backend, ModelSpec

from ui import api
from ui.handlers import Context
from ui.inputs import Policy
from ui.page import benchmarks, cut_tab, estimates, experts, frontier, generate, header, heal, mt_bench, search, \
    share, speed, stale
from ui.page.benchmarks import BenchmarkHandlers, BenchmarksTab
from ui.page.cut_handlers import CutHandlers
from ui.page.cut_tab import CutTab
from ui.page.cut_view import CutView
from ui.page.durations import Durations
from ui.page.estimates import EstimateHandlers, Seconds
from ui.page.experts import ExpertHandlers
from ui.page.frontier import FrontierHandlers
from ui.page.events import FEEDBACK, LIGHT
from ui.page.generate import GenerateHandlers, GenerateTab
from ui.page.header import Header
from ui.page.heal import HealHandlers
from ui.page.mt_bench import MtBenchHandlers
from ui.page.pick_handlers import PickHandlers
from ui.page.search import SearchHandlers
from ui.page.share import ShareHandlers
from ui.page.speed import SpeedHandlers, SpeedTab
from ui.page.stale import Measured
from ui.page.step_handlers import StepHandlers
from ui.page.targets import SlotTargets
from ui.session import Session

MEMORY_REFRESH_S = 15  # the server-memory line: what every visitor's jobs do to it
# The events after which the edited slot's model changes, and the name of the numbers that follow each
FEEDBACK_AFTER = {"set_cut": "release", "select_cell": "click", "best_block": "best", "startup": "startup",
                  "analyze": "analyze", "analyze_loaded": "load", "edit_slot": "slot", "clear_cut": "clear",
                  "named_cut": "named", "build": "build", "width_vs_depth": "versus", "rank_search": "search",
                  "heal": "heal", "patch": "patch", "open_comparison": "open", "frontier_best": "frontier",
                  "map_experts": "map_experts", "expert_criterion": "expert_criterion", "set_experts": "experts",
                  "expert_cell": "expert_cell"}
MODEL_CHANGES = ("analyze_loaded", "open_comparison")  # then the expert box shows the model's own (startup: below)
BUILDS = ("build", "width_vs_depth", "patch")  # their status line says what they built
OPENING = "startup"  # a page opening: its first screen, then the other events of PAGE_LOAD
# Every event a page's opening fires, and why it is there (tests/ui/test_serve_first.py checks there are no others)
PAGE_LOAD = {"startup": "the first screen: the model's line, the heatmap and the opening cut, as computed at start-up",
             "feedback_after_startup": "the opening cut's numbers against the original (the start-up's, at once)",
             "around_opening": "the buttons' slots and the expert box for the model, in one light event",
             "settle": "the model's speed here, the opening block's stability and each job's estimate (it divides by "
                       "that speed): the first screen does not wait for them"}
# The events that run a job: Stop cancels them
JOBS = ("load_model", "analyze_loaded", "analyze", "build", "width_vs_depth", "startup", "settle", "generate",
        "divergence", "speed", "memory", "benchmarks", "perplexity", "sweep", "sparsity_sweep", "stability",
        "rank_search", "logit_lens", "heal", "patch", "open_comparison", "frontier", "mt_bench", "map_experts",
        "expert_criterion")


@dataclass
class PageHandlers:
    """Every event handler of the page, by the part it belongs to, sharing one :class:`Context`."""

    context: Context
    pick: PickHandlers
    steps: StepHandlers
    cut: CutHandlers
    experts: ExpertHandlers
    search: SearchHandlers
    heal: HealHandlers
    generate: GenerateHandlers
    speed: SpeedHandlers
    benchmarks: BenchmarkHandlers
    mt_bench: MtBenchHandlers
    frontier: FrontierHandlers
    share: ShareHandlers
    estimates: EstimateHandlers
    durations: Durations  # what each device job asks a ZeroGPU Space for

    def around_opening(self, session: Session, stack: bool) -> dict:
        """After a page opened, in one light event: the buttons' slots and the expert box for its model. (A new
        page has no build line to replace and nothing measured to mark out of date: the other events that follow a
        change of the model do not follow the opening.)"""
        return {**self.cut.targets(session, stack), **self.experts.opened(session)}

    def settle(self, session: Session, request: gr.Request = None, progress=gr.Progress(), *estimate_settings):
        """Then what the first screen did not wait for (``PickHandlers.settle``: the model's speed here, the opening
        block's stability) and each job's time estimate, which divides by that speed."""
        return {**self.pick.settle(session, request, progress), **self.estimates.every(session, *estimate_settings)}

    @classmethod
    def on(cls, context: Context, page: Page) -> PageHandlers:
        """Handlers that run on ``context``'s backend and show their results in ``page``'s components."""
        pick = PickHandlers(context, page)
        return cls(context, pick, StepHandlers(context, page), CutHandlers(context, page),
                   ExpertHandlers(context, page), SearchHandlers(context, page), HealHandlers(context, page),
                   GenerateHandlers(context, page), SpeedHandlers(context, page), BenchmarkHandlers(context, page),
                   MtBenchHandlers(context, page), FrontierHandlers(context, page), ShareHandlers(context, page, pick),
                   EstimateHandlers(context, page), Durations(Seconds(context)))


@dataclass
class Page:
    """Every component of the page by name, and its handlers."""

    demo: gr.Blocks
    session: gr.State  # this visitor's Session
    header: Header
    cut: CutTab
    generate: GenerateTab
    speed: SpeedTab
    benchmarks: BenchmarksTab
    view: CutView
    targets: SlotTargets  # the buttons that write a slot, labelled with it
    handlers: PageHandlers | None = None

    @property
    def measured(self) -> list[Measured]:
        """The result areas that name the models they measured and turn out of date when those change."""
        return [self.generate.measured, self.speed.speed_measured, self.speed.memory_measured,
                self.benchmarks.mt_bench.measured]


def build_demo(backend=None, *, policy: Policy | None = None, default_model: ModelSpec | None = None) -> gr.Blocks:
    """The page; ``policy`` says whether this server is shared (default: from the environment)."""
    return build_page(backend, policy=policy, default_model=default_model).demo


def build_page(backend=None, *, policy: Policy | None = None, default_model: ModelSpec | None = None,
               downloads=None) -> Page:
    """The page laid out, its handlers on ``backend`` (default: a Backend on this machine's data) and its events
    wired."""
    if backend is None:

        backend = Backend()  # the data folder of prune.core.paths.default_data_dir, if any
    context = Context(backend, policy or Policy.from_env(), default_model, downloads)
    # Downloads copied into Gradio's cache are removed after an hour (checked every 10 minutes).
    with gr.Blocks(title="LayerCut", analytics_enabled=False, delete_cache=(600, 3600)) as demo:
        page = _layout(demo, context)
        page.handlers = PageHandlers.on(context, page)
        _wire(page, page.handlers)
        api.serve(demo, context)  # the few public endpoints; every other event off the API page
    demo.queue(default_concurrency_limit=1)
    return page


def _layout(demo: gr.Blocks, context: Context) -> Page:
    session = gr.State(Session())
    top = Header.layout(context)
    with gr.Tabs():
        cut = CutTab.layout(context)
        generating = GenerateTab.layout()
        speeds = SpeedTab.layout()
        benches = BenchmarksTab.layout(context)
    view = CutView(cut.layer_range, top.banner, cut.heatmap, cut.bars, cut.greedy, cut.named, cut.slot, session,
                   cut.feedback_md)
    targets = SlotTargets(top.build_btn, cut.heal.button, cut.search.button, cut.patch_btn)
    return Page(demo, session, top, cut, generating, speeds, benches, view, targets)


def _wire(page: Page, handlers: PageHandlers) -> None:
    """Each part's events, then what spans the page."""
    events = {}
    for part in (header, cut_tab, experts, generate, speed, benchmarks, mt_bench, frontier, search, heal, share):
        events.update(part.wire(page, handlers))
    # Every change of the edited slot's model is followed by its numbers against the original (a newer one
    # supersedes); the first after a startup, a load or an analysis also computes the original's states once.
    # The buttons that write a slot then say which, and what it holds.
    stack, targets = page.header.steps.stack, page.targets.outputs()
    changes = [event for event in FEEDBACK_AFTER if event != OPENING]
    for event, name in FEEDBACK_AFTER.items():
        events[event].success(handlers.cut.shown_feedback, [page.session], [page.cut.feedback_md],
                              api_name=f"feedback_after_{name}", **FEEDBACK)
    for event in changes:
        name = FEEDBACK_AFTER[event]
        events[event].success(handlers.cut.targets, [page.session, stack], targets, api_name=f"targets_after_{name}",
                              **LIGHT)
        if event not in BUILDS:
            events[event].success(handlers.cut.status_after_change, [page.session, page.header.analysis_md],
                                  [page.header.analysis_md], api_name=f"status_after_{name}", **LIGHT)
    box = page.cut.experts
    for event in MODEL_CHANGES:
        events[event].success(handlers.experts.opened, [page.session], [box.note, box.plot, box.line],
                              api_name=f"experts_after_{event}", **LIGHT)
    stack.change(handlers.cut.targets, [page.session, stack], targets, api_name="targets_after_stack", **LIGHT)
    estimates.wire(page, handlers, events, ("load_model", *changes))  # each job's time, said beforehand
    events[OPENING].success(handlers.around_opening, [page.session, stack], [*targets, box.note, box.plot, box.line],
                            api_name="around_opening", **LIGHT)
    events["settle"] = events[OPENING].success(
        handlers.settle, [page.session, *handlers.estimates.inputs()],
        [page.header.model_md, page.cut.stability_md, *handlers.estimates.outputs()], api_name="settle",
        show_progress_on=[page.cut.stability_md], concurrency_limit=None)
    # A visitor's own load (or analysis) supersedes what a page's opening would still write over it: a page opened
    # during a cold start waits for its first screen, and its settle event for the start-up's end
    page.header.load_btn.click(None, None, None, cancels=[events[OPENING], events["settle"]],
                               api_name="opening_superseded", queue=False)
    page.header.analyze_btn.click(None, None, None, cancels=[events["settle"]], api_name="settle_superseded",
                                  queue=False)
    stale.wire([events[name] for name in changes], page.session, page.measured)
    running = [events[name] for name in JOBS]
    for button, name in ((page.header.stop_btn, "cancel"), (page.generate.gen_stop, "cancel_generation"),
                         (page.speed.speed_stop, "cancel_speed"), (page.benchmarks.bench_stop, "cancel_benchmarks")):
        # Gradio cancels this visitor's queued events; the handler stops this visitor's running job.
        button.click(handlers.context.cancel, None, None, api_name=name, cancels=running, queue=False)
    gr.Timer(MEMORY_REFRESH_S).tick(handlers.context.server_memory, None, page.header.memory_md,
                                    api_name="server_memory", queue=False, show_progress="hidden")
    page.demo.unload(handlers.context.page_closed)  # a closed page's jobs stop, whatever kind they are
