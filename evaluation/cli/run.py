"""Running one parsed command: its flags checked and its data, tasks, model and steps named before anything loads,
then the mode's report or the comparison; ``main`` says LayerCut's errors in one line with exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import prune
from prune.core.errors import InvalidInput, LayerCutError
from prune.core.recipe import Recipe

from evaluation.cli import comparison, cuts, output, tasks, zigzag
from evaluation.cli.checks import check_mode
from evaluation.cli.parser import build_parser
from evaluation.cli.steps import extra_steps, with_steps
from evaluation.core.pool import ModelSpec
from evaluation.exports import recipe_file
from evaluation.quality import lm_eval_adapter
from evaluation.serving.backend import Backend


def main(argv: list[str] | None = None) -> int:
    """The entry point: 0 when done, 2 with a one-line reason on bad input, 130 when interrupted."""
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except LayerCutError as err:
        print(f"layercut-benchmark: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("layercut-benchmark: interrupted", file=sys.stderr)
        return 130
    return 0


def run(args, progress=None) -> Path | None:
    """Run one invocation; returns the output folder."""
    check_mode(args)
    if zigzag.dry_run(args):  # --dry_run: the cuts are printed; nothing is loaded or evaluated
        return None
    progress = progress or _Printer()
    recorded = recipe_file.read(args.recipe) if args.recipe else None  # checked before anything loads
    backend = Backend(data_dir=args.data_dir, device=args.device, model_budget_bytes=args.memory_budget)
    request = _lm_eval_request(args, backend)
    judged = tasks.prepare(args, backend)  # C4's shard, MT-Bench's data and judge: before the model loads
    out_dir = _output_folder(args.output_folder)
    spec = ModelSpec(name=args.model or _recorded_model(recorded) or prune.DEFAULT_MODEL, dtype=args.dtype or "auto",
                     token=args.token)
    steps = extra_steps(args, output.calibration_of(args, backend),
                        backend.models.data_dir)  # checked before the model loads
    if args.sparsity_sweep:
        return output.sparsity_sweep_report(args, backend, spec, request, out_dir, progress)
    if args.frontier is not None:
        return output.frontier_report(args, backend, spec, request, out_dir, progress)
    info = backend.models.load(spec, progress=progress)
    if args.sweep is not None:
        return output.sweep_report(args, backend, spec, request, out_dir, progress)
    compared = with_steps(recorded.cuts(info.num_layers) if recorded else cuts.chosen(args, backend, spec, info,
                                                                                      progress), steps)
    _announce(compared, info, progress)
    if args.explain:
        return output.explain_report(args, backend, spec, info, compared, out_dir, progress)
    return comparison.compare(args, backend, spec, info, compared, request, judged, out_dir, progress)


class _Printer:
    """Progress on stderr: one line per new message or 5% step."""

    def __init__(self):
        self._last = (None, -1.0)

    def __call__(self, fraction: float, message: str = "") -> None:
        message = message or ""
        if message != self._last[0] or fraction - self._last[1] >= 0.05:
            print(f"[{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)
            self._last = (message, fraction)


def _lm_eval_request(args, backend: Backend):
    """lm-eval's checked request for its tasks among --task (None when only LayerCut's own are asked)."""
    standard, own = tasks.split(args.task)
    return None if own and not standard else lm_eval_adapter.check_request(
        standard, num_fewshot=args.num_fewshot, limit=args.limit, data_dir=backend.models.data_dir)


def _output_folder(folder: str) -> Path:
    """--output_folder, made now: a folder that cannot be made fails before any model loads."""
    out_dir = Path(folder).expanduser().resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidInput(f"Cannot create the output folder {out_dir}: {err.strerror}.") from None
    return out_dir


def _recorded_model(recorded: recipe_file.RecipeFile | None) -> str | None:
    """The base model a --recipe file names, said on stderr (used only without --model)."""
    if recorded is None or recorded.base_model is None:
        return None
    print(f"layercut-benchmark: --recipe: on {recorded.base_model}, the model {recorded.path.name} names "
          f"(--model chooses another)", file=sys.stderr)
    return recorded.base_model


def _announce(compared: dict[str, Recipe], info, progress) -> None:
    """What each compared model removes, and a warning when a cut removes more than half of the layers."""
    for mode, recipe in compared.items():
        progress(0.0, f"{mode}: {info.describe_cut(recipe)} removed")
        if recipe.depth_cut and 2 * len(recipe.depth_cut.layers) > info.num_layers:
            print(f"layercut-benchmark: warning: the {mode} cut removes more than half of the layers "
                  f"({len(recipe.depth_cut.layers)} of {info.num_layers}).", file=sys.stderr)
