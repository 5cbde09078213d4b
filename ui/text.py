"""Words on the page: title, explanations, example prompts, and small formatters."""

from __future__ import annotations

import html
import math

from evaluation.serving import CLOZE_TASKS, FASTER, TASKS
from prune import DEFAULT_MODEL
from prune.core.architectures import CAUSAL, KIND_WORDS, MASKED, SEQ2SEQ

NAME = "LayerCut"
TITLE = f"{NAME} — cut whole blocks of layers out of an LLM"

INTRO = (
    "**Pick** a model and an importance method, **see** which blocks of consecutive layers matter "
    "least, **drag** the range to cut one (cut **A**, and a second one as **B**), and **compare** them "
    "with the original side by side. Cutting is instant: a cut model shares the original's weights. "
    "**Width** methods (sparsity, width pruning) are picked the same way and **built** into A or B. "
    "Your comparison is yours alone: other visitors of this page do not see or change it."
)

def task_choices() -> list[tuple[str, str]]:
    """(label, name) of every benchmark task; a cloze task's label says where its questions come from."""
    return [(f"{name} ({CLOZE_TASKS[name].label})" if name in CLOZE_TASKS else name, name) for name in TASKS]


_WORDS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def example_block(num_layers: int | None) -> tuple[int, int] | None:
    """A block the loaded model has, for examples: about a fifth of the layers, near the top ([20, 26) of 30)."""
    if not num_layers or num_layers < 2:
        return None
    size = max(1, num_layers // 5)
    end = num_layers - max(1, num_layers // 7)
    return end - size, end


def index_convention(num_layers: int | None = None) -> str:
    """The index convention, with an example block of the loaded model (none before one is loaded)."""
    words = ("Layers count from **0**; a block **[start, end)** removes `start` up to but not including "
             "`end`")
    block = example_block(num_layers)
    if block is None:
        return words + "."
    start, end = block
    size = end - start
    what = f"layer {start} only" if size == 1 else (
        f"layers {start}–{end - 1}, {_WORDS[size] if size < len(_WORDS) else size} layers")
    return f"{words}: **[{start}, {end})** removes {what}."

HEATMAP_HELP = (
    "Each cell is the block of *n* layers starting at *start*. Colour is scaled per row "
    "(light yellow = most removable of that size, dark = least); ○ marks the best block of each size, ◻ the "
    "selection. **Click a cell** to select that block; hover for the raw score."
)

# What "Select the best block of N" removes: N whole layers in a row, or the N most removable
# attention / MLP blocks anywhere (needs the sub-layer method's scores).
REMOVE_CHOICES = [("whole layers", "layers"), ("attention only", "attention"), ("MLP only", "mlp")]

# (label shown, value passed to backend.models.load); any other hub id or folder can be typed in.
KNOWN_MODELS = [
    (f"{DEFAULT_MODEL} (embedded)", DEFAULT_MODEL),
    ("Llama 3.2 1B", "meta-llama/Llama-3.2-1B"),
    ("Llama 3 8B", "meta-llama/Meta-Llama-3-8B"),
    ("Llama 2 7B", "meta-llama/Llama-2-7b-hf"),
    ("Mistral 7B v0.1", "mistralai/Mistral-7B-v0.1"),
    ("Pythia 1B", "EleutherAI/pythia-1b"),
    ("Qwen2 0.5B Instruct", "Qwen/Qwen2-0.5B-Instruct"),
    ("Qwen2 1.5B", "Qwen/Qwen2-1.5B"),
]

EXAMPLE_PROMPTS = [
    "What is the capital of France?",
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about autumn leaves.",
    "List three uses of a paperclip.",
    "If I have 3 apples and eat one, how many are left?",
]

SPEED_HELP = (
    "Timed after a warm-up, under inference mode, median of the repeats (± interquartile range). *Ideal speedup*: "
    "a decode step's if time scaled with the bytes it reads (every stored weight and the KV cache), a prefill's if it "
    "scaled with the matmul FLOPs. The *floor* is those bytes over this device's measured memory bandwidth, and the "
    "*share of the bandwidth limit reached* is floor ÷ measured. Memory is VRAM on CUDA and process memory on CPU."
)

COMPILED_INFO = ("Rows marked (compiled) beside the eager ones: a static KV cache and torch.compile (CUDA graphs on a "
                 "GPU), each model's compile time a row apart. Compiling takes minutes on a CPU.")

BENCH_HELP = (
    "lm-evaluation-harness tasks run offline from local data. *Questions* takes the first N: the default 20 is "
    "quick but **noisy** (a score moves by about ±10 points by chance), so the *Noise* column says which "
    "differences chance alone could make. Results are cached: a repeated run shows at once.\n\n"
    "The `cbt_*` tasks are cloze questions scored by the sparsity study's rule: each of 10 candidates goes into the "
    "blank, its score is the mean probability of its tokens, the best is the answer (chance: 10 %). Unlike that "
    "study's code, the candidate sits in the blank and each token is read where the model predicts it. "
    "The `cbt_style_*` questions are built from the book LayerCut ships, in CBT's format: **CBT-style, not CBT**."
)

C4_HELP = (
    "*C4* is scored as SparseGPT and Wanda score it: the first 1,100 documents of allenai/c4's English validation "
    "shard, in windows of 2,048 tokens (the model's length if shorter; the window above is WikiText-2's). Offline it "
    "reads `c4/c4-validation.00000-of-00008.json.gz` from the benchmark data folder."
)


def human_count(count: float) -> str:
    """134515008 → '134.5 M'."""
    count = float(count)
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= size:
            return f"{count / size:.1f} {suffix}"
    return f"{count:.0f}"


def model_markdown(info, step_s: float | None = None) -> str:
    """The model's line in the top bar; for a model read layer by layer, where its weights are and, with ``step_s``
    (one decode step's seconds, measured when it loaded), what a pass that brings them in costs."""
    held, total, cpu = (amount / 2**30 for amount in (info.resident_bytes, info.weight_bytes, info.cpu_held_bytes))
    cost = f"; one decode step, which brings them all, took {step_s:.2f} s here" if step_s is not None else ""
    streamed = ""
    if info.resident_bytes < info.weight_bytes and not info.cpu_held_bytes:
        streamed = (f" · read from disk layer by layer ({held:.2f} of {total:.2f} GiB in memory; each pass reads the "
                    f"other {total - held:.2f} GiB from its files{cost})")
    elif info.resident_bytes < info.weight_bytes:
        files = total - held - cpu
        sources = f"{cpu:.2f} GiB from CPU memory" + (f" and {files:.2f} GiB from its files" if files >= 0.005 else "")
        streamed = (f" · moved to {info.device} layer by layer ({held:.2f} of {total:.2f} GiB there; each pass brings "
                    f"the other {sources}{cost})")
    encoder = {CAUSAL: "", MASKED: " · an encoder (masked LM): it answers cloze tasks and can be sparsified and cut; "
                                   "it generates nothing here and has no perplexity",
               SEQ2SEQ: " · an encoder-decoder: it answers cloze tasks; its layers, the encoder's then the decoder's, "
                        "can be cut and sparsified; it generates nothing here and has no perplexity"}[info.kind]
    return (f"**{info.name}** · {info.num_layers} layers · {human_count(info.num_params)} parameters · "
            f"{info.device} · {str(info.dtype).replace('torch.', '')}{streamed}{encoder}")


def no_feedback(info) -> str:
    """The feedback line's words for a cut of a model that predicts no next token."""
    return (f"No next-token feedback: {info.name} is {KIND_WORDS[info.kind]}. Compare this cut on the cloze tasks "
            "(**Benchmarks**).")


def not_generating(info) -> str:
    """The Generate tab's words for a model that generates nothing here."""
    return (f"**{info.name} is {KIND_WORDS[info.kind]}: it generates nothing here.** It fills blanks: ask it the "
            "cloze tasks (cbt_style_cn, cbt_style_ne, cbt_style_p) on the **Benchmarks** tab, and compare it cut or "
            "sparsified (angular distance, Block Influence and relative magnitude, the sparsity methods, and the "
            "sparsity sweep, in the method picker).")


def server_memory_markdown(found, turns: str = "") -> str:
    """The server's resident memory beside what the variant cache holds (``evaluation.serving.variants.ServerMemory``),
    and, once models have taken turns on the device, which are on it and what the last swap cost (``turns``)."""
    return (f"Server memory: {found.rss_bytes / 2**30:.2f} GiB resident · compressed models cached "
            f"{found.held_bytes / 2**30:.2f} of {found.budget_bytes / 2**30:.2f} GiB"
            + (f" · {turns}" if turns else ""))


def column_label(label: str, variants: dict) -> str:
    """A generation column's title: 'Original model' or 'A: cut 13–17'."""
    if label == "original":
        return "Original model"
    recipe = variants.get(label)
    return f"{label}: {recipe.short()}" if recipe else f"{label}: no cut"


def model_names(variants: dict) -> dict[str, str]:
    """Each compared model's name in a chart's legend, the same as its generation column's: {"original": "Original
    model", "A": "A: cut 13–17", …}."""
    return {label: column_label(label, variants) for label in ("original", *variants)}


DIVERGED_MARK = "▶"  # where a compressed answer leaves the original's: a sign beside the colour, never colour alone


def divergence_html(label: str, variants: dict, parts: tuple[str, str], first: int) -> str:
    """A compressed model's answer under its column's title, its text from where it leaves the original's
    highlighted and marked ▶, and a one-line legend (the page styles ``mark.lc-left``)."""
    title = html.escape(column_label(label, variants))
    before, after = (html.escape(part) for part in parts)
    words = f"{label}'s answer from token {first} on, where it leaves the original's"
    return (f'<span class="lc-title">{title}</span>\n'
            f'<div class="lc-answer">{before}<mark class="lc-left" title="{words}">{DIVERGED_MARK}\u2009{after}</mark>'
            f'</div>\n<p class="lc-legend"><mark class="lc-left">{DIVERGED_MARK} highlighted</mark> = {words}</p>')


def calibration_words(cal) -> str:
    """'WikiText-2 validation, 32 × 128 tokens' for recipe origins and the analysis line."""
    names = {"builtin": "the built-in text", "text": "your text", "file": "a text file", "wikitext2":
             "WikiText-2 validation", "hub": f"hub dataset {cal.dataset}"}
    return f"{names.get(cal.source, cal.source)}, {cal.n_samples} × {cal.seq_len} tokens"


def analysis_status(result) -> str:
    from prune import METHODS

    spec = METHODS.get(result.method)
    notes = "".join(f" {note}" for note in result.warnings)
    return f"{f'**{spec.label}**' if spec else result.method}: {result.timing()}.{notes}"


def named_cuts_label(result) -> dict:
    """The preset radio's label for an analysis with named cuts: the method that named them."""
    from prune import METHODS

    if result is None or not result.cuts:
        return {}
    spec = METHODS.get(result.method)
    return {"label": f"Cuts named by {spec.label if spec else result.method}"}


def stability_markdown(found) -> str:
    """'Best block of 5: [13, 18) wins 17 of 20 resamples (85 %); …' with the other winners' shares."""
    from prune import METHODS

    head = f"**{METHODS[found.method].label}, best block of {found.block_size}**: {found.summary()}"
    if found.resamples == 0:
        return head
    shares = ", ".join(f"[{a}, {b}) {100 * share:.0f} %" for (a, b), share in list(found.fractions.items())[:5])
    return f"{head}  \nWinners over {found.resamples} bootstrap resamples of {found.windows} windows: {shares}"


STABILITY_BUTTON = "How stable is the best block of N?"


def stability_pending(block_size) -> str:
    """What replaces a stability line measured for another N: how to measure this one."""
    return f"N is now **{block_size}**: press *{STABILITY_BUTTON}* to measure its stability."


def sweep_summary(report) -> str:
    best, worst = report.sweep.best_start(), report.sweep.worst_start()
    k = report.sweep.block_size
    text = (f"Best cut measured: **[{best}, {best + k})**; worst: **[{worst}, {worst + k})** "
            f"({report.sweep.primary_metric}, {report.sweep.limit or 'all'} questions).")
    if report.failed:
        text += " Failed: " + "; ".join(f"{m} ({why})" for m, why in report.failed.items())
    return text


def generation_stats(side: dict | None) -> str:
    """'TTFT 0.12 s · 41.3 tokens/s' under each generated text."""
    if not side:
        return ""
    parts = []
    if _number(side.get("ttft_s")):
        parts.append(f"time to first token **{side['ttft_s']:.2f} s**")
    if _number(side.get("tokens_per_s")):
        parts.append(f"**{side['tokens_per_s']:.1f}** tokens/s")
    if side.get("waiting"):
        parts.append("waits its turn: the models do not fit on the device together")
    elif not side.get("done"):
        parts.append("generating…")
    return " · ".join(parts)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def method_markdown(method) -> str:
    from prune.depth.selection import paper_rule_words

    return f"**{method.label}**: *{method.description}* ({paper_rule_words(method.name)}.)"


def options_text(options: dict) -> str:
    """A method's options as editable text: ``token=last, max_samples=4``."""
    return ", ".join(f"{name}={value}" for name, value in options.items())


def parse_options(text: str, method) -> dict:
    """``"k=5, token=mean"`` → typed options (types follow the method's defaults), each a value the method takes."""
    from prune.core.errors import InvalidInput, quoted

    defaults = method.options
    options = {}
    for item in filter(None, (part.strip() for part in (text or "").replace("\n", ",").split(","))):
        name, sep, raw = (s.strip() for s in item.partition("="))
        if not sep or not name:
            raise InvalidInput(f"Write method options as name=value, separated by commas; got {quoted(item)}.")
        if name not in defaults:
            raise InvalidInput(f"Unknown option {quoted(name)}; this method takes "
                               f"{', '.join(defaults) or 'no options'}.")
        options[name] = _typed(name, raw, type(defaults[name]))
        method.check(name, options[name])
    return options


def _typed(name: str, raw: str, kind: type):
    """``raw`` as the type of the option's default."""
    from prune.core.errors import InvalidInput, quoted

    try:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return raw.lower() in ("true", "1", "yes")
        if kind in (int, float):
            return kind(raw)
        return raw
    except ValueError:
        raise InvalidInput(f"Option {quoted(name)} must be a {_KINDS.get(kind, kind.__name__)}, "
                           f"not {quoted(raw)}.") from None


_KINDS = {bool: "true or false", int: "whole number", float: "number"}

STABILITY_HELP = (
    "How shaky is the choice? The analysis is re-scored on bootstrap resamples of its calibration "
    "windows (drawn with replacement); the share of resamples each block wins is its stability. "
    "Angular distance, Block Influence and relative magnitude reuse the stored states (seconds); "
    "PPL and Taylor+ rerun the model on every resample; SLEB reruns its whole greedy search on each (minutes)."
)

SWEEP_HELP = (
    "Removes every block of **K** consecutive layers in turn and measures the task on each cut "
    "(reusing the original's hidden states, so it costs far less than K separate runs). The dotted "
    "lines are each importance method's score for the same blocks; **ρ** is the Spearman rank "
    "correlation with the measured loss — the method with the highest ρ is the proxy to trust for "
    "this model. The cuts appear as they are measured, beside the analysis's own method; *Also rank the other "
    "methods* analyses every other one afterwards (slower the first time, cached afterwards)."
)

SPARSITY_SWEEP_HELP = (
    "Seed 004's experiment: each method zeroes every matrix of the decoder layers at each level "
    "(unstructured), then the task and WikiText-2 test perplexity are measured. 0 % is the dense model. "
    "Every point is cached, so a rerun or a stopped sweep resumes. SparseGPT takes minutes per level on a CPU."
)

RANK_SEARCH_HELP = (
    "Chavan et al. 2024's *surgical rank search*: from the last layer's last projection to the first, each "
    "projection of the original takes the lowest rank among 1, 10 %, 20 %, … of its break-even rank d·k/(d+k) "
    "whose model still scores within the tolerance on the **search split** (the first fifth of the windows or "
    "questions); the rest, the **test split**, is scored after each layer. *Tolerance*: accuracy points below the "
    "original for a task; for WikiText-2 perplexity, the % growth allowed per projection searched (the authors' "
    "1.005ⁿ is 0.5). The bases are read once on the original's activations, so the result in the edited slot "
    "rebuilds exactly. Each candidate costs one pass over the search split: on a CPU search a few layers "
    "(7 projections each). A task needs hundreds of search questions: on 20, the score is noise and everything "
    "passes; perplexity is smooth on a few windows."
)


def search_progress(points, metric: str) -> str:
    """While searching: the latest projection's rank and where the scores stand."""
    original, last = points[0], points[-1]
    if len(points) == 1:
        return f"Original: {metric} {original.search:.4g} on the search split, {original.test:.4g} on the test split."
    rank = "stays dense" if last.rank is None else f"rank {last.rank}"
    return (f"Layer {last.layer} {last.path.rpartition('.')[2]}: {rank} · {100 * last.params / original.params:.2f} % "
            f"of the parameters · search split {last.search:.4g} (original {original.search:.4g})")


def search_summary(result, metric: str, slot: str | None) -> str:
    """After the search: parameters and both splits' scores, and where the model went."""
    kept = 100 * result.params[1] / result.params[0]
    where = (f" It is now **{slot}** (*{len(result.ranks)} projections factored*): compare it under *Generate*, "
             "*Speed & memory* and *Benchmarks*." if slot else
             " No projection could be lowered within the tolerance: the slots are unchanged.")
    return (f"**Searched: {kept:.2f} % of the parameters** ({result.params[1]:,} of {result.params[0]:,}). "
            f"{metric}: search split {result.search[0]:.4g} → {result.search[1]:.4g}, held-out test split "
            f"{result.test[0]:.4g} → **{result.test[1]:.4g}**.{where}")


def divergence_markdown(report) -> str:
    """'**A** agrees on 87 % of next tokens (mean KL 0.31 nats) and leaves the original's answer at token 5 ('the').'"""
    lines = []
    for label, column in report.columns.items():
        where = ("and follows the original's answer to the end" if column.first is None else
                 f"and leaves the original's answer at token {column.first}" +
                 (f" (the original said {report.answer_tokens[column.first]!r})"
                  if column.first < len(report.answer_tokens) else " (it goes on)"))
        lines.append(f"**{label}** {column.caption()} (drift {column.mean_kl:.3f}: the mean KL in nats per token, "
                     f"fed the original's {len(report.answer_ids)}-token greedy answer) {where}.")
    return "  \n".join(lines)


LOGIT_LENS_HELP = (
    "Each row reads the residual stream after one layer (bottom: the embeddings) through the final norm and the "
    "LM head, as if the model stopped there; each cell is the most likely next token at that prompt position, "
    "coloured by its probability. The top row is the model's own prediction. Rows where the answer is already "
    "formed show how much depth the prompt needs: the layers the edited cut removes are marked ✂ on the original, "
    "and are gaps in the cut model's lens."
)


def heal_help() -> str:
    """What the repairs do, with their defaults (from ``prune.healing.train.DEFAULTS`` and ``prune.patch``)."""
    from prune.healing.train import DEFAULTS
    from prune.patch.step import CALIBRATION

    lora, last = DEFAULTS["lora"], DEFAULTS["last_layers"]
    return (
        "Repairs the edited slot's model and puts the repaired copy in the **other** slot, so the original, "
        "the unrepaired and the repaired model sit side by side (the unrepaired one is untouched; a sparse model keeps "
        f"its zeros). **LoRA** (Shortened LLaMA, Kim et al. 2024): rank {lora['rank']}, α {lora['alpha']} on every "
        f"projection, merged after {lora['steps']} steps at lr {lora['lr']:g}. **Last layers** (Lu et al. 2024): "
        f"the last {last['layers']} layers, the final norm and the LM head trained for {last['steps']} steps at lr "
        f"{last['lr']:g}. Each step is {lora['batch']} × {lora['seq_len']} tokens of WikiText-2 *validation*; its "
        f"last {lora['heldout']} windows are never trained on and give the held-out loss. A few minutes on 2 CPU "
        "cores (far fewer steps and a higher learning rate than the papers' 2 epochs of Alpaca). **The healing "
        "loss**: the text's next-token loss, or **distillation** from the original (its next-token distribution "
        "on the same text, computed without gradients): forward KL (KD, as Minitron), half KD and half the "
        "next-token loss, or reverse KL (token-level: a simplification of MiniLLM, which optimises the "
        "sequence-level reverse KL on the student's own samples); the curve's training loss is then that "
        "divergence, the held-out loss still the next-token loss. **Linear patch** (ReplaceMe, Shopkhoev et al. "
        "2025; a depth cut only): the removed block is replaced by one linear map, fitted on "
        f"{CALIBRATION['n_samples']} × {CALIBRATION['seq_len']} tokens of the calibration text (least squares: no "
        "training, seconds) and folded into the MLP down projection of the layer before the cut, so the model keeps "
        "its architecture and exports load in plain transformers; Gemma 2 and 3 are refused (a norm sits after "
        "their MLP). Afterwards the three columns' WikiText-2 *test* perplexity is measured (never trained on); "
        "zero-shot tasks are under *Benchmarks*. Steps 0: the method's default; budget 0: none."
    )


def heal_objective(options: dict) -> str:
    """What a heal's training loss is, for its curve."""
    from prune.healing.distill import NAMES

    if "teacher" not in options:
        return "next-token loss"
    ratio = options["kd_ratio"]
    share = "" if ratio == 1 else f" × {ratio:g} + next-token loss × {1 - ratio:g}"
    return f"{NAMES[options['teacher']]} to the original{share}"


def patch_started(step, source: str, target: str) -> str:
    return f"Patching {source}'s cut into {target}: {step.describe()}…"


def patch_refused(source: str, err: Exception) -> str:
    """The status line when the patch could not be made: why, in one line (the other slot is left as it was)."""
    return f"**{source}'s cut was not patched:** {err}"


def patch_line(record: dict, found, source: str, target: str) -> str:
    """The status line after the one-click patch, its numbers first (the line is cut at the screen's edge; the
    Benchmarks tab's table holds them all)."""
    values = " · ".join(f"{m.model} {m.value:.1f}" for m in found)
    fits = ", ".join(f"{b['error']:.2f} (plain cut {b['unpatched_error']:.2f})" for b in record.get("blocks", []))
    return (f"**{target} = {source} patched** · test ppl {values} · {record.get('seconds', 0):.0f} s, fit error "
            f"{fits}")


def patch_done(record: dict, source: str, target: str, replaced=None) -> str:
    """After a patch: where, how well each block's map fits against the plain cut, how long it took."""
    was = f" It replaced {target}'s {replaced.short()}." if replaced is not None else ""
    fits = "; ".join(f"block [{b['block'][0]}, {b['block'][1]}) → layer {b['block'][0] - 1}'s down projection, fit "
                     f"error {b['error']:.3f} (plain cut {b['unpatched_error']:.3f})" for b in record.get("blocks", []))
    return (f"**{target} is now {source} patched** ({record.get('method')}, {record.get('seconds', 0):.1f} s, no "
            f"gradient step on the model): {fits}.{was}")


def heal_progress(points, source: str, target: str) -> str:
    last = points[-1]
    held = next((p.heldout for p in reversed(points) if p.heldout is not None), None)
    where = f"held-out {held:.3f} (before: {points[0].heldout:.3f})" if held is not None else ""
    return (f"Healing {source} into {target}: step {last.step} of {last.steps} · training loss {last.train:.3f} · "
            f"{where}")


def heal_done(record: dict, source: str, target: str, replaced=None) -> str:
    budget = " (stopped by the time budget)" if record.get("stopped_by_budget") else ""
    was = f" It replaced {target}'s {replaced.short()}." if replaced is not None else ""
    return (f"**{target} is now {source} healed**: {record.get('steps_done', record.get('steps'))} steps{budget}.{was} "
            f"Compare the three columns under *Generate*, *Speed & memory* and *Benchmarks*.")


def heal_perplexity(found, windows: int, seq_len: int) -> str:
    values = " · ".join(f"{m.model} **{m.value:.2f}**" for m in found)
    return f"WikiText-2 *test* perplexity (never trained on; {windows} windows of {seq_len} tokens): {values}."

FRONTIER_HELP = (
    "*What should I cut?* For each size, the mildest candidate of every family that reaches it: the analysis's depth "
    "cut as its paper picks the layers and as the best block (each also with the linear patch, the cheapest repair), "
    "attention and MLP drops, width (Wanda-sp), low-rank (feature space), Wanda sparsity and 2:4, int8 and int4. "
    "Each is measured on WikiText-2 test perplexity, the task, its weights' bytes as stored and its decode ms/token "
    "(batch 1, timed in turns with the original; the memory-bandwidth floor beside it where measured); a family's "
    "point at a size is its best measured one at or under it. Sizes are by default what a deployment sees: the "
    "bytes a device must hold and read (quantized weights count their real bytes). Parameters not zero stay an "
    "option, but zeros stored densely save no bytes and no time: sizing by bytes leaves sparsity out, and on bytes "
    f"and latency a model neither smaller in bytes nor at least {100 * (1 - FASTER):g} % faster than the original "
    "(marked †) is never a "
    "point nor the best. Latency sizes are planned as the same fraction of the parameters. Every point is cached: a "
    "rerun is instant and a stopped run resumes. The target (bytes=0.8 of the original's, bytes=400MiB, ms=20 or "
    "params=0.8) puts the frontier's best model under it (lowest perplexity) into slot A, ready to compare or "
    "export."
)


def frontier_progress(result) -> str:
    """While the frontier runs: points measured and to go; then its front."""
    done = len(result.points)
    if not result.complete:
        return f"Measuring… {done} of {done + result.pending} models so far (the original first)."
    front = ", ".join(p.label for p in result.front())
    return f"Measured {done} models beside the original. On the Pareto front: {front}."
