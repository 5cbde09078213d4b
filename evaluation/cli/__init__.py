"""The command line (the seed's ``benchmark.py``, kept compatible): benchmark the original and a cut.

Modes (one of):
  --full                                        the unpruned model only
  --personalized --start_block S --end_block E  cut layers S…E, E inclusive ("last layer that will be cut")
  --persistence                                 the zigzag-persistence cuts "10%" and "20%" (r ≥ 0.9 / 0.8·max r)
      [--zigzag_output FILE [--dry_run] [--num_hidden_layers N]]   … read from the authors' CSV
  --method NAME --num_layers K [--selection paper|block]
                                                K layers by any method: as its paper picks them (default), or
                                                the best contiguous block (sleb: its first K greedy removals,
                                                printed step by step)
  --method sublayer --num_layers N --drop attention|mlp   drop the N lowest-scored attention (or MLP) blocks
  --sweep K                                     every block of K layers measured, beside each method's ranking
  --sparsity_sweep [--levels 0,0.1,0.5,0.9,0.99] [--methods magnitude,wanda,sparsegpt]
                                                the first --task and WikiText-2 perplexity at each sparsity level
  --frontier [METHOD] [--axis bytes|params|ms] [--sizes 90,80,70]
             [--target bytes=0.8|bytes=400MiB|ms=20|params=0.8]
                                                every family's best candidate at each size (depth cuts by METHOD,
                                                default block_influence), measured on WikiText-2 and the first
                                                --task; sizes are the weights' bytes as stored unless --axis says
                                                otherwise; with --target, the best model under it that is smaller
                                                in bytes or faster than the original (--export_dir saves it)
  --rank_search feature|weight [--search_on wikitext2|TASK] [--tolerance T] [--search_limit N] [--search_layers N]
                                                surgical rank search of the last N layers' projections, then the
                                                searched model compared like a cut
  --recipe FILE                                 the recipe an export recorded (its folder, layercut.json or
                                                config.json), on --model or else the model its layercut.json names

With a cut mode (or a step), --explain compares each compressed model with the original on a small fixed
slice of the calibration text (perplexity of both, mean KL and top-1 next-token agreement) instead of
running the tasks; it writes ``explain.json``.

After the chosen cut (or, with --full, on the original) one more step may follow:
  --patch lstsq|cosine                          replace the cut block by one linear map folded into the layer
                                                before it (ReplaceMe; after a depth cut only, no training)
  --sparsify METHOD (--sparsity F | --pattern 2:4|4:8)   zero a fraction of every matrix (magnitude, wanda, sparsegpt)
  --width RATIO                                 remove heads and MLP channels until RATIO of the parameters stay
  --decompose feature|weight --param_ratio R    factor every projection at low rank until R of the parameters stay
  --heal lora|last_layers [--heal_steps N] [--heal_budget_s S] [--heal_teacher forward_kl|reverse_kl]
                                                retrain briefly on WikiText-2 *validation* (after another step only),
                                                on its tokens or distilled from the original; prints WikiText-2
                                                *test* perplexity before and after healing
  --quantize int8|int4 [--quant_group G]        last: every decoder matrix in int8 or int4 weights (torchao)
(several: the patch, then width, then low rank, then sparsity, then healing, then quantization).

--model takes a Hub id, a folder, a .gguf file or a Hub GGUF as owner/repo/file.gguf (dequantized once, cached).

--speed adds speed and memory as the page measures them to a comparison's report: batch-1 prefill and decode (ms,
tokens/s), the bytes each decoded token reads, the floor at this device's measured bandwidth and the share of it
reached, weight and peak memory, checkpoint size; also written to ``speed_memory.json``.

Writes ``results_<mode>.json`` (lm-eval style), ``comparison.md`` and ``comparison.csv`` to
``--output_folder``; exits with status 2 and a one-line reason on bad input.

Examples::

    python -m evaluation.cli --full --task arc_easy,piqa --limit 200
    python -m evaluation.cli --method sublayer --num_layers 10 --drop attention --task hellaswag
    python -m evaluation.cli --method angular --num_layers 4 --sparsify wanda --sparsity 0.5
    python -m evaluation.cli --full --quantize int4 --task arc_easy --limit 100 --speed
    python -m evaluation.cli --personalized --start_block 15 --end_block 20 --explain
    python -m evaluation.cli --sparsity_sweep --task arc_easy --limit 100 --methods magnitude,wanda
    python -m evaluation.cli --frontier --task hellaswag --limit 200 --target bytes=0.5
    python -m evaluation.cli --rank_search feature --search_layers 4 --task arc_easy --limit 200
    layercut-benchmark --personalized --start_block 20 --end_block 25 --task hellaswag --export_dir ./cut
    layercut-benchmark --recipe ./cut --task hellaswag      # the same cut again, from the export's recipe
    layercut-benchmark --personalized --start_block 15 --end_block 21 --quantize int8 --export_dir ./cut --gguf Q8_0

Beyond one machine, ``--export_dir`` gives a normal Hugging Face folder for the usual engines, and prints (and
saves as SCALE_OUT.md beside it) the exact ``accelerate launch -m lm_eval`` and ``lm_eval --model vllm`` commands
that evaluate it on many GPUs, with the tensor-parallel sizes vLLM accepts for its shapes
(``evaluation/exports/scale_out.py``).

(offline, add ``--include_path ~/.cache/layercut/tasks/<fingerprint> --tasks layercut_hellaswag``:
the converted local tasks this command prepared).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import reduce
from pathlib import Path

import prune
from prune.core.surgery import largest_cut
from prune.core.errors import InvalidCut, InvalidInput, LayerCutError, quoted
from prune.depth.methods import METHODS, options_for_cut, sleb
from prune.core.paths import safe_name
from prune.core.calibration import BOS_CHOICES, Calibration
from prune.core.family import FAMILIES, step_families
from prune.lowrank.decomposition import SPACES
from prune.core.recipe import Recipe
from prune.depth.selection import LAYERS, SELECTIONS, check_remove, chosen_recipe
from prune.sparsity.masks import METHODS as SPARSITY_METHODS

from evaluation.exports import recipe_file
from evaluation.quality import lm_eval_adapter
from evaluation.exports import scale_out, zigzag_csv as zigzag_output
from evaluation.exports.gguf_out import GGUF_TYPES
from evaluation.frontier.plan import (AXES, DEFAULT_AXIS, DEFAULT_METHOD, DEFAULT_SIZES, check_plan, check_sizes,
                                      check_target)
from evaluation.serving.backend import Backend
from evaluation.measure.measurement import ORIGINAL, PRUNED, to_csv, to_markdown
from evaluation.core.pool import ModelSpec
from evaluation.sweeps.search_splits import WIKITEXT, format_search
from evaluation.sweeps.sparsity import DEFAULT_LEVELS
from evaluation.cli import tasks
from evaluation.cli import output
from evaluation.core.settings import BATCH_SIZE, PERPLEXITY, RANK_SEARCH

DEFAULT_TASKS = "arc_easy"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layercut-benchmark", description="Benchmark a model and a depth-pruned version of it with lm-eval.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Tasks: {', '.join((*lm_eval_adapter.TASKS, *tasks.TASKS))} (cbt_style_*: CBT-style, not CBT; "
               "c4: perplexity by SparseGPT's and Wanda's rule; mt_bench: FastChat's judged answers).\n"
               f"Methods: {', '.join(METHODS)}.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--full", action="store_true", help="evaluate the unpruned model")
    mode.add_argument("--personalized", action="store_true", help="cut layers --start_block … --end_block")
    mode.add_argument("--persistence", action="store_true",
                      help="the zigzag-persistence cuts \"10%%\" and \"20%%\": layers with r ≥ 0.9 / 0.8·max r, "
                           "however many")
    mode.add_argument("--method", metavar="NAME", help="cut --num_layers layers chosen by this method")
    mode.add_argument("--sweep", type=int, metavar="K",
                      help="measure every block of K layers on the first --task, and how well each method predicts it")
    mode.add_argument("--sparsity_sweep", action="store_true",
                      help="the first --task and WikiText-2 perplexity at each of --levels, for each of --methods")
    mode.add_argument("--frontier", nargs="?", const=DEFAULT_METHOD, default=None, metavar="METHOD",
                      help="every family's best candidate at each of --sizes, measured (depth cuts by METHOD, default "
                           f"{DEFAULT_METHOD}); with --target, the best model under it")
    mode.add_argument("--rank_search", choices=SPACES, default=None,
                      help="search each projection's rank (Chavan et al. 2024), then compare the searched model")
    mode.add_argument("--recipe", metavar="FILE", default=None,
                      help="evaluate the recipe an export recorded: its folder, layercut.json or config.json "
                           "(on --model, else on the model its layercut.json names)")
    parser.add_argument("--search_on", default=WIKITEXT,
                        help=f"with --rank_search: {WIKITEXT} (perplexity) or a task (accuracy; default {WIKITEXT})")
    parser.add_argument("--tolerance", type=float, default=RANK_SEARCH.tolerance,
                        help="with --rank_search: %% perplexity growth allowed per projection, or accuracy points "
                             f"below the original (default {RANK_SEARCH.tolerance:g})")
    parser.add_argument("--search_limit", type=int, default=RANK_SEARCH.limit,
                        help="with --rank_search: WikiText-2 windows of 256 tokens, or task documents, split "
                             f"20 %% search / 80 %% test (default {RANK_SEARCH.limit}; 0 = all)")
    parser.add_argument("--search_layers", type=int, default=None,
                        help="with --rank_search: search the last N layers (default: all)")
    parser.add_argument("--start_block", type=int, help="first layer that will be cut (0-based)")
    parser.add_argument("--end_block", type=int, help="last layer that will be cut (inclusive)")
    parser.add_argument("--num_layers", type=int, help="how many layers --method cuts")
    parser.add_argument("--selection", default="paper", choices=list(SELECTIONS),
                        help="paper: as the method's paper picks them (ShortGPT, Shortened LLaMA: the K least "
                             "important layers anywhere; angular distance: a block); block: the best contiguous block")
    parser.add_argument("--bos", default="auto", choices=list(BOS_CHOICES),
                        help="prepend BOS to calibration windows (auto: when the tokenizer adds one, e.g. Gemma)")
    for family in FAMILIES.values():  # each family's own options, with their help, as it declares them
        for option in family.options:
            parser.add_argument(option.flag, **option.keywords)
    parser.add_argument("--levels", default=None,
                        help="with --sparsity_sweep: comma-separated fractions "
                             f"(default {output.joined(DEFAULT_LEVELS)})")
    parser.add_argument("--methods", default=None,
                        help=f"with --sparsity_sweep: comma-separated methods (default {','.join(SPARSITY_METHODS)})")
    parser.add_argument("--axis", default=None, choices=list(AXES),
                        help="with --frontier: sizes as fractions of the weights' bytes as stored (what a device holds "
                             "and reads; the default), of the parameters not zero (zeros stored densely save no bytes "
                             "and no time) or of the measured decode latency")
    parser.add_argument("--sizes", default=None,
                        help=f"with --frontier: comma-separated fractions or percents (default "
                             f"{output.joined(DEFAULT_SIZES)})")
    parser.add_argument("--target", default=None, metavar="AXIS=VALUE",
                        help="with --frontier: the best model under bytes=0.8 (or 80%%: of the original's bytes as "
                             "stored), bytes=400MiB (or 1.5GiB), ms=20 (per token) or params=0.8 (not zero); its axis "
                             "is the frontier's. On bytes and ms a model neither smaller in bytes nor faster than "
                             "the original (sparsity stored densely) is never the best")
    parser.add_argument("--ppl_seq_len", type=int, default=PERPLEXITY.seq_len,
                        help="with --sparsity_sweep, --frontier or --heal: tokens per WikiText-2 perplexity window "
                             f"(default {PERPLEXITY.seq_len})")
    parser.add_argument("--ppl_windows", type=int, default=PERPLEXITY.windows,
                        help="with --sparsity_sweep, --frontier or --heal: WikiText-2 perplexity windows (default "
                             f"{PERPLEXITY.windows})")
    parser.add_argument("--model", default=None,
                        help="Hugging Face id or folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--task", default=DEFAULT_TASKS, help=f"comma-separated tasks (default {DEFAULT_TASKS})")
    parser.add_argument("--limit", type=int, default=None,
                        help="examples per task (per subject for mmlu; c4: windows; mt_bench: the first questions, "
                             "default one of each category; default: all)")
    parser.add_argument("--num_fewshot", type=int, default=0, help="few-shot examples (offline: arc_*, mmlu only)")
    parser.add_argument("--batch_size", type=int, default=BATCH_SIZE)
    parser.add_argument("--output_folder", default="results", help="where results and tables go (default ./results)")
    parser.add_argument("--token", default=None, help="Hugging Face token for gated models")
    parser.add_argument("--data_dir", default=None,
                        help="benchmark data folder (default $LAYERCUT_DATA_DIR or ../shared/benchdata; '' = the hub)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--dtype", default=None, help="auto, float32, bfloat16, float16")
    parser.add_argument("--memory_budget", default=None, metavar="AMOUNT",
                        help="memory the weights may take, e.g. 20GiB (default: $LAYERCUT_MEMORY_BUDGET, else what is "
                             "free); a larger model is read from its safetensors files layer by layer")
    parser.add_argument("--seed", type=int, default=0, help="0 = lm-eval's default seeds")
    parser.add_argument("--scorer", default=lm_eval_adapter.DEFAULT_SCORER, choices=sorted(lm_eval_adapter.SCORERS),
                        help="fast: each context run once (same log-likelihoods as hflm); hflm: lm-eval's own")
    parser.add_argument("--no_cache", action="store_true", help="neither read nor write the results cache")
    parser.add_argument("--explain", action="store_true",
                        help="instead of tasks: perplexity, mean KL and top-1 agreement with the original on a small "
                             "slice of the calibration text (with a cut mode or a step)")
    parser.add_argument("--speed", action="store_true",
                        help="also measure speed and memory as the page does (batch-1 prefill and decode with the "
                             "bytes each token reads, the floor at this device's bandwidth and the share of it "
                             "reached; weight memory, peak memory, checkpoint size) into the report and "
                             "speed_memory.json")
    parser.add_argument("--export_dir", default=None, help="save the pruned checkpoint (a normal HF folder) here")
    parser.add_argument("--gguf", default=None, choices=GGUF_TYPES,
                        help="with --export_dir: also write the model as one GGUF file of this type in the folder")
    tasks.add_arguments(parser)
    zigzag_output.add_arguments(parser)
    return parser


class _Printer:
    """Progress on stderr: one line per new message or 5% step."""

    def __init__(self):
        self._last = (None, -1.0)

    def __call__(self, fraction: float, message: str = "") -> None:
        message = message or ""
        if message != self._last[0] or fraction - self._last[1] >= 0.05:
            print(f"[{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)
            self._last = (message, fraction)


def check_mode(args) -> None:
    """What can be checked before loading a model."""
    if args.personalized:
        if args.start_block is None or args.end_block is None:
            raise InvalidInput("--personalized needs --start_block and --end_block (the last layer cut, inclusive).")
    elif args.method is not None:
        if args.method not in METHODS:
            raise InvalidInput(f"Unknown method {quoted(args.method)}. Known methods: {', '.join(METHODS)}.")
        if args.num_layers is None or args.num_layers < 1:
            raise InvalidInput("--method needs --num_layers K ≥ 1 (how many layers to cut).")
    if args.drop and args.method is None:
        raise InvalidInput("--drop needs --method sublayer --num_layers N (the blocks come from its scores).")
    if args.drop:
        check_remove(args.drop, args.method)
    adding = adds_step(args)
    for family in FAMILIES.values():
        if family.check_args is not None:
            family.check_args(args)
    if adding and (args.sweep is not None or args.sparsity_sweep or args.frontier is not None):
        flags = [f.flag for f in FAMILIES.values() if f.flag]
        raise InvalidInput(f"{', '.join(flags[:-1])} and {flags[-1]} add a step to a compared model: not with "
                           "--sweep, --sparsity_sweep or --frontier.")
    if args.frontier is not None:
        check_frontier(args)
    elif args.axis or args.sizes or args.target:
        raise InvalidInput("--axis, --sizes and --target go with --frontier.")
    if (args.levels is not None or args.methods is not None) and not args.sparsity_sweep:
        raise InvalidInput("--levels and --methods go with --sparsity_sweep.")
    search_options = (args.search_on != WIKITEXT or args.tolerance != RANK_SEARCH.tolerance
                      or args.search_limit != RANK_SEARCH.limit or args.search_layers is not None)
    if search_options and args.rank_search is None:
        raise InvalidInput("--search_on, --tolerance, --search_limit and --search_layers go with --rank_search.")
    if args.rank_search is not None and (args.search_limit < 0 or args.tolerance < 0 or
                                         (args.search_layers is not None and args.search_layers < 1)):
        raise InvalidInput("--search_limit and --tolerance are at least 0, --search_layers at least 1.")
    if args.explain and (args.sweep is not None or args.sparsity_sweep or args.export_dir or
                         (args.full and not adding)):
        raise InvalidInput("--explain compares a compressed model with the original: use it with a cut mode "
                           "(--personalized, --method, --persistence, --rank_search) or a step, without --sweep, "
                           "--sparsity_sweep or --export_dir.")
    if args.speed and (args.sweep is not None or args.sparsity_sweep or args.frontier is not None or args.explain):
        raise InvalidInput("--speed adds speed and memory rows to a comparison (--full, a cut mode, a step or "
                           "--recipe); the frontier times every candidate itself, and sweeps and --explain do not.")
    if args.gguf and not args.export_dir:
        raise InvalidInput("--gguf goes with --export_dir.")
    if args.full and args.export_dir and not adding:
        raise InvalidInput("--export_dir saves a pruned model: use it with a cut or a step, not --full alone.")
    if args.batch_size < 1:
        raise InvalidInput("--batch_size must be at least 1.")
    tasks.check(args)


def check_frontier(args) -> None:
    """--frontier's options, checked before anything loads (``args.target`` becomes a Target)."""
    if args.frontier not in METHODS:
        raise InvalidInput(f"Unknown method {quoted(args.frontier)} for --frontier. "
                           f"Known methods: {', '.join(METHODS)}.")
    if args.target is not None:
        args.target = check_target(args.target)
        if args.axis not in (None, args.target.axis):
            raise InvalidInput(f"--target {args.target.axis}=… measures by {args.target.axis}: leave out --axis.")
    check_plan(args.axis or DEFAULT_AXIS, DEFAULT_SIZES if args.sizes is None else check_sizes(args.sizes),
               args.frontier)
    if args.export_dir and args.target is None:
        raise InvalidInput("--frontier saves a model with --target (the best under it) and --export_dir.")
    if args.explain:
        raise InvalidInput("--explain compares chosen cuts: not with --frontier.")


def _personalized_layers(start: int, end_inclusive: int, num_layers: int) -> list[int]:
    """Layers S…E (E inclusive), checked in the seed's terms."""
    if not (0 <= start <= end_inclusive < num_layers) or end_inclusive - start + 1 > largest_cut(num_layers):
        raise InvalidCut(f"Cannot cut layers {start}…{end_inclusive} (--end_block is inclusive): the model has "
                         f"layers 0…{num_layers - 1} and at least one must remain.")
    return list(range(start, end_inclusive + 1))


def adds_step(args) -> bool:
    """Whether a family's flag adds a step to the compared models."""
    return any(getattr(args, option.dest) is not None for f in FAMILIES.values() if f.flag for option in f.options[:1])


def extra_steps(args, calibration: Calibration, data_dir=None) -> list:
    """The checked steps the families' flags ask for, in the order they apply."""
    return [item for item in (f.from_args(args, calibration, data_dir) for f in step_families()) if item is not None]


def _with_steps(cuts: dict[str, Recipe], steps: list) -> dict[str, Recipe]:
    """Each compared recipe followed by ``steps`` (with --full: the original followed by them)."""
    if not steps:
        return cuts
    suffix = "_".join(safe_name(s.short()) for s in steps)
    if not cuts:
        origin = "--full with " + " and ".join(s.short() for s in steps)
        return {suffix: reduce(Recipe.then, steps, Recipe(origin=origin))}
    return {f"{mode}_{suffix}": reduce(Recipe.then, steps, recipe) for mode, recipe in cuts.items()}


def _cuts(args, backend: Backend, spec: ModelSpec, info, progress) -> dict[str, Recipe]:
    """Mode name → the recipe it compares (none for --full)."""
    if args.full:
        return {}
    if args.personalized:
        layers = _personalized_layers(args.start_block, args.end_block, info.num_layers)
        return {"personalized": Recipe.cut(info.num_layers, layers, origin="chosen by hand")}
    if args.persistence:
        return zigzag_output.persistence_cuts(args, backend, spec, info.num_layers, progress)
    calibration = output.calibration_of(args, backend)
    if args.rank_search:
        return {"rank_search": _searched(args, backend, spec, info, calibration, progress)}
    method = METHODS[args.method]
    result = backend.analysis.score(spec, args.method, calibration=calibration, progress=progress,
                             **options_for_cut(method, args.num_layers))
    progress(1.0, f"{method.label}: {result.timing()}.")
    if "removal_order" in result.params:  # a greedy order: show how its cut was built
        print("\n".join(sleb.step_lines(result)), flush=True)
    name = f"{args.method}-{args.drop}" if args.drop else args.method
    return {name: chosen_recipe(result, args.num_layers, args.selection, origin=method.label,
                                remove=args.drop or LAYERS)}


def _recorded_model(recorded: recipe_file.RecipeFile | None) -> str | None:
    """The base model a --recipe file names, said on stderr (used only without --model)."""
    if recorded is None or recorded.base_model is None:
        return None
    print(f"layercut-benchmark: --recipe: on {recorded.base_model}, the model {recorded.path.name} names "
          f"(--model chooses another)", file=sys.stderr)
    return recorded.base_model


def _searched(args, backend: Backend, spec: ModelSpec, info, calibration: Calibration, progress) -> Recipe:
    """--rank_search: the search's table printed; the recipe of the searched model."""
    layers = None if args.search_layers is None else range(max(0, info.num_layers - args.search_layers),
                                                            info.num_layers)
    done = None
    for done in backend.training.rank_search(spec, space=args.rank_search, criterion=args.search_on,
                                             tolerance=args.tolerance,
                                    limit=args.search_limit or None, layers=layers, calibration=calibration,
                                    progress=progress):
        pass
    print(format_search(done.result, args.search_on), flush=True)
    if done.recipe is None:
        raise InvalidInput("The rank search lowered no projection within the tolerance: nothing to compare. "
                           "Allow a larger --tolerance.")
    return done.recipe


def run(args, progress=None) -> Path | None:
    """Run one invocation; returns the output folder."""
    check_mode(args)
    if zigzag_output.handled_early(args):  # --dry_run: the cuts are printed; nothing is loaded or evaluated
        return None
    progress = progress or _Printer()
    recorded = recipe_file.read(args.recipe) if args.recipe else None  # checked before anything loads
    backend = Backend(data_dir=args.data_dir, device=args.device, model_budget_bytes=args.memory_budget)
    standard, own = tasks.split(args.task)
    request = None if own and not standard else lm_eval_adapter.check_request(
        standard, num_fewshot=args.num_fewshot, limit=args.limit, data_dir=backend.models.data_dir)
    judged = tasks.prepare(args, backend)  # C4's shard, MT-Bench's data and judge: before the model loads
    out_dir = Path(args.output_folder).expanduser().resolve()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InvalidInput(f"Cannot create the output folder {out_dir}: {err.strerror}.") from None
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
    cuts = _with_steps(recorded.cuts(info.num_layers) if recorded else _cuts(args, backend, spec, info, progress),
                       steps)
    for mode, recipe in cuts.items():
        progress(0.0, f"{mode}: {info.describe_cut(recipe)} removed")
        if recipe.depth_cut and 2 * len(recipe.depth_cut.layers) > info.num_layers:
            print(f"layercut-benchmark: warning: the {mode} cut removes more than half of the layers "
                  f"({len(recipe.depth_cut.layers)} of {info.num_layers}).", file=sys.stderr)
    if args.explain:
        return output.explain_report(args, backend, spec, info, cuts, out_dir, progress)
    config = {"model": info.name, "num_layers": info.num_layers, "device": info.device, "dtype": info.dtype,
              "tasks": [*standard, *own], "limit": args.limit, "num_fewshot": args.num_fewshot,
              "batch_size": args.batch_size, "scorer": args.scorer, "seed": args.seed,
              "data_dir": str(backend.models.data_dir) if backend.models.data_dir else "hub",
              "layercut_version": prune.__version__, "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if judged is not None:
        config["mt_bench"] = {**judged.judge.to_json(), "turns": judged.turns, "questions": len(judged.questions)}
    results = {label: {} for label in (ORIGINAL, *cuts)} if request is None else backend.measure.benchmark_results(
        spec, cuts, request, batch_size=args.batch_size, scorer=args.scorer, seed=args.seed,
        use_cache=not args.no_cache, progress=progress)
    judged_report = tasks.run(args, backend, spec, cuts, results, judged, info, out_dir, progress)
    output.write_json(out_dir / "results_full.json",
                output.results_json(results[ORIGINAL], {**config, "mode": "full", "removed_layers": []}))
    measurements = lm_eval_adapter.to_measurements(results[ORIGINAL], model=ORIGINAL)
    for mode, recipe in cuts.items():
        output.write_json(out_dir / f"results_{mode}.json", output.results_json(results[mode], {
            **config, "mode": mode, "removed_layers": list(recipe.depth_cut.layers) if recipe.depth_cut else [],
            "dropped_blocks": output.dropped_blocks(recipe), "cut": recipe.describe(),
            "recipe": recipe.to_json(),
            "params_removed_pct": round(100 * info.removed_params(recipe) / info.num_params, 3)}))
        label = PRUNED if len(cuts) == 1 else mode
        measurements += lm_eval_adapter.to_measurements(results[mode], model=label)
    if args.speed:
        labelled = {PRUNED if len(cuts) == 1 else mode: recipe for mode, recipe in cuts.items()}
        timed = output.speed_and_memory(backend, spec, labelled, progress)
        output.write_json(out_dir / "speed_memory.json", {"config": {**config, **output.SPEED},
                                                          "measurements": [m.to_dict() for m in timed]})
        measurements += timed
    for mode, recipe in cuts.items() if args.export_dir else ():
        target = Path(args.export_dir).expanduser().resolve()
        saved = backend.exports.write(spec, recipe, target / mode if len(cuts) > 1 else target,
                               scores=[m for m in measurements if m.model in (ORIGINAL, PRUNED, mode)], gguf=args.gguf)
        progress(1.0, f"Saved the {mode} checkpoint to {saved}")
        print(scale_out.scale_out(str(saved), json.loads((saved / "config.json").read_text()), recipe).markdown())

    header = f"# LayerCut comparison\n\nModel: {info.name} ({info.num_layers} layers)\n\n"
    header += "".join(f"- {mode}: {recipe.describe()}\n" for mode, recipe in cuts.items())
    table = to_markdown(measurements)
    (out_dir / "comparison.md").write_text(header + "\n" + table + ("\n" + judged_report if judged_report else ""))
    (out_dir / "comparison.csv").write_text(to_csv(measurements))
    print(table)
    if judged_report:
        print(judged_report)
    if args.heal:
        output.print_healing(args, backend, spec, cuts)
    print(f"Results in {out_dir}", file=sys.stderr)
    return out_dir


def main(argv: list[str] | None = None) -> int:
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

