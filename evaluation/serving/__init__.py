"""The backend's public face: everything the page (``ui/``) takes from ``evaluation/``, and nothing else.

``tests/test_layers.py`` holds the page to this module: ``ui/`` imports no other module of ``evaluation/``. What is
here is public and stays stable while the floors below move; each group says what it is for.
"""

# The backend, with its parts (``backend.models``, ``.analysis``, ``.measure``, ``.sweeps``, ``.frontier``,
# ``.explain``, ``.training``, ``.mt_bench``, ``.exports``), and the server-wide things the page holds beside it.
from evaluation.serving.backend import Backend
from evaluation.serving.downloads import Downloads
from evaluation.serving.hub import HubCheck

# The values the backend and the page exchange: a model's identity and facts, results, a stopped job.
from evaluation.core.jobs import Cancelled
from evaluation.core.pool import ModelInfo, ModelSpec
from evaluation.exports.comparison_file import MAX_BYTES as COMPARISON_BYTES, Comparison
from evaluation.frontier.result import FrontierResult, Point as FrontierPoint
from evaluation.measure.measurement import ORIGINAL, Measurement
from evaluation.quality.judge import JudgeChoice
from evaluation.serving.mt_bench import MtBenchRun
from evaluation.serving.training import LossPoint, RankSearchDone

# What a visitor may choose, and the defaults the command line shares.
from evaluation.core.settings import C4_PERPLEXITY, MT_BENCH, PERPLEXITY, RANK_SEARCH
from evaluation.exports.gguf_file import EXPORT_TYPES as GGUF_TYPES, default_quantizer as gguf_quantizer
from evaluation.frontier.compound import EXPERTS as EXPERT_FAMILY, REPAIRS, STRUCTURES as COMPOUND_STRUCTURES
from evaluation.frontier.plan import (AXES, DEFAULT_AXIS, DEFAULT_METHOD, DEFAULT_SIZES, FAMILIES, FIXED_FAMILIES,
                                      SINGLES)
from evaluation.frontier.run import SPEED as FRONTIER_SPEED
from evaluation.quality.c4 import TASK as C4_TASK
from evaluation.quality.cloze import CLOZE_TASKS
from evaluation.quality.judge import DEFAULT as DEFAULT_JUDGE, SELF_JUDGED
from evaluation.quality.lm_eval_adapter import PERCENT_METRICS, TASKS
from evaluation.serving.measure import MEMORY_PROMPT_TOKENS
from evaluation.sweeps.search_splits import PPL_SEQ_LEN as SEARCH_WINDOW, SEARCH_SHARE, WIKITEXT

# Input checked once where it enters, by the same rules as on the command line (each raises one line).
from evaluation.frontier.compound import check_repair
from evaluation.frontier.plan import check_sizes, check_target
from evaluation.quality.c4 import missing as c4_missing, shard as c4_shard
from evaluation.quality.judge import choose as choose_judge, names_a_judge, urls_allowed
from evaluation.quality.lm_eval_adapter import check_request
from evaluation.serving.mt_bench import check_request as check_mt_bench
from evaluation.sweeps.search_splits import metric_name, tolerance_for
from evaluation.sweeps.sparsity import check_plan as check_sparsity_plan

# How results read, the same in the page and the command line's reports.
from evaluation.frontier.result import FASTER, MIB, format_table as frontier_table, gains, screened_out, target_line
from evaluation.frontier.screen import Screened, Screening, format_screen, screen_windows
from evaluation.measure.measurement import comparison_rows, decimals, noise_band, noise_words, to_dataframe
from evaluation.quality.lm_eval_adapter import to_measurements
from evaluation.quality.mt_bench import (COLUMNS as MT_BENCH_COLUMNS, LOSS, OVERALL, TIE, WIN, cells as mt_bench_cells,
                                         parse_winner)
from evaluation.sweeps.sparsity import format_table as sparsity_table

# llama.cpp as a second engine: its name, the GGUF types an int4 column runs in, why a column did not run there.
from evaluation.engines.llama_cpp import INT4_TYPES, LLAMA_CPP
from evaluation.engines.llama_probe import check as llama_check  # what this machine's llama.cpp runs (once per build)
from evaluation.serving.engine import NOTE as ENGINE_NOTE

# A job's seconds said before it starts (its work over this machine's rates), and the compile's own allowance.
from evaluation.measure import estimate
from evaluation.measure.compiled import COMPILE_ALLOWANCE_S

__all__ = [
    "Backend", "Downloads", "HubCheck",
    "Cancelled", "ModelInfo", "ModelSpec", "COMPARISON_BYTES", "Comparison", "FrontierResult", "FrontierPoint",
    "ORIGINAL", "Measurement", "JudgeChoice", "MtBenchRun", "LossPoint", "RankSearchDone",
    "C4_PERPLEXITY", "MT_BENCH", "PERPLEXITY", "RANK_SEARCH", "GGUF_TYPES", "gguf_quantizer", "AXES", "DEFAULT_AXIS",
    "DEFAULT_METHOD", "DEFAULT_SIZES", "FAMILIES", "FIXED_FAMILIES", "SINGLES", "REPAIRS",
    "FRONTIER_SPEED",
    "COMPOUND_STRUCTURES", "EXPERT_FAMILY", "C4_TASK", "CLOZE_TASKS", "DEFAULT_JUDGE", "SELF_JUDGED",
    "PERCENT_METRICS", "TASKS",
    "MEMORY_PROMPT_TOKENS", "SEARCH_WINDOW", "SEARCH_SHARE", "WIKITEXT",
    "check_repair", "check_sizes", "check_target", "c4_missing", "c4_shard", "choose_judge", "names_a_judge",
    "urls_allowed", "check_request", "check_mt_bench", "metric_name", "tolerance_for", "check_sparsity_plan",
    "FASTER", "MIB", "frontier_table", "gains", "screened_out", "target_line", "Screened", "Screening",
    "screen_windows", "format_screen", "comparison_rows", "decimals", "noise_band",
    "noise_words", "to_dataframe", "to_measurements", "MT_BENCH_COLUMNS", "LOSS", "OVERALL", "TIE", "WIN",
    "mt_bench_cells", "parse_winner", "sparsity_table",
    "LLAMA_CPP", "INT4_TYPES", "ENGINE_NOTE", "llama_check",
    "estimate", "COMPILE_ALLOWANCE_S",
]
