"""Side-by-side streaming generation: the same prompt, sampling settings and seed for each model.

The models take turns, one decode step each, in one thread, and each model's steps are
timed on their own (with a device synchronisation on CUDA), so neither model's time
includes the other's work. Time to first token is the prefill plus the first sampling;
tokens/s is the decode rate after the first token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import torch

from prune.core.architectures import check_causal
from prune.core.devices import input_device
from prune.core.errors import InvalidInput
from prune.core.kv import cache_returned, with_cache

from evaluation.core.jobs import Job
from evaluation.measure.measurement import Measurement

GROUP = "generation"


def encode_prompt(tokenizer, prompt: str) -> list[int]:
    """Prompt ids: through the chat template when the tokenizer has one."""
    if not (prompt or "").strip():
        raise InvalidInput("The prompt is empty: type something for the models to continue.")
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=False)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


def stop_ids(model, tokenizer) -> set[int]:
    """Token ids that end a generation (the generation config's and the tokenizer's EOS)."""
    ids = set()
    config = getattr(model, "generation_config", None)
    for value in (getattr(config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


def choose_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> torch.Tensor:
    """Next token ids [B] from last-position logits [B, V]: greedy at temperature 0, else nucleus sampling."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(dim=-1) - sorted_probs > top_p  # keep the smallest set reaching top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def check_settings(*, max_new_tokens, temperature, top_p, seed) -> dict:
    """The sampling settings as numbers (UI sliders send floats), or a clear error."""
    try:
        settings = {"max_new_tokens": int(max_new_tokens), "temperature": float(temperature),
                    "top_p": float(top_p), "seed": int(seed)}
    except (TypeError, ValueError):
        raise InvalidInput("Generation settings must be numbers.") from None
    if settings["max_new_tokens"] < 1:
        raise InvalidInput("Ask for at least one new token.")
    if settings["temperature"] < 0 or not 0 < settings["top_p"] <= 1:
        raise InvalidInput("Temperature must be ≥ 0 and top-p in (0, 1].")
    return settings


class TokenStream:
    """One model's generation, advanced one token per :meth:`step`."""

    def __init__(self, model, tokenizer, prompt_ids: list[int], *, max_new_tokens: int, temperature: float,
                 top_p: float, seed: int):
        self.model, self.tokenizer = model, tokenizer
        self.prompt_ids, self.seed = prompt_ids, int(seed)
        self.next_input = self.generator = None  # on the model's device at the first step (it may move before it)
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.stops = stop_ids(model, tokenizer)
        self.cache = None
        self.tokens: list[int] = []
        self.ttft_s: float | None = None
        self.decode_s = 0.0
        self.done = max_new_tokens <= 0

    @torch.inference_mode()
    def step(self) -> None:
        """Run one forward (the prefill first) and append one token."""
        if self.done:
            return
        if self.next_input is None:
            device = input_device(self.model)
            self.next_input = torch.tensor([self.prompt_ids], device=device)
            self.generator = torch.Generator(device=device).manual_seed(self.seed)
        started = time.perf_counter()
        out = self.model(input_ids=self.next_input, use_cache=True, **with_cache(self.model, self.cache))
        token = choose_token(out.logits[:, -1, :], self.temperature, self.top_p, self.generator)
        token_id = int(token.item())  # .item() synchronises with the device
        elapsed = time.perf_counter() - started
        if self.ttft_s is None:
            self.ttft_s = elapsed
        else:
            self.decode_s += elapsed
        self.cache = cache_returned(out)
        self.next_input = token.view(1, 1)
        if token_id in self.stops:
            self.done = True
            return
        self.tokens.append(token_id)
        self.done = len(self.tokens) >= self.max_new_tokens

    def state(self) -> dict:
        decoded = max(len(self.tokens) - 1, 0)
        return {
            "text": self.tokenizer.decode(self.tokens, skip_special_tokens=True),
            "ttft_s": self.ttft_s,
            "tokens_per_s": decoded / self.decode_s if decoded and self.decode_s > 0 else None,
            "tokens": len(self.tokens),
            "token_ids": list(self.tokens),  # the answer so far (what ``backend.explain.divergence`` compares)
            "done": self.done,
        }


def stream_side_by_side(models: dict[str, torch.nn.Module], tokenizer, prompt: str, *, max_new_tokens: int = 64,
                        temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, job: Job | None = None,
                        hold: Callable | None = None, ready: Callable[[list[str]], bool] | None = None
                        ) -> Iterator[dict]:
    """Yield ``{label: state}`` for every model after each round of one step per model.

    ``hold()`` returns a context manager held around each round (the device lock), so a
    stream abandoned half-way never blocks other jobs. ``ready(labels)`` brings those models onto
    the device and says whether they all fit there together (:mod:`evaluation.serving.residency`); when they
    do not, the models take turns, one whole answer each, and the others' states say ``waiting``.
    """
    settings = check_settings(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
    for model in models.values():
        check_causal(model, "Generation")
    prompt_ids = encode_prompt(tokenizer, prompt)
    streams = {label: TokenStream(model, tokenizer, prompt_ids, **settings) for label, model in models.items()}
    together = None
    while True:
        with hold() if hold else nullcontext():
            if together is None:
                together = ready is None or ready(list(streams))
            turn = [label for label, s in streams.items() if not s.done][:None if together else 1]
            if ready is not None:
                ready(turn)  # back if another job's turn moved it off the device
            for label in turn:
                if job is not None:
                    job.check()
                streams[label].step()
        states = {label: {**s.state(), "waiting": not together and s.ttft_s is None and not s.done}
                  for label, s in streams.items()}
        if job is not None:
            made = sum(s["tokens"] for s in states.values())
            job.update(made / (settings["max_new_tokens"] * len(streams)), "Generating…")
        yield states
        if all(s.done for s in streams.values()):
            return


def measurements(states: dict[str, dict]) -> list[Measurement]:
    """The timing of a finished side-by-side generation (its last yield) in the common result shape."""
    out = []
    for label, state in states.items():
        if state.get("ttft_s") is not None:
            out.append(Measurement("time to first token", state["ttft_s"] * 1000, "ms", False, model=label,
                                   group=GROUP))
        if state.get("tokens_per_s") is not None:
            out.append(Measurement("decode speed", state["tokens_per_s"], "tokens/s", True, model=label,
                                   group=GROUP, details={"tokens": state.get("tokens")}))
    return out
