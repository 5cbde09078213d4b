"""The endpoints worth calling from a script, an agent or an MCP client: plain values in, plain JSON out, no page
state. The page's own events stay callable (its frontend and tests drive them) but leave the API page and MCP.

No ``from __future__ import annotations`` here: Gradio reads the endpoints' types from their live annotations.
"""

import gradio as gr

import prune
from evaluation.serving import check_request, Measurement, ORIGINAL, TASKS
from prune.core.errors import InvalidInput, ModelNotFound
from prune.core.recipe import Recipe

from ui import catalog, inputs
from ui.handlers import Context, owner, user_errors
from ui.page.durations import Durations
from ui.page.events import DEVICE, gpu
from ui.session import SLOTS

PUBLIC = ("analyze_model", "compare_models")  # Api's endpoints (the page has an "analyze" of its own); the API page
# lists these and nothing else, and MCP serves them as tools of the same names
SCORE_FIELDS = ("value", "unit", "spread", "spread_kind", "higher_is_better")  # what a column says of a metric


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
            {{"model", "num_layers", "method", "score_label", "calibration", "layer_scores": one per layer, lower is
            more removable, "best_blocks": [{{"layers": K, "start", "end"}}] with end exclusive}}
        """
        method = _depth_method(method)
        spec, info = self._load(model, request)
        calibration = self.context.default_calibration
        result = self.context.backend.analysis.score(spec, method, calibration=calibration, owner=owner(request))
        scores = result.to_json()
        return {"model": info.name, "num_layers": info.num_layers, "method": method,
                "score_label": result.score_label, "calibration": calibration.source,
                "layer_scores": scores["layer_scores"] or scores["block_scores"][0],
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
            {{"model", "num_layers", "tasks", "limit", "columns": {{"original" | "A" | "B": {{"recipe", "scores":
            {{metric: {{"value", "unit", "spread", "spread_kind", "higher_is_better"}}}}}}}}}}
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


# The choices each docstring names (Gradio reads them as the endpoints' documentation and MCP tools' descriptions)
Api.analyze_model.__doc__ = Api.analyze_model.__doc__.format(methods=", ".join(prune.METHODS))
Api.compare_models.__doc__ = Api.compare_models.__doc__.format(tasks=", ".join(TASKS))


def _depth_method(name) -> str:
    """An importance method (``prune.METHODS``); a step method has no scores to give."""
    if catalog.is_step_method(catalog.check_method(name)):
        raise InvalidInput(f"{name} builds a model at a level and scores no layers; analyze with one of: "
                           f"{', '.join(prune.METHODS)}.")
    return name


def _column(recipe: Recipe, found: list[Measurement]) -> dict:
    return {"recipe": recipe.to_json() if recipe.steps else None,
            "scores": {m.name: {key: m.to_dict()[key] for key in SCORE_FIELDS} for m in found}}


def serve(demo: gr.Blocks, context: Context) -> None:
    """Register the public endpoints in ``demo`` (inside its ``with`` block), then hide every other event from
    the API page and MCP: "undocumented", so that the page's own frontend and scripts driving it still call them."""
    api = Api(context)
    for name in PUBLIC:
        job = gpu(user_errors(getattr(api, name)), getattr(Durations, name))
        if gr.api(job, api_name=name, **DEVICE)["api_name"] != name:
            raise RuntimeError(f"The page has an event named {name} already: Gradio would rename the endpoint.")
    for fn in demo.fns.values():
        if fn.api_name not in PUBLIC and fn.api_visibility == "public":
            fn.api_visibility = "undocumented"

