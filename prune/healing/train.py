"""Healing: a short retraining after a cut, a sparsification or a decomposition, on a copy of the model.

Two methods, each after a paper's released code:

* ``lora`` — Shortened LLaMA (Kim et al. 2024, arXiv 2402.02834; ``Nota-NetsPresso/shortened-llm``,
  ``src/lora_retrain.py`` through ``peft``): LoRA of rank 8, α 16, dropout 0.05 on q, k, v, o,
  gate, up and down projections of every decoder layer, AdamW, linear warm-up then linear decay,
  the adapters merged into the weights at the end (their ``--save_lora_merge``).
* ``last_layers`` — "Reassessing Layer Pruning in LLMs" (Lu et al. 2024, arXiv 2411.15558;
  ``yaolu-zjut/Navigation-LLM-layer-pruning``, ``partial_fine-tuning.py``): every weight of the last
  N decoder layers (their ``last3``), the final norm and the LM head trained, the rest frozen.
  When the head is tied to the input embeddings (SmolLM2), training the head trains both.

Where LayerCut differs from their code, on purpose, so that a default heal takes a few minutes on
2 CPU cores for the default model (SmolLM2-135M):

* Text: plain language modelling on consecutive token windows of WikiText-2 *validation* (the
  ``<unk>`` variant in the data folder) or the user's text, every token predicted; theirs is
  instruction tuning on Alpaca-cleaned (50k prompts, loss on the answers). Perplexity is
  reported on WikiText-2 *test*, never trained on; zero-shot tasks are not targeted by this text.
* Length: ``steps`` optimizer steps of ``batch`` windows of ``seq_len`` tokens (defaults in
  :data:`DEFAULTS`: 30 (LoRA) or 40 steps of 4 × 256 tokens, about 30k–40k tokens) instead of 2
  epochs of 64 × 256 (theirs: micro-batches of 4, 16 accumulated).
* Learning rate: higher for so few steps (LoRA 1e-3, theirs 1e-4 in the scripts, 3e-4 default;
  last layers 3e-4, theirs 1e-5); warm-up is the first tenth of the steps (theirs: 100 steps). Gradient norm clipped at
  1.0 as the Hugging Face Trainer they use does; float32 (theirs: fp16 on GPUs).
* Held-out loss: the last ``heldout`` windows of the same text are never trained on; their loss is
  reported before training, every ``eval_every`` steps and at the end (theirs: 2,000 held-out
  Alpaca prompts every 100 steps, keeping the best checkpoint — LayerCut keeps the last).

What stays: the input model and everything it shares weights with (the original) are untouched;
the healed copy owns every tensor training changed. Weights of the decoder layers' matrices that
are exactly zero stay zero (a sparse variant keeps its pattern: the merged LoRA delta is masked; in
``last_layers`` the mask is re-applied after every optimizer step; a dense model's few exact zeros,
0.03 % of the dequantized SmolLM2's, stay zero too). Low-rank factored projections heal with ``last_layers``
(the factors are trained); LoRA refuses them. Seeded: the same model, text and options heal to
the same weights (on the same machine and thread count), unless ``budget_s`` stops early.

Measured (benchmarks/heal.py, 2026-11-22, 2 quiet CPU cores): SmolLM2-135M cut [15, 21) has WikiText-2
test perplexity 202.3 (original 64.0); LoRA's 30 default steps bring it to 86.6 (84 % of the gap
won back, 192 s), the last layers' 40 steps to 113.1 (64 %, 209 s). hellaswag acc_norm (200
questions, ± 3.5) moved within its noise: original 47.0, cut 44.5, LoRA 42.5, last layers 45.0.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable

import torch
from torch import nn

from prune.core.chunked_loss import mean_loss, summed_nll
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, bos_token, load_text
from prune.core.errors import InvalidInput, UnknownMethod, quoted
from prune.core.factored import Factored
from prune.core.sequential import matrices
from prune.healing.distill import TEACHERS, distill_loss

METHODS = ("lora", "last_layers")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
COMMON = {"lr": None, "batch": 4, "seq_len": 256, "heldout": 16, "eval_every": 10, "seed": 0, "clip": 1.0}
DEFAULTS = {  # every option a method takes, with its default; ``steps`` is the default length
    "lora": {**COMMON, "steps": 30, "lr": 1e-3, "rank": 8, "alpha": 16, "dropout": 0.05, "targets": LORA_TARGETS},
    "last_layers": {**COMMON, "steps": 40, "lr": 3e-4, "layers": 3, "head": True},
}
KD_DEFAULTS = {"kd_ratio": 1.0, "temperature": 1.0}  # with a teacher loss: its share of the loss, and τ
HEALED_FIELD = "layercut_healed"  # the healed model's config records what was done here

Progress = Callable[[float, str], object]
Report = Callable[[int, int, float, float | None], object]  # (step, steps, train loss, held-out loss or None)


def check_options(method: str, steps: int | None, budget_s: float | None, options: dict) -> tuple[int, dict]:
    """(steps, every option of ``method`` with the defaults filled in), checked."""
    if method not in METHODS:
        raise UnknownMethod(f"Unknown healing method {quoted(method)}. Choose one of: {', '.join(METHODS)}.")
    known = {k: v for k, v in DEFAULTS[method].items() if k != "steps"}
    options = dict(options)
    steps = DEFAULTS[method]["steps"] if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InvalidInput(f"Healing steps are a whole number of at least 1, not {quoted(steps)}.")
    if budget_s is not None and (isinstance(budget_s, bool) or not float(budget_s) > 0):
        raise InvalidInput(f"A healing time budget is a number of seconds above 0, not {quoted(budget_s)}.")
    teacher = options.pop("teacher", "none")
    if teacher not in TEACHERS:
        raise UnknownMethod(f"Unknown teacher loss {quoted(teacher)}. Choose one of: {', '.join(TEACHERS)}.")
    distilling = {k: options.pop(k) for k in list(options) if k in KD_DEFAULTS}
    if teacher == "none" and distilling:
        raise InvalidInput(f"The healing option {next(iter(distilling))} goes with a teacher loss (forward_kl or "
                           f"reverse_kl).")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise InvalidInput(f"Healing by {method} takes no option {quoted(unknown[0])}; it takes {', '.join(known)}.")
    merged = {**known, **options}
    if teacher != "none":  # recorded only when distilling, so a task-loss heal keeps the key it always had
        merged.update({**KD_DEFAULTS, **distilling, "teacher": teacher})
        if not 0 < float(merged["kd_ratio"]) <= 1 or not float(merged["temperature"]) > 0:
            raise InvalidInput("The distillation share kd_ratio is above 0 and at most 1, and the temperature is "
                               "above 0.")
    for name in ("batch", "seq_len", "heldout", "eval_every", "rank", "layers"):
        value = merged.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidInput(f"The healing option {name} is a whole number of at least 1, not {quoted(value)}.")
    if merged["seq_len"] < 2:
        raise InvalidInput("Healing windows need at least 2 tokens.")
    if not float(merged["lr"]) > 0:
        raise InvalidInput(f"The learning rate must be above 0, not {quoted(merged['lr'])}.")
    if method == "lora":
        merged["targets"] = tuple(sorted(str(t) for t in merged["targets"]))
        if not merged["targets"] or not 0 <= float(merged["dropout"]) < 1:
            raise InvalidInput("LoRA needs at least one target projection and a dropout from 0 to below 1.")
    return steps, merged


def heal(model: nn.Module, tokenizer, *, method: str = "lora", steps: int | None = None, budget_s: float | None = None,
         text: Calibration | str | None = None, callback: Report | None = None, progress: Progress | None = None,
         original: nn.Module | None = None, **options) -> nn.Module:
    """A healed copy of ``model`` (a plain transformers model, LoRA merged); ``model`` and what it shares stay
    untouched.

    ``text``: a :class:`Calibration` naming the source (its window settings are not used), an inline
    string, or None for WikiText-2 validation from the data folder. ``budget_s`` stops after the
    step that crosses it (the learning-rate schedule spans ``steps``, so it stops part-way).
    ``callback(step, steps, train_loss, heldout_loss)`` is called at step 0
    (before training) and after every step; ``progress(fraction, message)`` too (raising cancels).
    The healed config's ``layercut_healed`` records the method, options and steps done. With the option ``teacher``
    (``forward_kl`` or ``reverse_kl``, see :mod:`prune.healing.distill`), ``original`` is the teacher.
    """
    steps, opts = check_options(method, steps, budget_s, options)
    if tokenizer is None:
        raise InvalidInput("Healing trains on text: it needs the model's tokenizer.")
    if "teacher" in opts and original is None:
        raise InvalidInput("Distillation needs the original model as its teacher: heal from the recipe.")
    source = Calibration(source="text", text=text) if isinstance(text, str) else text or Calibration(source="wikitext2")
    train, heldout = split_windows(tokenizer, source, opts["seq_len"], opts["heldout"])
    healed = shared_copy(model)
    zeros = {id(m.weight): m.weight == 0 for layer in decoder_layers(healed) for m in matrices(layer).values()
             if bool((m.weight == 0).any())}
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(opts["seed"])
        if method == "lora":
            trained = _lora(healed, opts)
        else:
            trained, owned = healed, {id(p) for p in _last_layers(healed, opts)}
            zeros = {k: v for k, v in zeros.items() if k in owned}
        record = _train(trained, train, heldout, steps, budget_s, opts, zeros, callback, progress, method,
                        _objective(opts, original))
        if method == "lora":
            healed = _merged(trained, zeros)
    healed.eval()
    for old, new in zip(model.parameters(), healed.parameters()):
        new.requires_grad_(old.requires_grad)
    setattr(healed.config, HEALED_FIELD, {
        "method": method, "steps": steps, "budget_s": budget_s, **record,
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}})
    return healed


def owned_params(size, method: str, opts: dict, head_params: int, copied: bool) -> int:
    """Parameters a healed variant of a model of ``size`` (a :class:`~prune.core.sizes.Size`) owns, by arithmetic.

    LoRA: every target projection (merged into its own copy). Last layers: the last N layers, the
    final norm and the head (``head_params``, with the final norm's). ``copied``: earlier steps
    already own every matrix of the layers (sparsity, width), so only what they did not own is new.
    """
    if method == "lora":
        names = set(opts["targets"])
        return sum(m.params for layer in size.matrices for m in layer if m.path.rsplit(".", 1)[-1] in names)
    last = range(max(0, len(size.layers) - opts["layers"]), len(size.layers))
    layers = sum(size.layers[i] for i in last)
    if copied:
        layers -= sum(m.params for i in last for m in size.matrices[i])
    return layers + (head_params if opts["head"] else 0)


def head_params(model: nn.Module) -> int:
    """Parameters of the final norm and the LM head (the tied embedding once): what last-layers healing adds."""
    norm = _final_norm(model)
    head = model.get_output_embeddings()
    return sum(p.numel() for p in (norm.parameters() if norm is not None else ())) + \
        (head.weight.numel() if head is not None else 0)


# ---------------------------------------------------------------- the text


def split_windows(tokenizer, source: Calibration, seq_len: int, heldout: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training windows [N, T], held-out windows [H, T]): consecutive windows of the text, the last H held out.

    With the tokenizer's BOS (``source.bos``; None: when it adds one), each window starts with it.
    A short text holds out a tenth of its windows (at least one) and trains on the rest.
    """
    ids = torch.tensor(tokenizer(load_text(source), add_special_tokens=False)["input_ids"], dtype=torch.long)
    bos = bos_token(tokenizer, source)
    body = seq_len - (bos is not None)
    count = len(ids) // body
    if count < 2:
        raise InvalidInput(f"The healing text is too short: it needs at least two windows of {seq_len} tokens "
                           f"({len(ids)} tokens given).")
    windows = ids[: count * body].view(count, body)
    if bos is not None:
        windows = torch.cat([torch.full((count, 1), bos, dtype=torch.long), windows], dim=1)
    held = min(heldout, max(1, count // 10))
    return windows[: count - held], windows[count - held:]


# ---------------------------------------------------------------- the copy and what is trained


def shared_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose parameters are new objects sharing the original's storage (tied ones stay tied).

    Its flags (``requires_grad``), modules and config are its own; a trained tensor must be
    given its own storage before it changes (:func:`_own`).
    """
    memo = {id(p): nn.Parameter(p.detach(), requires_grad=False) for p in model.parameters()}
    memo.update({id(b): b for b in model.buffers()})
    return copy.deepcopy(model, memo)


def _own(param: nn.Parameter) -> nn.Parameter:
    """Give a copy's parameter its own storage and mark it trained."""
    param.data = param.data.clone()
    param.requires_grad_(True)
    return param


def _last_layers(model: nn.Module, opts: dict) -> list[nn.Parameter]:
    """Unfreeze the last ``layers`` decoder layers, the final norm and (``head``) the LM head; the trained tensors."""
    modules = list(decoder_layers(model)[-opts["layers"]:])  # all of them when the model has fewer
    modules += [m for m in (_final_norm(model),) if m is not None]
    if opts["head"] and model.get_output_embeddings() is not None:
        modules.append(model.get_output_embeddings())
    unique = {id(p): p for m in modules for p in m.parameters()}
    return [_own(p) for p in unique.values()]


def _final_norm(model: nn.Module) -> nn.Module | None:
    """The norm after the last layer (``model.norm``, ``transformer.ln_f``, …): the last norm module outside the
    layers."""
    inside = {id(m) for m in decoder_layers(model).modules()}
    norms = [m for name, m in model.named_modules() if id(m) not in inside and "norm" in type(m).__name__.lower()
             or name.endswith(("ln_f", "final_layer_norm"))]
    return norms[-1] if norms else None


def _lora(model: nn.Module, opts: dict) -> nn.Module:
    """``model`` wrapped by peft with LoRA adapters on the target projections (only they train)."""
    from peft import LoraConfig, get_peft_model

    names = set(opts["targets"])
    found = [name for name, m in decoder_layers(model).named_modules() if name.rsplit(".", 1)[-1] in names]
    if not found:
        raise InvalidInput(f"No projection named {', '.join(opts['targets'])} in this model's layers for LoRA.")
    if any(isinstance(decoder_layers(model).get_submodule(n), Factored) for n in found):
        raise InvalidInput("LoRA cannot heal low-rank factored projections: heal them with last_layers.")
    config = LoraConfig(r=opts["rank"], lora_alpha=opts["alpha"], lora_dropout=float(opts["dropout"]),
                        target_modules=list(opts["targets"]), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def _merged(peft_model: nn.Module, zeros: dict) -> nn.Module:
    """The plain model with each adapter's delta added to its own copy of the weight, exact zeros kept zero."""
    from peft.tuners.lora import LoraLayer

    for module in peft_model.modules():
        if isinstance(module, LoraLayer):
            weight = module.get_base_layer().weight
            mask = zeros.get(id(weight))
            _own(weight).requires_grad_(False)  # merging writes in place: never into the shared storage
            module.merge()
            if mask is not None:
                weight.data.masked_fill_(mask, 0)
    return peft_model.unload()


# ---------------------------------------------------------------- the loop


def _objective(opts: dict, original: nn.Module | None) -> Callable[[nn.Module, torch.Tensor], torch.Tensor]:
    """The training loss of a batch: the next-token loss, or the distillation loss against ``original``."""
    if "teacher" not in opts:
        return mean_loss
    return lambda model, ids: distill_loss(model, original, ids, teacher=opts["teacher"],
                                           ratio=float(opts["kd_ratio"]), temperature=float(opts["temperature"]))


def _train(model, train: torch.Tensor, heldout: torch.Tensor, steps: int, budget_s: float | None, opts: dict,
           zeros: dict, callback: Report | None, progress: Progress | None, method: str,
           objective: Callable[[nn.Module, torch.Tensor], torch.Tensor] = mean_loss) -> dict:
    """AdamW over shuffled training windows, warm-up then linear decay; returns what the healed config records.

    The training loss is ``objective``'s; the held-out loss is always the next-token loss (comparable across them).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(params, lr=float(opts["lr"]), weight_decay=0.0)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)))
    order = torch.randperm(len(train))
    report = progress or (lambda _fraction, _message: None)
    tell = callback or (lambda *_: None)
    batch = opts["batch"]

    def batch_at(step: int) -> torch.Tensor:
        picks = [order[(step * batch + i) % len(order)] for i in range(batch)]
        return train[torch.stack(picks)].to(device)

    model.eval()
    first = heldout_loss(model, heldout)
    with torch.no_grad():
        start_loss = float(objective(_unwrapped(model), batch_at(0)))
    tell(0, steps, start_loss, first)
    report(0.0, f"Healing ({method}): held-out loss {first:.3f} before training")
    started, done, loss, held, stepping = time.perf_counter(), 0, start_loss, first, 0.0
    model.train()
    for step in range(steps):
        began = time.perf_counter()
        ids = batch_at(step)
        step_loss = objective(_unwrapped(model), ids)  # the LM head a chunk of positions at a time
        optimizer.zero_grad(set_to_none=True)
        step_loss.backward()
        torch.nn.utils.clip_grad_norm_(params, opts["clip"])
        optimizer.step()
        schedule.step()
        with torch.no_grad():
            for p in params:
                if id(p) in zeros:
                    p.masked_fill_(zeros[id(p)], 0)
        done, loss, stepping = step + 1, float(step_loss.detach()), stepping + time.perf_counter() - began
        over = budget_s is not None and time.perf_counter() - started >= budget_s
        last = done == steps or over
        held = None
        if last or done % opts["eval_every"] == 0:
            model.eval()
            held = heldout_loss(model, heldout)
            model.train()
        tell(done, steps, loss, held)
        report(done / steps if not last else 1.0, f"Healing ({method}): step {done} of {steps}, loss {loss:.3f}"
               + (f", held-out {held:.3f}" if held is not None else ""))
        if last:
            break
    model.eval()
    return {"steps_done": done, "train_loss": [start_loss, loss], "heldout_loss": [first, held],
            "heldout_windows": len(heldout), "train_windows": len(train), "stopped_by_budget": done < steps,
            "train_seconds": round(stepping, 2)}  # the optimizer steps' time, held-out evaluations apart


def _unwrapped(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (LoRA's adapters sit in it), or ``model`` itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@torch.no_grad()
def heldout_loss(model: nn.Module, windows: torch.Tensor, batch: int = 8) -> float:
    """Mean next-token loss over the held-out windows [H, T] (``model`` plain or wrapped by peft)."""
    model = _unwrapped(model)
    device = next(model.parameters()).device
    total = count = 0.0
    for start in range(0, len(windows), batch):
        nll, predicted = summed_nll(model, windows[start: start + batch].to(device))
        total, count = total + float(nll), count + predicted
    return total / count if count else math.nan
