"""The page's fixed words: its title and introduction, the help beside each tool, the choices it offers, example
prompts and the index convention with an example block of the loaded model."""

from __future__ import annotations

from evaluation.serving import CLOZE_TASKS, FASTER, TASKS
from prune import DEFAULT_MODEL

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


LLAMA_CPP_INFO = ("Rows marked (llama.cpp) beside LayerCut's: each column written as a GGUF of the type that "
                  "matches its storage (F16/BF16, int8 → Q8_0, int4 → the type below), timed at batch 1 by "
                  "llama.cpp on this CPU's cores, its bytes per token counted from the file")
LLAMA_CPP_PPL_INFO = ("WikiText-2 only: each column's perplexity computed from llama.cpp's logits on the same windows, "
                      "and how often its top-1 next token agrees with the same column in PyTorch")
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


STABILITY_BUTTON = "How stable is the best block of N?"


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


FRONTIER_HELP = (
    "*What should I cut?* For each size, the mildest candidate of every family that reaches it: the analysis's depth "
    "cut as its paper picks the layers and as the best block (each also with the linear patch, the cheapest repair), "
    "attention and MLP drops, width (Wanda-sp), low-rank (feature space), Wanda sparsity and 2:4, int8 and int4 (int4 "
    "by GPTQ; both with the input embedding in int8, as llama.cpp stores it), and each structure with int8 and int4. "
    "Each is measured on WikiText-2 test perplexity, the task, its weights' bytes as stored and its decode ms/token "
    "(batch 1, timed in turns with the original; the memory-bandwidth floor beside it where measured); a family's "
    "point at a size is its best measured one at or under it. Sizes are by default what a deployment sees: the "
    "bytes a device must hold and read (quantized weights count their real bytes). Parameters not zero stay an "
    "option, but zeros stored densely save no bytes and no time: sizing by bytes leaves sparsity out, and on bytes "
    f"and latency a model neither smaller in bytes nor at least {100 * (1 - FASTER):g} % faster than the original "
    "(marked †) is never a "
    "point nor the best. Latency sizes are planned as the same fraction of the parameters. Each candidate is first "
    "*screened* (built, counted, a few perplexity windows: the early answer); one that a no larger rival beats on "
    "every window, beyond the screen's own noise and 5 %, is shown as screened out, not measured in full (tick "
    "*Measure every candidate in full* to measure it). Every point is cached: a "
    "rerun is instant and a stopped run resumes. The target (bytes=0.8 of the original's, bytes=400MiB, ms=20 or "
    "params=0.8) puts the frontier's best model under it (lowest perplexity) into slot A, ready to compare or "
    "export."
)


def method_markdown(method) -> str:
    from prune.depth.selection import paper_rule_words

    return f"**{method.label}**: *{method.description}* ({paper_rule_words(method.name)}.)"


C4_HELP = (
    "*C4* is scored as SparseGPT and Wanda score it: the first 1,100 documents of allenai/c4's English validation "
    "shard, in windows of 2,048 tokens (the model's length if shorter; the window above is WikiText-2's). Offline it "
    "reads `c4/c4-validation.00000-of-00008.json.gz` from the benchmark data folder."
)
