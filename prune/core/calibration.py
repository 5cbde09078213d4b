"""Calibration text: deterministic and offline by default.

Sources: ``builtin`` (ships with LayerCut as package data in ``prune/core/texts/``: calibration.txt, short
varied modern prose, then alice.txt, Lewis Carroll's *Alice's Adventures in Wonderland*, public domain: the
Canterbury corpus's alice29.txt from PyPI's brotli 1.2.1 sdist, one line per paragraph,
backquotes made apostrophes),
``text`` (given inline), ``file`` (a text file), ``wikitext2`` (WikiText-2 validation from
the benchmark data folder), or ``hub`` (a Hugging Face dataset, online only).
:func:`default_calibration` picks WikiText-2 when the data folder has it, else ``builtin``.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from prune.core.errors import InvalidInput, quoted
from prune.core.paths import default_data_dir, local_path

TEXTS = Path(__file__).resolve().parent / "texts"  # package data: installed beside this module
BOOK = TEXTS / "alice.txt"  # also the book of the CBT-style questions
BUILTIN_TEXTS = (TEXTS / "calibration.txt", BOOK)
WIKITEXT2_VALID = Path("wikitext2") / "pytorch_examples_wikitext-2" / "valid.txt"  # inside the data folder
SOURCES = ("builtin", "text", "file", "wikitext2", "hub")
HUB_FORMAT = "name[:config]:split:column, e.g. Salesforce/wikitext:wikitext-2-raw-v1:validation:text"
_HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
_HUB_PART = re.compile(r"[A-Za-z0-9_.\-\[\]%+ ]{1,100}")
BOS_CHOICES = {"auto": None, "on": True, "off": False}  # how the UI and the CLI name Calibration.bos


@dataclass(frozen=True)
class Calibration:
    """What to calibrate on: ``n_samples`` windows of ``seq_len`` tokens spread evenly over the text."""

    source: str = "builtin"
    text: str | None = None  # for source="text"
    path: str | None = None  # for source="file", or the data folder for "wikitext2"
    dataset: str | None = None  # for source="hub": "name[:config]:split:column"
    n_samples: int = 32
    seq_len: int = 128
    # Prepend the tokenizer's BOS to every window (Gemma needs it; the papers' codes tokenise with it).
    # None: when the tokenizer adds one by default.
    bos: bool | None = None

    def key(self) -> dict:
        """What identifies the calibration in caches (the text by hash, not by value)."""
        data = asdict(self)
        data["text"] = hashlib.sha256(load_text(self).encode()).hexdigest()[:16]
        return data


def default_calibration(data_dir: Path | str | None) -> Calibration:
    """WikiText-2 validation when the data folder has it, else the built-in text: short texts mislead methods."""
    if data_dir is not None and (Path(data_dir) / WIKITEXT2_VALID).is_file():
        return Calibration(source="wikitext2", path=str(data_dir))
    return Calibration()


def load_text(cal: Calibration) -> str:
    """The raw calibration text for a source."""
    if cal.source == "builtin":
        return "\n\n".join(path.read_text() for path in BUILTIN_TEXTS)
    if cal.source == "text":
        if not (cal.text or "").strip():
            raise InvalidInput("The calibration text is empty.")
        return cal.text
    if cal.source == "file":
        return _read_file(cal.path)
    if cal.source == "wikitext2":
        return _read_file(Path(_data_dir(cal.path)) / WIKITEXT2_VALID)
    if cal.source == "hub":
        return _hub_text(cal.dataset or "")
    raise InvalidInput(f"Unknown calibration source {quoted(cal.source)}. Choose one of: {', '.join(SOURCES)}.")


def token_windows(tokenizer, cal: Calibration) -> torch.Tensor:
    """Up to ``n_samples`` non-overlapping windows of ``seq_len`` tokens → [N, T] input ids (no padding).

    The windows are spread evenly from the text's start to its end, so a long text is sampled
    across all its topics rather than read only from its first pages.
    """
    if cal.n_samples < 1 or cal.seq_len < 2:
        raise InvalidInput("Calibration needs at least 1 sample of at least 2 tokens.")
    ids = torch.tensor(tokenizer(load_text(cal), add_special_tokens=False)["input_ids"])
    if len(ids) < 2:
        raise InvalidInput("The calibration text is too short: it needs at least a few words.")
    bos = bos_token(tokenizer, cal)
    seq_len = min(cal.seq_len - (bos is not None), len(ids))  # a window with BOS still has seq_len tokens
    count = max(1, min(cal.n_samples, len(ids) // seq_len))
    starts = torch.linspace(0, len(ids) - seq_len, count).round().long()  # one window: the start
    windows = torch.stack([ids[start : start + seq_len] for start in starts.tolist()])
    return windows if bos is None else torch.cat([torch.full((count, 1), bos), windows], dim=1)


def bos_token(tokenizer, cal: Calibration) -> int | None:
    """The BOS id to prepend to each window or text, or None (``cal.bos`` None: as the tokenizer does)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if cal.bos is True and bos is None:
        raise InvalidInput("This tokenizer has no BOS token to prepend: set BOS to auto or off.")
    if bos is None or cal.bos is False:
        return None
    if cal.bos is None:
        first = tokenizer("a")["input_ids"][:1]
        return bos if first == [bos] else None
    return bos


def _read_file(path) -> str:
    if not path:
        raise InvalidInput("No calibration file was given.")
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidInput(f"Calibration file {quoted(str(file))} does not exist.")
    return file.read_text(errors="replace")


def _data_dir(path) -> str:
    if path:
        return path
    found = default_data_dir()
    if found is None:
        raise InvalidInput("No benchmark data folder is configured: set LAYERCUT_DATA_DIR.")
    return str(found)


def hub_dataset(spec: str) -> tuple[str, str | None, str, str]:
    """``name[:config]:split:column`` → its parts, when ``name`` can only mean a dataset on the Hub.

    The datasets library also reads local folders, files and packaged builders (csv, json, …) by
    that argument; "hub" means the Hub, so those are refused here (local text comes by file or upload).
    A name that exists on this machine gets the same words as a malformed one: nothing is told of the disk.
    """
    parts = (spec or "").split(":")
    refused = InvalidInput(f"{quoted(spec)} is not a Hugging Face dataset: write hub calibration as {HUB_FORMAT}.")
    if len(parts) not in (3, 4):
        raise refused
    name, config, split, column = parts if len(parts) == 4 else (parts[0], None, parts[1], parts[2])
    on_disk = local_path(name) or local_path(name.split("/")[0])  # the datasets library would read it
    if not _HUB_NAME.fullmatch(name) or ".." in name or name.lower() in _packaged_builders() or on_disk:
        raise refused
    if not all(_HUB_PART.fullmatch(part) for part in (split, column, *((config,) if config is not None else ()))):
        raise refused
    return name, config, split, column


def _packaged_builders() -> set[str]:
    try:
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES
    except ImportError:
        return set()
    return set(_PACKAGED_DATASETS_MODULES)


def _hub_text(spec: str, max_chars: int = 400_000) -> str:
    """Text from a hub dataset, ``name[:config]:split:column``; needs the network."""
    name, config, split, column = hub_dataset(spec)
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise InvalidInput("Hub calibration needs the network; use the built-in text or a file offline.")
    try:
        import datasets

        rows = datasets.load_dataset(name, config, split=split)
    except Exception as err:  # the datasets library raises many types for a missing dataset
        raise InvalidInput(f"Could not load hub dataset {quoted(spec)}: {str(err).splitlines()[0]}") from None
    text, size = [], 0
    for value in rows[column]:
        text.append(value)
        size += len(value)
        if size >= max_chars:
            break
    return "\n".join(text)
