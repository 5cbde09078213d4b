"""Evaluating an export on many GPUs with the existing engines: the exact commands, and what they will refuse.

LayerCut runs no distributed evaluation of its own. An export is a standard Hugging Face folder, so
lm-evaluation-harness runs it data-parallel under ``accelerate launch`` (one copy per GPU), or with vLLM,
tensor-parallel. vLLM splits attention heads, KV heads and MLP channels evenly over the GPUs: it asserts that
the heads and the MLP width divide by ``tensor_parallel_size``, and that the KV heads do (or, when fewer than the
GPUs, divide it). Width pruning changes those counts, so the sizes that still work are computed here, from the
export's config. A dropped attention or MLP block is saved as zeros, which every engine computes in full (no
speed-up there); a 2:4 pattern saved densely runs dense in vLLM (its 2:4 kernels read compressed-tensors
checkpoints, as llm-compressor writes them); factored low-rank weights load in LayerCut only.
"""

from __future__ import annotations

from dataclasses import dataclass

from prune.core.architectures import ARCHITECTURES, CAUSAL
from prune.core.recipe import Recipe

FILE = "SCALE_OUT.md"
TENSOR_PARALLEL = (1, 2, 4, 8)
TASKS = "hellaswag,arc_easy,arc_challenge,winogrande,piqa,boolq,openbookqa,mmlu"


@dataclass(frozen=True)
class ScaleOut:
    commands: tuple[str, ...]
    notes: tuple[str, ...]

    def markdown(self) -> str:
        lines = ["## Evaluating it on many GPUs", "", "```bash", *self.commands, "```"]
        return "\n".join(lines + ([""] + [f"- {note}" for note in self.notes] if self.notes else [])) + "\n"


def _counts(config: dict) -> tuple[int | None, int | None, int | None]:
    """(attention heads, KV heads, MLP width) as the config's architecture names them."""
    heads = config.get("num_attention_heads") or config.get("n_head")
    width = config.get("intermediate_size") or config.get("ffn_dim") or config.get("n_inner")
    return heads, config.get("num_key_value_heads") or heads, width


def tensor_parallel_sizes(config: dict) -> tuple[int, ...]:
    """The sizes of :data:`TENSOR_PARALLEL` that vLLM accepts for this config's heads and MLP width."""
    heads, kv, width = _counts(config)

    def fits(n: int) -> bool:
        return (not heads or heads % n == 0) and (not kv or (kv % n == 0 if kv >= n else n % kv == 0)) and \
            (not width or width % n == 0)

    return tuple(n for n in TENSOR_PARALLEL if fits(n))


def scale_out(folder: str, config: dict, recipe: Recipe, *, factored: bool = False, tasks: str = TASKS) -> ScaleOut:
    """The commands that evaluate the export at ``folder`` (as the reader will have it) on many GPUs, and why an
    engine would refuse it or run it slower than its parameter count says."""
    row = ARCHITECTURES.get(config.get("model_type"))
    if row is not None and row.kind != CAUSAL:  # an encoder (-decoder): the engines' tasks read a causal LM
        return ScaleOut((f"layercut-benchmark --model {folder} --full --task cbt_style_cn,cbt_style_ne,cbt_style_p"
                         "   # cloze tasks, one device",),
                        ("lm-evaluation-harness's multiple-choice tasks and vLLM read a causal LM; an encoder or an "
                         "encoder-decoder is scored on LayerCut's cloze tasks, on one device.",))
    sizes = tensor_parallel_sizes(config)
    largest = max(sizes)
    commands = (
        f"accelerate launch -m lm_eval run --model hf --model_args pretrained={folder},dtype=bfloat16 "
        f"--tasks {tasks} --batch_size auto   # data-parallel: one copy per GPU",
        f"lm_eval run --model vllm --model_args pretrained={folder},tensor_parallel_size={largest},dtype=auto,"
        f"gpu_memory_utilization=0.8 --tasks {tasks} --batch_size auto   # "
        + (f"tensor-parallel over {largest} GPUs" if largest > 1 else "one GPU: these shapes do not split"),
    )
    notes = []
    refused = [n for n in TENSOR_PARALLEL if n not in sizes]
    if refused:
        notes.append(f"vLLM takes tensor_parallel_size {_words(sizes)} for this model, not {_words(refused)}: "
                     f"{_shape(config)} must divide evenly over the GPUs.")
    kinds = {step.kind for step in recipe.steps}
    if "drop" in kinds:
        notes.append("Dropped attention and MLP blocks are saved as zeros: the engines compute them in full, so they "
                     "run no faster there than the original (LayerCut's own loader drops them again).")
    if any(getattr(step, "pattern", None) == "2:4" for step in recipe.steps):
        notes.append("The 2:4 pattern is saved densely: vLLM runs it as a dense model. Its 2:4 kernels need a "
                     "compressed-tensors checkpoint (llm-compressor writes one).")
    if factored:
        notes.append("The low-rank weights are saved factored, which only LayerCut loads: export them merged "
                     "for these engines.")
    return ScaleOut(commands, tuple(notes))


def _shape(config: dict) -> str:
    heads, kv, width = _counts(config)
    return f"{heads} attention heads, {kv} KV heads and an MLP width of {width}"


def _words(values) -> str:
    values = [str(v) for v in values]
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]
