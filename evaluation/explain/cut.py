"""Explain a cut: how often its next token is the original's, and how far its distributions are, fast.

A model derived only by removing layers or blocks computes exactly what the original computes up to
the first layer it changes (:func:`resume_layer`). :class:`States` runs the original once on fixed
token ids [N, T], keeping its residual stream h_0…h_L (h_l: the input of layer l, h_L: the last
layer's output, before the final norm) and its next-token distributions; :meth:`States.logits` then
runs, for such a recipe, only the variant's layers from that point on, its final norm and its LM
head, fed the original's h_k. A recipe with any other step (sparsity, width, low rank, …) changes
every layer: its built variant runs whole (``resumed_at`` is None).

The comparisons (see :mod:`evaluation.explain.agreement`) read every position that predicts a token of the
ids: N × (T − 1) of them on a slice of calibration windows (:class:`CutFeedback`), the answer's
tokens for a prompt and the original's greedy answer (:class:`Divergence`).

Everything here runs on hook-free private copies of the models (``prune.core.surgery.private_copy``),
so it can run beside another job without the device lock: that job's hooks on the shared modules
never fire here, and none of ours reach it. ``check()`` is called before every layer: a newer
request (or the visitor's Stop) raises there.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace

import torch
from torch import nn

from prune.core.devices import input_device
from prune.core.architectures import decoder_layers
from prune.core.calibration import Calibration, token_windows
from prune.core.hidden import StopForward, run_until_stopped
from prune.core.paths import digest
from prune.core.recipe import Recipe
from prune.core.surgery import private_copy, remove_layers

from evaluation.explain import agreement
from evaluation.quality.fast_lm import head_logits
from evaluation.measure.generation import TokenStream, encode_prompt
from evaluation.core.jobs import Cancelled
from evaluation.measure.measurement import ORIGINAL, Measurement
from evaluation.core.pool import removed_blocks

FEEDBACK_WINDOWS = 2  # calibration windows in the feedback slice …
FEEDBACK_SEQ_LEN = 128  # … of this many tokens: 254 compared positions, ≈ 1 s per release on 2 cores
GROUP = "agreement"
Check = Callable[[], object]


def feedback_slice(calibration: Calibration, windows: int = FEEDBACK_WINDOWS,
                   seq_len: int = FEEDBACK_SEQ_LEN) -> Calibration:
    """The small fixed slice feedback reads: ``windows`` windows of ``seq_len`` tokens spread evenly over the text."""
    return replace(calibration, n_samples=windows, seq_len=seq_len)


def resume_layer(recipe: Recipe, num_layers: int) -> int | None:
    """The first layer (of the original) a recipe's model computes differently; None when that is unknown.

    Only depth cuts and attention/MLP drops keep the layers before it exactly (``num_layers`` for the
    empty recipe); any other step may change every layer.
    """
    if not all(s.view for s in recipe.steps):
        return None
    return min(removed_blocks(recipe, num_layers), default=num_layers)


@torch.no_grad()
def head_input(model: nn.Module, ids: torch.Tensor, *, feed: torch.Tensor | None = None,
               last_output: torch.Tensor | None = None, stream: list | None = None,
               check: Check | None = None) -> torch.Tensor:
    """The LM head's input [N, T, D] of ``model`` on ``ids`` [N, T]; the head itself does not run.

    ``feed``: what the first layer reads instead of the embeddings' output; ``last_output``: what the
    last layer's output is replaced by; ``stream``: a list that gets h_0 … h_L (float32, CPU).
    """
    layers = decoder_layers(model)
    captured = {}

    def before(index):
        def hook(_module, args, kwargs):
            if check is not None:
                check()
            hidden = args[0] if args else kwargs["hidden_states"]
            if index == 0 and stream is not None:
                stream.append(hidden.detach().float().cpu())
            if index == 0 and feed is not None:
                value = feed.to(hidden.device, hidden.dtype)
                return ((value, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": value})
        return hook

    def after(index):
        def hook(_module, _args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            if index == len(layers) - 1 and last_output is not None:
                hidden = last_output.to(hidden.device, hidden.dtype)
                output = (hidden, *output[1:]) if isinstance(output, tuple) else hidden
            if stream is not None:
                stream.append(hidden.detach().float().cpu())
            return output
        return hook

    def grab(_module, args):
        captured["hidden"] = args[0]
        raise StopForward

    handles = [layer.register_forward_pre_hook(before(i), with_kwargs=True) for i, layer in enumerate(layers)]
    handles += [layer.register_forward_hook(after(i)) for i, layer in enumerate(layers)]
    handles.append(model.get_output_embeddings().register_forward_pre_hook(grab))
    try:
        run_until_stopped(model, input_ids=ids.to(input_device(model)), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return captured["hidden"]


class States:
    """The original's residual stream and next-token distributions on fixed ids [N, T], computed once.

    The model is a private copy (shares the weights; see the module docstring).
    """

    def __init__(self, model: nn.Module, ids: torch.Tensor, check: Check | None = None):
        started = time.perf_counter()
        self.model = private_copy(model)
        self.ids = ids  # [N, T]
        stream: list[torch.Tensor] = []
        logits = head_logits(self.model, head_input(self.model, ids, stream=stream, check=check))  # [N, T, V]
        self.stream = torch.stack(stream)  # [L+1, N, T, D]
        self.reference = agreement.Reference.of(logits[:, :-1])  # the positions that predict a token of ids
        self.nll = agreement.token_nll(logits[:, :-1], ids[:, 1:])  # [N, T-1]
        self.seconds = time.perf_counter() - started

    @property
    def num_layers(self) -> int:
        return self.stream.shape[0] - 1

    def logits(self, recipe: Recipe, variant: nn.Module | None = None,
               check: Check | None = None) -> tuple[torch.Tensor, int | None]:
        """Logits [N, T, V] of ``recipe``'s model on the ids, and the layer it resumed from (None: run whole).

        ``variant``: the built model, needed only for a recipe that cannot resume.
        """
        at = resume_layer(recipe, self.num_layers)
        if at is None:
            if variant is None:
                raise ValueError(f"{recipe.short()} cannot resume from the original's states: pass its model.")
            model = private_copy(variant)
            return head_logits(model, head_input(model, self.ids, check=check)), None
        derived = recipe.apply(self.model)  # a weight-sharing view: layers 0…at-1 are the original's
        count = len(decoder_layers(derived))
        if at < count:  # run layers at… of the variant, the first fed h_at
            view = remove_layers(derived, range(at)) if at else derived
            hidden = head_input(view, self.ids, feed=self.stream[at], check=check)
        else:  # nothing left after h_at: the head reads it (the last layer kept to let the model apply its norm)
            view = remove_layers(derived, range(count - 1)) if count > 1 else derived
            hidden = head_input(view, self.ids, last_output=self.stream[at], check=check)
        return head_logits(view, hidden), at


# ---------------------------------------------------------------- the cut's feedback on a slice


@dataclass(frozen=True)
class CutFeedback:
    """A compressed model beside the original on the feedback slice."""

    perplexity: float  # of the compressed model, on the slice
    original_perplexity: float
    kl: float  # mean KL(original ‖ compressed) per compared position, in nats
    agreement_pct: float  # % of compared positions whose most likely next token is the original's
    tokens: int  # compared positions: N windows × (T − 1)
    seconds: float  # wall time of this comparison (the original's one-off states not included; 0 when cached)
    resumed_at: int | None  # the layer whose input h_k it resumed from; None: the model ran whole
    cached: bool = False

    @property
    def resumed(self) -> bool:
        return self.resumed_at is not None

    def summary(self) -> str:
        """'agrees on 87 % of next tokens · perplexity 21.4 (original 18.2) · drift 0.31 (KL, nats per token)':
        plain words first, the precise measure beside them."""
        return (f"agrees on {self.agreement_pct:.0f} % of next tokens · perplexity {self.perplexity:.1f} "
                f"(original {self.original_perplexity:.1f}) · drift {self.kl:.3f} (KL, nats per token)")

    def measurements(self, label: str) -> list[Measurement]:
        """The common result shape: the original's values (KL 0, agreement 100 %) and ``label``'s."""
        details = {"tokens": self.tokens, "seconds": self.seconds, "resumed_at": self.resumed_at}
        rows = [("slice perplexity", self.original_perplexity, self.perplexity, "", False),
                ("KL from the original", 0.0, self.kl, "nats/token", None),  # no ratio to the original's 0
                ("top-1 agreement", 100.0, self.agreement_pct, "%", True)]
        return [m for name, orig, value, unit, better in rows for m in (
            Measurement(name, orig, unit, better, model=ORIGINAL, group=GROUP),
            Measurement(name, value, unit, better, model=label, group=GROUP, details=details))]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CutFeedback:
        return cls(**data)


def feedback(states: States, recipe: Recipe, variant: nn.Module | None = None,
             check: Check | None = None) -> CutFeedback:
    """Perplexity, mean KL and top-1 agreement of ``recipe``'s model against the original on ``states``' ids."""
    started = time.perf_counter()
    logits, at = states.logits(recipe, variant, check)
    kl, agree, nll = agreement.scores(states.reference, logits[:, :-1], states.ids[:, 1:])
    return CutFeedback(perplexity=math.exp(nll.mean().item()), original_perplexity=math.exp(states.nll.mean().item()),
                       kl=kl.mean().item(), agreement_pct=100.0 * agree.float().mean().item(), tokens=kl.numel(),
                       seconds=time.perf_counter() - started, resumed_at=at)


class Explainer:
    """The backend's feedback state: the original's states per (model, slice), one feedback at a time,
    and a newer request of a visitor superseding that visitor's older one."""

    def __init__(self, kept: int = 2):
        self.kept = kept
        self._states: OrderedDict[tuple[str, str], States] = OrderedDict()
        self._turn = threading.Lock()  # feedbacks share the cores: one at a time, never behind the device lock
        self._latest: dict[str | None, int] = {}
        self._guard = threading.Lock()

    def ticket(self, owner: str | None, check: Check) -> Check:
        """A safe point for ``owner``'s newest request: raises once a newer one of ``owner`` has begun."""
        with self._guard:
            number = self._latest[owner] = self._latest.get(owner, 0) + 1

        def safe_point():
            check()
            if self._latest.get(owner) != number:
                raise Cancelled("Cancelled: a newer cut replaced this one before its numbers were ready.")

        return safe_point

    @contextmanager
    def turn(self, check: Check) -> Iterator[None]:
        """Hold the feedback lock, waiting cancellably (a superseded request leaves the queue)."""
        while not self._turn.acquire(timeout=0.02):
            check()
        try:
            check()
            yield
        finally:
            self._turn.release()

    def states(self, fingerprint: str, model: nn.Module, tokenizer, calibration: Calibration,
               check: Check | None = None) -> States:
        """The original's states on the slice (computed on first use; the ``kept`` most recent are held)."""
        key = (fingerprint, digest(calibration.key()))
        if key not in self._states:
            found = States(model, token_windows(tokenizer, calibration), check)
            while len(self._states) >= self.kept:
                self._states.popitem(last=False)
            self._states[key] = found
        self._states.move_to_end(key)
        return self._states[key]

    def feedback(self, fingerprint: str, model: nn.Module, tokenizer, calibration: Calibration, recipe: Recipe,
                 variant: nn.Module | None = None, check: Check | None = None) -> CutFeedback:
        with self.turn(check or (lambda: None)):
            return feedback(self.states(fingerprint, model, tokenizer, calibration, check), recipe, variant, check)


# ---------------------------------------------------------------- where the answers part ways


@dataclass(frozen=True)
class Divergence:
    """One compressed model beside the original's greedy answer to a prompt."""

    first: int | None  # first token (0 = the first generated) where its own answer leaves the original's; None: never
    kl: tuple[float, ...]  # per token of the original's answer, teacher-forced: KL(original ‖ it) in nats
    agree: tuple[bool, ...]  # per token: its most likely next token is the original's
    resumed_at: int | None
    parts: tuple[str, str] = ("", "")  # its own answer's text before and from the first divergent token

    @property
    def agreement_pct(self) -> float:
        return 100.0 * sum(self.agree) / len(self.agree) if self.agree else 100.0

    @property
    def mean_kl(self) -> float:
        return sum(self.kl) / len(self.kl) if self.kl else 0.0

    def caption(self) -> str:
        """'agrees on 87 % of next tokens'."""
        return f"agrees on {self.agreement_pct:.0f} % of next tokens"


@dataclass(frozen=True)
class DivergenceReport:
    """The original's greedy answer and each compressed model beside it."""

    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]  # the original's greedy answer (its end of text not included)
    answer_tokens: tuple[str, ...]  # each answer token decoded, to label the strip
    columns: dict[str, Divergence] = field(default_factory=dict)  # compressed label → divergence


def greedy_answer(model: nn.Module, tokenizer, prompt_ids: Sequence[int], max_new_tokens: int,
                  check: Check | None = None) -> list[int]:
    """The model's greedy answer (token ids, without its end of text)."""
    stream = TokenStream(model, tokenizer, list(prompt_ids), max_new_tokens=max_new_tokens, temperature=0.0,
                         top_p=1.0, seed=0)
    while not stream.done:
        if check is not None:
            check()
        stream.step()
    return stream.tokens


def divergence(sides: Sequence, tokenizer, prompt: str, *, max_new_tokens: int = 64,
               answers: Mapping[str, Sequence[int]] | None = None, check: Check | None = None) -> DivergenceReport:
    """The original's greedy answer (``sides[0]``), and for each other side: where its answer leaves it and,
    teacher-forced on it, the per-token KL and top-1 agreement.

    ``sides``: ``evaluation.serving.variants.Side`` values; ``answers``: a side's own answer ids (what its column
    shows, e.g. sampled), else its greedy answer is generated here.
    """
    prompt_ids = encode_prompt(tokenizer, prompt)
    original = sides[0]
    answer = greedy_answer(original.model, tokenizer, prompt_ids, max_new_tokens, check)
    ids = torch.tensor([prompt_ids + answer])  # [1, T]
    states = States(original.model, ids, check)
    start = len(prompt_ids) - 1  # the position that predicts the first answer token
    columns = {}
    for side in sides[1:]:
        own = (answers or {}).get(side.label)
        own = list(own) if own is not None else greedy_answer(side.model, tokenizer, prompt_ids, max_new_tokens, check)
        logits, at = states.logits(side.recipe, side.model, check)
        kl, agree = agreement.compare(states.reference, logits[:, :-1])
        first = agreement.first_divergence(prompt_ids + answer, prompt_ids + own, len(prompt_ids))
        cut = len(own) if first is None else first
        parts = tuple(tokenizer.decode(piece, skip_special_tokens=True) for piece in (own[:cut], own[cut:]))
        columns[side.label] = Divergence(first, tuple(kl[0, start:].tolist()), tuple(agree[0, start:].tolist()), at,
                                         parts)
    return DivergenceReport(tuple(prompt_ids), tuple(answer), tuple(tokenizer.decode([t]) for t in answer), columns)
