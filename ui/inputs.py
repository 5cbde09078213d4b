"""What a visitor types, checked once where it enters and turned into typed values.

Also the server's policy: on a shared server (a Hugging Face Space, ``--shared`` or
``LAYERCUT_SHARED=1``) visitors give files by upload only, local model folders must lie
under ``LAYERCUT_MODEL_ROOT``, no visitor's model code runs (trust-remote-code is refused),
"all questions" is bounded, and no message names a server path. On a personal machine paths
stay allowed and nothing is bounded but by the machine.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import prune
from evaluation.serving import (choose_judge, Comparison, COMPARISON_BYTES, DEFAULT_JUDGE, JudgeChoice, ModelSpec,
                                MT_BENCH)
from prune.core.calibration import BOS_CHOICES, SOURCES, hub_dataset
from prune.core.errors import InvalidCut, InvalidInput, LayerCutError, ModelNotFound, quoted
from prune.core.loading import is_default
from prune.core.gguf_in import is_hub_gguf
from prune.core.paths import local_path
from prune.core.recipe import Recipe
from prune.core.step import kept_by_digest

from ui.session import SLOTS

DEFAULT_MAX_PROMPT_CHARS = 4000
DEFAULT_SHARED_MAX_QUESTIONS = 500  # "0 = all" on a shared server: at most this many questions or windows
MAX_TEXT_BYTES = 8 * 2**20  # uploads (Gradio refuses larger ones) and inline calibration text alike
LARGEST = 10**9  # the default cap of a whole number: past any count this app takes, far from int64's end
LARGEST_LIMIT = 100_000  # questions per task or windows: more than any data set here holds
LARGEST_SEED = 2**32 - 1  # what every random generator (torch, numpy, Python) takes
MAX_NAME_PART, MAX_NAME_CHARS = 255, 4096  # what file systems take: longer names fail deep inside the OS
CALIBRATION_SOURCES = ("default", "builtin", "text", "upload", "file", "wikitext2", "hub")


@dataclass(frozen=True)
class Policy:
    """What this server lets visitors do."""

    shared: bool = False
    model_root: Path | None = None  # shared servers: local model folders must lie under it
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
    max_questions: int = DEFAULT_SHARED_MAX_QUESTIONS  # shared servers only

    @classmethod
    def from_env(cls, shared: bool | None = None) -> Policy:
        if shared is None:
            shared = os.environ.get("LAYERCUT_SHARED", "") not in ("", "0") or bool(os.environ.get("SPACE_ID"))
        root = os.environ.get("LAYERCUT_MODEL_ROOT")
        return cls(shared=shared, model_root=Path(root).expanduser().resolve() if root else None,
                   max_prompt_chars=_env_number("LAYERCUT_MAX_PROMPT_CHARS", DEFAULT_MAX_PROMPT_CHARS),
                   max_questions=_env_number("LAYERCUT_MAX_QUESTIONS", DEFAULT_SHARED_MAX_QUESTIONS))

    def limit(self, value, what: str) -> int | None:
        """A "0 = all" limit as typed; on a shared server "all" means ``max_questions`` (the label says so) and
        more is refused, so one abandoned page cannot hold the only device for hours."""
        if not self.shared:
            return optional_limit(value, what)
        return optional_limit(value, what, maximum=self.max_questions) or self.max_questions

    def limit_words(self) -> str:
        """How a limit's label says what 0 means here."""
        return f"0 = all, at most {self.max_questions:,} here" if self.shared else "0 = all"


def _env_number(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default


def whole_number(value, what: str, *, minimum: int | None = None, maximum: int = LARGEST) -> int:
    """An integer from a UI number, or a one-line message (2.5 is refused, never rounded; so is anything past
    ``maximum``, which by default is far beyond any count this app takes)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{what} must be a whole number, not {quoted(value)}.") from None
    if not math.isfinite(number) or number != int(number):
        raise InvalidInput(f"{what} must be a whole number, not {quoted(value)}.")
    number = int(number)
    if minimum is not None and number < minimum or number > maximum:
        span = f"{minimum:,}…{maximum:,}" if minimum is not None else f"at most {maximum:,}"
        raise InvalidInput(f"{what} must be {span}, not {quoted(number)}.")
    return number


def optional_limit(value, what: str, maximum: int = LARGEST_LIMIT) -> int | None:
    """A limit where 0 or empty means 'all'."""
    if value in (None, ""):
        return None
    number = whole_number(value, what, minimum=0, maximum=maximum)
    return number or None


def percentages(text: str | None, what: str) -> list[float]:
    """'0, 10, 50' → [0.0, 0.1, 0.5]: comma-separated percentages as fractions (ranges are the caller's to check)."""
    parts = [part.strip().rstrip("%").strip() for part in (text or "").split(",") if part.strip()]
    if not parts:
        raise InvalidInput(f"{what}: give percentages separated by commas, such as 0, 10, 50, 90, 99.")
    return [real_number(part, what, minimum=0, maximum=100) / 100 for part in parts]


def real_number(value, what: str, *, minimum: float, maximum: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidInput(f"{what} must be a number, not {quoted(value)}.") from None
    if not (math.isfinite(number) and minimum <= number <= maximum):
        raise InvalidInput(f"{what} must be between {minimum} and {maximum}, not {quoted(value)}.")
    return number


def model_spec(name: str | None, token: str | None, trust_remote_code: bool, dtype: str | None,
               policy: Policy) -> ModelSpec:
    """The model a visitor asked for; on a shared server a local folder must lie under the model root."""
    if name is not None and not isinstance(name, str):
        raise InvalidInput(f"A model is named by text (a Hugging Face id, a folder or a .gguf file), not "
                           f"{quoted(name)}.")
    name = _plain_name((name or "").strip()) or prune.DEFAULT_MODEL
    if dtype not in (None, "", "auto", "float32", "bfloat16", "float16"):
        raise InvalidInput(f"Unknown precision {quoted(dtype)}. Choose auto, float32, bfloat16 or float16.")
    if policy.shared and trust_remote_code:
        raise InvalidInput("This shared server runs no model code of its own (trust remote code is off here): "
                           "choose a model that transformers supports natively.")
    if policy.shared and not is_default(name) and _looks_like_path(name):
        root = policy.model_root
        if root is None or not _inside(name, root):
            raise shared_not_found(name)
    return ModelSpec(name=name, dtype=dtype or "auto", trust_remote_code=bool(trust_remote_code),
                     token=(token or "").strip() or None)


def _plain_name(name: str) -> str:
    """``name``, or a one-line message when no file system or hub could take it (too long, control characters)."""
    if len(name) > MAX_NAME_CHARS or any(len(part) > MAX_NAME_PART for part in name.split("/")):
        raise InvalidInput(f"The model name is too long ({len(name):,} characters): a Hugging Face id or a folder "
                           f"name has at most {MAX_NAME_PART} characters between slashes.")
    if any(ord(char) < 32 for char in name):
        raise InvalidInput("A model name has no control characters (tabs, line breaks, NUL).")
    return name


def shared_not_found(name: str) -> ModelNotFound:
    """The one message a shared server gives for any model it cannot load, so it tells nothing of its disk.

    When the Hub cannot be reached, asking for a Hugging Face id would not help: the message says so instead,
    whatever the name (a folder or an id alike).
    """
    from prune.core import loading

    if not loading.hub_reachable():
        return ModelNotFound(f"{quoted(name)} is not a model this server can load: the Hugging Face Hub cannot be "
                             "reached from this server (offline), so it loads only the embedded model and the "
                             "models it already holds.")
    return ModelNotFound(f"{quoted(name)} is not a model this server can load: give a Hugging Face model id "
                         "(gated models need a token).")


def _looks_like_path(name: str) -> bool:
    return (name.startswith(("/", ".", "~")) or "\\" in name or (name.count("/") > 1 and not is_hub_gguf(name))
            or local_path(name) is not None)


def _inside(name: str, root: Path) -> bool:
    try:
        return Path(name).expanduser().resolve().is_relative_to(root)
    except (OSError, RuntimeError, ValueError):  # "~nobody", a NUL byte
        return False


def prompt(text: str | None, policy: Policy) -> str:
    """The prompt, or a one-line message when it is empty or longer than this server allows."""
    if not (text or "").strip():
        raise InvalidInput("The prompt is empty: type something or pick an example.")
    if len(text) > policy.max_prompt_chars:
        raise InvalidInput(f"The prompt has {len(text):,} characters; this server takes at most "
                           f"{policy.max_prompt_chars:,}.")
    return text


def calibration(source: str, detail: str | None, upload: str | None, samples, seq_len, policy: Policy,
                default: prune.Calibration, bos: str = "auto") -> prune.Calibration:
    """The calibration a visitor chose; files come by upload on a shared server, and are read here."""
    if bos not in BOS_CHOICES:
        raise InvalidInput(f"BOS is one of: {', '.join(BOS_CHOICES)}.")
    return replace(_calibration(source, detail, upload, samples, seq_len, policy, default), bos=BOS_CHOICES[bos])


def _calibration(source, detail, upload, samples, seq_len, policy: Policy, default: prune.Calibration):
    if source not in CALIBRATION_SOURCES:
        raise InvalidInput(f"Unknown calibration source {quoted(source)}. "
                           f"Choose one of: {', '.join(CALIBRATION_SOURCES)}.")
    n = whole_number(samples, "Calibration samples", minimum=1, maximum=4096)
    length = whole_number(seq_len, "Tokens per sample", minimum=2, maximum=8192)
    detail = (detail or "").strip() or None
    if source == "default":
        return prune.Calibration(**{**default.__dict__, "n_samples": n, "seq_len": length})
    if source == "upload":
        if not upload:
            raise InvalidInput("Upload a text file to calibrate on.")
        return prune.Calibration(source="text", text=_read_upload(upload), n_samples=n, seq_len=length)
    if source == "file":
        if policy.shared:
            raise InvalidInput("This shared server reads no files from its disk: upload a text file instead.")
        if not detail:
            raise InvalidInput("Give the path of a text file to calibrate on.")
        path = Path(detail).expanduser()
        if path.is_dir():
            raise InvalidInput(f"{quoted(detail)} is a folder, not a text file.")
        if not path.is_file():
            raise InvalidInput(f"Calibration file {quoted(detail)} does not exist.")
        return prune.Calibration(source="file", path=str(path), n_samples=n, seq_len=length)
    if source == "hub":
        from prune.core.loading import hub_reachable

        hub_dataset(detail or "")  # a path or a packaged builder is refused before anything else
        if not hub_reachable():
            raise InvalidInput("The Hugging Face Hub cannot be reached (offline?): calibrate on the default or "
                               "built-in text, or upload a file.")
        return prune.Calibration(source="hub", dataset=detail, n_samples=n, seq_len=length)
    if source == "text":
        if detail and len(detail.encode()) > MAX_TEXT_BYTES:
            raise InvalidInput(f"The calibration text is longer than {MAX_TEXT_BYTES // 2**20} MiB; "
                               "a few hundred kilobytes are plenty.")
        return prune.Calibration(source="text", text=detail, n_samples=n, seq_len=length)
    if source == "wikitext2" and policy.shared and detail:
        raise InvalidInput("This shared server reads WikiText-2 from its own data folder only.")
    return prune.Calibration(source=source, n_samples=n, seq_len=length, **({"path": detail} if detail else {}))


def recipe(text, what: str, num_layers: int, policy: Policy, default: prune.Calibration) -> Recipe | None:
    """A recipe sent as the JSON ``Recipe.to_json`` writes (empty: none), for a model of ``num_layers``; a step's
    calibration is checked as the page checks a visitor's, so a recipe reaches no server file on a shared server."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if not isinstance(text, str) or len(text.encode()) > MAX_TEXT_BYTES:
        raise InvalidInput(f"{what} is a recipe's JSON text (at most {MAX_TEXT_BYTES // 2**20} MiB), "
                           f"such as an export's layercut.json \"recipe\".")
    try:
        found = Recipe.from_json(text)
    except LayerCutError as err:
        raise InvalidInput(f"{what}: {err}") from None
    if found.is_original:
        raise InvalidInput(f"{what} has no steps: the original is always compared; leave it empty for no column.")
    if found.num_layers not in (None, num_layers):
        raise InvalidCut(f"{what} was made for a {found.num_layers}-layer model; this model has {num_layers} layers.")
    return calibrated_steps(found, what, policy, default)


def calibrated_steps(found: Recipe, what: str, policy: Policy, default: prune.Calibration) -> Recipe:
    """``found`` once each step's calibration passes the check a visitor's calibration passes: a recipe that came
    from outside (the API, a saved comparison) reaches no server file on a shared server."""
    for step in found.steps:
        for value in vars(step).values():
            if isinstance(value, prune.Calibration):
                _step_calibration(value, what, policy, default)
    return found


def _step_calibration(cal: prune.Calibration, what: str, policy: Policy, default: prune.Calibration) -> None:
    if cal.source not in SOURCES:
        raise InvalidInput(f"{what}: unknown calibration source {quoted(cal.source)}.")
    if kept_by_digest(cal):
        raise InvalidInput(f"{what} was calibrated on a text kept by its digest only: give the text to rebuild it.")
    own_data = cal.source == "wikitext2" and cal.path in (None, default.path)  # this server's own folder
    detail = None if own_data else {"text": cal.text, "file": cal.path, "wikitext2": cal.path, "hub": cal.dataset}.get(
        cal.source)
    _calibration(cal.source, detail, None, cal.n_samples, cal.seq_len, policy, default)


def judge(text, remote_model, policy: Policy) -> JudgeChoice:
    """MT-Bench's judge as typed: empty for the original itself, a model (loaded as a visitor's model is: on a
    shared server no folder outside the model root), or an endpoint's URL where this server allows one."""
    if not all(value is None or isinstance(value, str) for value in (text, remote_model)):
        raise InvalidInput("The judge is named by text: a model, an endpoint's URL, or nothing (the original).")
    text = (text or "").strip()
    if text and "://" not in text and text != DEFAULT_JUDGE:
        text = model_spec(text, None, False, None, policy).name  # the checks a visitor's model passes
    return choose_judge(text, remote_model=(remote_model or "").strip() or MT_BENCH.remote_model,
                        shared=policy.shared)


def without_folder(message: str, folder: Path | None) -> str:
    """``message`` with this server's ``folder`` (the data folder) named as "<data folder>": no message names a
    folder of the server."""
    return message if folder is None else message.replace(str(folder), "<data folder>")


def task_names(text) -> list[str]:
    """'arc_easy, hellaswag' → the names (``lm_eval_adapter.check_request`` knows which exist)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("Name the benchmark tasks, separated by commas (such as arc_easy, hellaswag).")
    return [name.strip() for name in text.split(",") if name.strip()]


def saved_comparison(upload: str | None) -> Comparison:
    """A comparison saved by this page, from an uploaded file, every part checked
    (``evaluation.exports.comparison_file``)."""
    if not upload or not isinstance(upload, str):
        raise InvalidInput("Choose a saved comparison (a .json file) to open.")
    return Comparison.from_json(_read_upload(upload, COMPARISON_BYTES), SLOTS)


def _read_upload(path: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    file = Path(path)
    if file.stat().st_size > max_bytes:
        raise InvalidInput(f"The uploaded file is larger than {max_bytes // 2**20} MiB.")
    data = file.read_bytes()
    if b"\0" in data[:4096]:
        raise InvalidInput("The uploaded file is not text.")
    return data.decode("utf-8", errors="replace")


def parse_options(text: str, method) -> dict:
    """``"k=5, token=mean"`` → typed options (types follow the method's defaults), each a value the method takes."""
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
