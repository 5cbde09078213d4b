"""The command line's flags, one short builder per group (modes, rank search, the cut, the families' steps, sweeps
and frontier, model and data, what else to measure and save), added in the order ``--help`` and docs/cli.md show."""

from __future__ import annotations

import argparse

from prune.core.calibration import BOS_CHOICES
from prune.core.family import FAMILIES
from prune.depth.methods import METHODS
from prune.depth.selection import SELECTIONS
from prune.lowrank.decomposition import SPACES
from prune.sparsity.masks import METHODS as SPARSITY_METHODS

from evaluation.cli import output, tasks, zigzag
from evaluation.core.settings import BATCH_SIZE, PERPLEXITY, RANK_SEARCH
from evaluation.engines.llama_cpp import INT4_TYPES
from evaluation.exports.gguf_file import EXPORT_TYPES, LAYERCUT, LLAMA_CPP, default_quantizer
from evaluation.frontier.plan import AXES, DEFAULT_METHOD, DEFAULT_SIZES, FAMILIES as FRONTIER_FAMILIES
from evaluation.quality import lm_eval_adapter
from evaluation.sweeps.search_splits import WIKITEXT
from evaluation.sweeps.sparsity import DEFAULT_LEVELS

DEFAULT_TASKS = "arc_easy"


def build_parser() -> argparse.ArgumentParser:
    """Every flag (what ``main`` parses and docs/gen_cli.py lists), its groups in their order."""
    parser = argparse.ArgumentParser(
        prog="layercut-benchmark", description="Benchmark a model and a depth-pruned version of it with lm-eval.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Tasks: {', '.join((*lm_eval_adapter.TASKS, *tasks.TASKS))} (cbt_style_*: CBT-style, not CBT; "
               "c4: perplexity by SparseGPT's and Wanda's rule; mt_bench: FastChat's judged answers).\n"
               f"Methods: {', '.join(METHODS)}.",
    )
    for add in (_modes, _rank_search, _cut, _family_options, _sweeps_and_frontier, _model_and_data, _extras,
                tasks.add_arguments, zigzag.add_arguments):
        add(parser)
    return parser


def _modes(parser: argparse.ArgumentParser) -> None:
    """Exactly one mode: what is compared (or swept)."""
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


def _rank_search(parser: argparse.ArgumentParser) -> None:
    """--rank_search's criterion, tolerance and scope."""
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


def _cut(parser: argparse.ArgumentParser) -> None:
    """Which layers a cut mode removes, and the calibration its analysis reads."""
    parser.add_argument("--start_block", type=int, help="first layer that will be cut (0-based)")
    parser.add_argument("--end_block", type=int, help="last layer that will be cut (inclusive)")
    parser.add_argument("--num_layers", type=int, help="how many layers --method cuts")
    parser.add_argument("--selection", default="paper", choices=list(SELECTIONS),
                        help="paper: as the method's paper picks them (ShortGPT, Shortened LLaMA: the K least "
                             "important layers anywhere; angular distance: a block); block: the best contiguous block")
    parser.add_argument("--bos", default="auto", choices=list(BOS_CHOICES),
                        help="prepend BOS to calibration windows (auto: when the tokenizer adds one, e.g. Gemma)")


def _family_options(parser: argparse.ArgumentParser) -> None:
    """Each family's own options, with their help, as it declares them."""
    for family in FAMILIES.values():
        for option in family.options:
            parser.add_argument(option.flag, **option.keywords)


def _sweeps_and_frontier(parser: argparse.ArgumentParser) -> None:
    """--sparsity_sweep's levels and methods, --frontier's axis, sizes and target, and their perplexity windows."""
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
                             f"{output.joined(DEFAULT_SIZES)}; with --target, none: only the target's size is planned)")
    parser.add_argument("--target", default=None, metavar="AXIS=VALUE",
                        help="with --frontier: the best model under bytes=0.8 (or 80%%: of the original's bytes as "
                             "stored), bytes=400MiB (or 1.5GiB), ms=20 (per token) or params=0.8 (not zero); its axis "
                             "is the frontier's. On bytes and ms a model neither smaller in bytes nor faster than "
                             "the original (sparsity stored densely) is never the best")
    parser.add_argument("--families", default=None, metavar="F;F;…",
                        help="with --frontier: the families tried, separated by ';' (default: every one, each alone "
                             "and the structural ones with int8 and int4: "
                             f"{'; '.join(FRONTIER_FAMILIES)})")
    parser.add_argument("--frontier_all", action="store_true",
                        help="with --frontier: measure every candidate in full (by default each is first screened on "
                             "a few perplexity windows, and one a rival beats beyond the screen's noise is shown as "
                             "screened out instead; points already measured come from the cache)")
    parser.add_argument("--repair", nargs=2, default=None, metavar=("kd|lora", "SECONDS"),
                        help="with --frontier: also train each structural point that long before it is quantized "
                             "(kd: LoRA distilled from the original; lora: on WikiText-2 validation), beside the "
                             "unrepaired ones (default: no repair)")
    parser.add_argument("--ppl_seq_len", type=int, default=PERPLEXITY.seq_len,
                        help="with --sparsity_sweep, --frontier or --heal: tokens per WikiText-2 perplexity window "
                             f"(default {PERPLEXITY.seq_len})")
    parser.add_argument("--ppl_windows", type=int, default=PERPLEXITY.windows,
                        help="with --sparsity_sweep, --frontier or --heal: WikiText-2 perplexity windows (default "
                             f"{PERPLEXITY.windows})")


def _model_and_data(parser: argparse.ArgumentParser) -> None:
    """The model, the tasks and how they run, the data, the device and where results go."""
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


def _extras(parser: argparse.ArgumentParser) -> None:
    """What a comparison measures instead of or beside its tasks, and what it saves."""
    parser.add_argument("--explain", action="store_true",
                        help="instead of tasks: perplexity, mean KL and top-1 agreement with the original on a small "
                             "slice of the calibration text (with a cut mode or a step)")
    parser.add_argument("--speed", action="store_true",
                        help="also measure speed and memory as the page does (batch-1 prefill and decode with the "
                             "bytes each token reads, the floor at this device's bandwidth and the share of it "
                             "reached; weight memory, peak memory, checkpoint size) into the report and "
                             "speed_memory.json")
    parser.add_argument("--engine", default=None, choices=(LLAMA_CPP,),
                        help=f"with --speed: each column's batch-1 rows in {LLAMA_CPP} too, written as a GGUF of the "
                             "type that matches its storage (F16/BF16, int8 → Q8_0, int4 → --int4_type), and its "
                             f"WikiText-2 perplexity and top-1 agreement from {LLAMA_CPP}'s logits; with --frontier: "
                             f"each point's decode timed in {LLAMA_CPP} (the latency axis as deployed on a CPU)")
    parser.add_argument("--int4_type", default=INT4_TYPES[0], choices=INT4_TYPES,
                        help=f"with --engine: the GGUF type an int4 column runs in (default {INT4_TYPES[0]})")
    parser.add_argument("--export_dir", default=None, help="save the pruned checkpoint (a normal HF folder) here")
    parser.add_argument("--gguf", default=None, choices=EXPORT_TYPES,
                        help="with --export_dir: also write the model as one GGUF file of this type in the folder ("
                             + ", ".join(t for t in EXPORT_TYPES if default_quantizer(t) == LLAMA_CPP)
                             + f": by llama.cpp's quantizer, from llama-cpp-python; the others by {LAYERCUT}'s own "
                             "writer)")
