"""The endpoints worth calling from a script, an agent or an MCP client: plain values in, JSON out, no page state.
The page's own events stay callable (its frontend and tests drive them) but leave the API page and MCP.

Each endpoint's result is described once, as a JSON schema (``SCHEMAS``): its docstring's "Returns" is written from
it, and MCP declares it as the tool's output schema (``ui.mcp``).

No ``from __future__ import annotations`` here: Gradio reads the endpoints' types from their live annotations.
"""

import math
from dataclasses import replace

import gradio as gr

import prune
from evaluation.serving import (DEFAULT_METHOD, FAMILIES, TASKS, FrontierPoint, FrontierResult, Measurement, ORIGINAL,
                                check_request, check_target, screened_out, target_line)
from prune.core.errors import InvalidInput, ModelNotFound, quoted
from prune.core.recipe import Recipe

from ui import catalog, inputs, mcp
from ui.handlers import Context, owner, user_errors
from ui.page.durations import Durations
from ui.page.events import DEVICE, gpu
from ui.session import SLOTS

PUBLIC = ("analyze_model", "compare_models", "best_under_target")  # Api's endpoints (the page has an "analyze" of its
# own); the API page lists these and nothing else, and MCP serves them as tools of the same names
SCORE_FIELDS = ("value", "unit", "spread", "spread_kind", "higher_is_better")  # what a column says of a metric
FAMILY_SEPARATOR = ";"  # the frontier's family names hold commas ("depth, block")
TARGET_WINDOWS = 2  # WikiText-2 test windows per frontier point, as the page's frontier

NUMBER = {"type": ["number", "null"]}  # null where a value is not a finite number
RECIPE = {"type": ["object", "null"], "description": "LayerCut's recipe JSON, as compare_models' recipe_a and the "
                                                     "command line's --recipe take it; null: the original"}
SCORES = {"type": "object", "description": "metric → its value (in its unit; % for accuracies), unit, spread "
                                           "(± one standard error, or the noise band), spread_kind, higher_is_better",
          "additionalProperties": {"type": "object", "properties": {
              "value": NUMBER, "unit": {"type": "string"}, "spread": NUMBER,
              "spread_kind": {"type": ["string", "null"]}, "higher_is_better": {"type": "boolean"}}}}
POINT = {"type": "object", "properties": {
    "label": {"type": "string", "description": "the families this model stands for, or 'original'"},
    "families": {"type": "array", "items": {"type": "string"}},
    "recipe": RECIPE,
    "params": {"type": "integer", "description": "parameters that are not zero"},
    "weight_bytes": {"type": "integer", "description": "its weights' bytes as stored (quantized: their real bytes)"},
    "ms_per_token": {**NUMBER, "description": "decode latency, batch 1, milliseconds per token"},
    "perplexity": {**NUMBER, "description": "WikiText-2 test perplexity on the frontier's windows"},
    "task": {**NUMBER, "description": "the task's primary metric in lm-eval's units (a fraction for accuracies)"},
    "on_front": {"type": "boolean", "description": "on the Pareto front of the target's axis"}}}


def _schema(required: tuple[str, ...], **properties) -> dict:
    return {"type": "object", "properties": properties, "required": list(required)}


SCHEMAS = {
    "analyze_model": _schema(
        ("model", "num_layers", "method", "layer_scores", "best_blocks"),
        model={"type": "string", "description": "the model's name"},
        num_layers={"type": "integer", "description": "its decoder layers"},
        method={"type": "string", "description": "the importance method"},
        score_label={"type": "string", "description": "what a score is"},
        calibration={"type": "string", "description": "the text the scores were computed on"},
        layer_scores={"type": "array", "items": NUMBER,
                      "description": "one per layer, from layer 0; lower is more removable"},
        best_blocks={"type": "array", "description": "per block size K, the best block to cut: layers start … end − 1 "
                                                     "(0-based; end exclusive)",
                     "items": _schema(("layers", "start", "end"), layers={"type": "integer"},
                                      start={"type": "integer"}, end={"type": "integer"})}),
    "compare_models": _schema(
        ("model", "num_layers", "tasks", "columns"),
        model={"type": "string", "description": "the model's name"},
        num_layers={"type": "integer", "description": "its decoder layers"},
        tasks={"type": "array", "items": {"type": "string"}, "description": "the tasks measured"},
        limit={"type": ["integer", "null"], "description": "questions per task (null: all)"},
        columns={"type": "object", "description": "'original', 'A', 'B' → the column's recipe and its scores",
                 "additionalProperties": _schema(("recipe", "scores"), recipe=RECIPE, scores=SCORES)}),
    "best_under_target": _schema(
        ("model", "num_layers", "target", "points", "front", "best"),
        model={"type": "string", "description": "the model's name"},
        num_layers={"type": "integer", "description": "its decoder layers"},
        target={"type": "string", "description": "the target in words"},
        axis={"type": "string", "description": "what the sizes measure: bytes, params or ms"},
        task={"type": "string"}, limit={"type": ["integer", "null"], "description": "questions (null: all)"},
        points={"type": "array", "items": POINT, "description": "every model measured, the original first"},
        front={"type": "array", "items": {"type": "string"}, "description": "the Pareto front's labels, smallest "
                                                                               "first"},
        best={**POINT, "type": ["object", "null"], "description": "the lowest perplexity under the target among the "
                                                                   "models a deployment sees a gain in; null: none"},
        verdict={"type": "string", "description": "the best in one line, or why there is none"},
        unreached={"type": "array", "description": "a family that reached no size, or whose candidate was screened "
                                                   "out (a rival beat it clearly on a few perplexity windows), and why",
                   "items": _schema(("family", "why"), family={"type": "string"}, why={"type": "string"})}),
}


class Api:
    """Each endpoint checks its values as the page does (``ui.inputs``, this server's policy), then asks the
    backend as a job of the caller's own."""

    def __init__(self, context: Context):
        self.context = context

    def analyze_model(self, model: str, method: str = "angular", request: gr.Request = None) -> dict:
        """Score every layer of a model by how removable it is, and give the best block of K layers to cut per K.

        Args:
            model: a Hugging Face model id, or "" for the embedded SmolLM2-135M-Instruct (a shared server: no folders).
            method: the importance method, one of: {methods}.
        Returns:
            {returns}
        """
        method = _depth_method(method)
        spec, info = self._load(model, request)
        calibration = self.context.default_calibration
        result = self.context.backend.analysis.score(spec, method, calibration=calibration, owner=owner(request))
        scores = result.to_json()
        return {"model": info.name, "num_layers": info.num_layers, "method": method,
                "score_label": result.score_label, "calibration": calibration.source,
                "layer_scores": [_finite(s) for s in scores["layer_scores"] or scores["block_scores"][0]],
                "best_blocks": [{"layers": n, "start": start, "end": end}
                                for n, (start, end) in result.best_blocks().items()]}

    def compare_models(self, model: str, recipe_a: str, recipe_b: str = "", tasks: str = "arc_easy",
                       limit: int = 20, request: gr.Request = None) -> dict:
        """Benchmark a model and up to two compressed versions of it on lm-eval tasks (offline data), side by side.

        Args:
            model: a Hugging Face model id, or "" for the embedded SmolLM2-135M-Instruct (a shared server: no folders).
            recipe_a: column A's recipe as LayerCut's JSON (an export's layercut.json "recipe"); "" for no column.
            recipe_b: column B's recipe, alike; "" for no column.
            tasks: benchmark tasks separated by commas, such as "arc_easy,hellaswag"; one of: {tasks}.
            limit: questions per task (0 = all; a shared server bounds it).
        Returns:
            {returns}
        """
        backend, policy = self.context.backend, self.context.policy
        task_request = check_request(inputs.task_names(tasks),
                                     limit=policy.limit(limit, "Questions per task"),
                                     data_dir=backend.models.data_dir)
        spec, info = self._load(model, request)
        given = {slot: inputs.recipe(text, f"Recipe {slot}", info.num_layers, policy,
                                     self.context.default_calibration)
                 for slot, text in zip(SLOTS, (recipe_a, recipe_b))}
        variants = {slot: recipe for slot, recipe in given.items() if recipe is not None}
        found = backend.measure.benchmarks(spec, variants, task_request, owner=owner(request))
        return {"model": info.name, "num_layers": info.num_layers, "tasks": list(task_request.names),
                "limit": task_request.limit,
                "columns": {label: _column(recipe, [m for m in found if m.model == label])
                            for label, recipe in {ORIGINAL: Recipe(), **variants}.items()}}

    def best_under_target(self, model: str, target: str, task: str = "hellaswag", limit: int = 20,
                          families: str = "", request: gr.Request = None) -> dict:
        """What should I cut to reach a size? Every compression family planned to reach the target, measured
        (WikiText-2 test perplexity, the task, bytes as stored, decode ms/token), the Pareto front and the best model
        under the target; about {minutes} minutes for the embedded model on 2 CPU cores (cached: a rerun is instant).

        Args:
            model: a Hugging Face model id, or "" for the embedded SmolLM2-135M-Instruct (a shared server: no folders).
            target: "bytes=400MiB", "bytes=0.5" (of the original's bytes as stored), "ms=20" (per token) or
                "params=0.8" (of the parameters).
            task: one benchmark task scored beside perplexity, one of: {tasks}.
            limit: questions of the task (0 = all; a shared server bounds it).
            families: the families to try, separated by ";" such as "int8; int4; depth, block"; "" for all of:
                {families}.
        Returns:
            {returns}
        """
        backend, policy = self.context.backend, self.context.policy
        goal = check_target(target)
        chosen = _families(families)
        task_request = check_request(inputs.task_names(task)[:1] or [""], limit=policy.limit(limit, "Questions"),
                                     data_dir=backend.models.data_dir)
        spec, info = self._load(model, request)
        result = None
        for result in backend.frontier.run(spec, task_request, target=goal, sizes=(), families=chosen,
                                           method=DEFAULT_METHOD, calibration=self.context.default_calibration,
                                           ppl_windows=TARGET_WINDOWS, owner=owner(request)):
            pass
        best = result.best_under(goal)
        if best is None:
            raise InvalidInput(target_line(result, goal, None))
        return _frontier_json(info, goal, result, best)

    def _load(self, model, request):
        """The model's spec and info, loaded as the page loads a visitor's (no token, no model code of its own)."""
        policy = self.context.policy
        spec = inputs.model_spec(model, None, False, None, policy)
        try:
            return spec, self.context.backend.models.load(spec, owner=owner(request))
        except ModelNotFound:
            if policy.shared:  # the same words, folder or not
                raise inputs.shared_not_found(spec.name) from None
            raise


def _returns(schema: dict) -> str:
    """A docstring's "Returns" written from an endpoint's schema: each field and what it means."""
    fields = "; ".join(f'"{name}"' + (f": {spec['description']}" if "description" in spec else "")
                       for name, spec in schema["properties"].items())
    return f"JSON: {{{fields}}}."


# The choices and the result each docstring names (Gradio reads them as the endpoints' documentation and the MCP
# tools' descriptions)
Api.analyze_model.__doc__ = Api.analyze_model.__doc__.format(methods=", ".join(prune.METHODS),
                                                             returns=_returns(SCHEMAS["analyze_model"]))
Api.compare_models.__doc__ = Api.compare_models.__doc__.format(tasks=", ".join(TASKS),
                                                               returns=_returns(SCHEMAS["compare_models"]))
Api.best_under_target.__doc__ = Api.best_under_target.__doc__.format(
    minutes=5, tasks=", ".join(TASKS), families="; ".join(FAMILIES), returns=_returns(SCHEMAS["best_under_target"]))


def _depth_method(name) -> str:
    """An importance method (``prune.METHODS``); a step method has no scores to give."""
    if catalog.is_step_method(catalog.check_method(name)):
        raise InvalidInput(f"{name} builds a model at a level and scores no layers; analyze with one of: "
                           f"{', '.join(prune.METHODS)}.")
    return name


def family_words() -> str:
    """The frontier's families in one short line: each single one, then the structures that also come with int8 and
    with int4 ("depth, paper + int8")."""
    structures = [f.removesuffix(" + int8") for f in FAMILIES if f.endswith(" + int8")]
    singles = [f for f in FAMILIES if not f.endswith((" + int8", " + int4"))]
    return f"{'; '.join(singles)}; and '<structure> + int8' or '+ int4' for {'; '.join(structures)}"


def _families(text: str) -> tuple[str, ...]:
    """The frontier's families named in ``text`` (separated by ``FAMILY_SEPARATOR``), in its order; "" for all."""
    named = [part.strip() for part in (text or "").split(FAMILY_SEPARATOR) if part.strip()]
    unknown = [name for name in named if name not in FAMILIES]
    if unknown:
        raise InvalidInput(f"Unknown family {quoted(unknown[0])}: name them from {family_words()} (separated by "
                           f"\"{FAMILY_SEPARATOR}\").")
    return tuple(f for f in FAMILIES if f in named) or FAMILIES


def _finite(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _column(recipe: Recipe, found: list[Measurement]) -> dict:
    return {"recipe": recipe.to_json() if recipe.steps else None,
            "scores": {m.name: {key: m.to_dict()[key] for key in SCORE_FIELDS} for m in found}}


def _point(point: FrontierPoint, front: set) -> dict:
    return {"label": point.label, "families": list(point.families),
            "recipe": point.recipe.to_json() if point.recipe.steps else None, "params": point.params,
            "weight_bytes": point.weight_bytes, "ms_per_token": _finite(point.ms),
            "perplexity": _finite(point.perplexity), "task": _finite(point.task), "on_front": point.recipe.key in front}


def _frontier_json(info, goal, result: FrontierResult, best: FrontierPoint) -> dict:
    front = [p for p in result.front()]
    keys = {p.recipe.key for p in front}
    named = replace(best, recipe=replace(best.recipe, origin=f"frontier: the best under {goal.words()}")) \
        if best.recipe.steps else best
    return {"model": info.name, "num_layers": info.num_layers, "target": goal.words(), "axis": result.axis,
            "task": result.task, "limit": result.limit,
            "points": [_point(p, keys) for p in result.everything()], "front": [p.label for p in front],
            "best": _point(named, keys), "verdict": target_line(result, goal, best),
            "unreached": [{"family": family, "why": why} for (family, _size), why in result.why.items()]
            + [{"family": family, "why": screened_out(p, result.screen)} for p in result.screened
               for family in p.families]}


def serve(demo: gr.Blocks, context: Context) -> None:
    """Register the public endpoints in ``demo`` (inside its ``with`` block), then hide every other event from
    the API page and MCP: "undocumented", so that the page's own frontend and scripts driving it still call them.
    Their MCP results are JSON with their schemas (``ui.mcp``)."""
    api = Api(context)
    for name in PUBLIC:
        job = gpu(user_errors(getattr(api, name)), getattr(Durations, name))
        if gr.api(job, api_name=name, **DEVICE)["api_name"] != name:
            raise RuntimeError(f"The page has an event named {name} already: Gradio would rename the endpoint.")
    for fn in demo.fns.values():
        if fn.api_name not in PUBLIC and fn.api_visibility == "public":
            fn.api_visibility = "undocumented"
    mcp.SCHEMAS.update(SCHEMAS)
    mcp.install()
