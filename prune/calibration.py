"""Calibration text: small, deterministic and offline by default.

Sources: ``builtin`` (assets/calibration.txt, ships with LayerCut), ``text`` (given inline),
``file`` (a text file), ``wikitext2`` (WikiText-2 validation from the benchmark data
folder), or ``hub`` (a Hugging Face dataset, online only).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .errors import InvalidInput

BUILTIN_TEXT = Path(__file__).resolve().parent.parent / "assets" / "calibration.txt"
SOURCES = ("builtin", "text", "file", "wikitext2", "hub")


@dataclass(frozen=True)
class Calibration:
    """What to calibrate on; windows are consecutive non-overlapping token chunks."""

    source: str = "builtin"
    text: str | None = None  # for source="text"
    path: str | None = None  # for source="file", or the data folder for "wikitext2"
    dataset: str | None = None  # for source="hub": "name[:config]:split:column"
    n_samples: int = 16
    seq_len: int = 128

    def key(self) -> dict:
        """What identifies the calibration in caches (the text by hash, not by value)."""
        data = asdict(self)
        data["text"] = hashlib.sha256(load_text(self).encode()).hexdigest()[:16]
        return data


def load_text(cal: Calibration) -> str:
    """The raw calibration text for a source."""
    if cal.source == "builtin":
        return BUILTIN_TEXT.read_text()
    if cal.source == "text":
        if not (cal.text or "").strip():
            raise InvalidInput("The calibration text is empty.")
        return cal.text
    if cal.source == "file":
        return _read_file(cal.path)
    if cal.source == "wikitext2":
        return _read_file(Path(_data_dir(cal.path)) / "wikitext2" / "pytorch_examples_wikitext-2" / "valid.txt")
    if cal.source == "hub":
        return _hub_text(cal.dataset or "")
    raise InvalidInput(f"Unknown calibration source '{cal.source}'. Choose one of: {', '.join(SOURCES)}.")


def token_windows(tokenizer, cal: Calibration) -> torch.Tensor:
    """Up to ``n_samples`` windows of ``seq_len`` tokens → [N, T] input ids (no padding)."""
    if cal.n_samples < 1 or cal.seq_len < 2:
        raise InvalidInput("Calibration needs at least 1 sample of at least 2 tokens.")
    ids = tokenizer(load_text(cal), add_special_tokens=False)["input_ids"]
    if len(ids) < 2:
        raise InvalidInput("The calibration text is too short: it needs at least a few words.")
    seq_len = min(cal.seq_len, len(ids))
    count = max(1, min(cal.n_samples, len(ids) // seq_len))
    return torch.tensor(ids[: count * seq_len]).view(count, seq_len)


def _read_file(path) -> str:
    if not path:
        raise InvalidInput("No calibration file was given.")
    file = Path(path).expanduser()
    if not file.is_file():
        raise InvalidInput(f"Calibration file '{file}' does not exist.")
    return file.read_text(errors="replace")


def _data_dir(path) -> str:
    if path:
        return path
    from evaluation.offline_tasks import default_data_dir

    found = default_data_dir()
    if found is None:
        raise InvalidInput("No benchmark data folder is configured: set LAYERCUT_DATA_DIR.")
    return str(found)


def _hub_text(spec: str, max_chars: int = 400_000) -> str:
    """Text from a hub dataset, ``name[:config]:split:column``; needs the network."""
    parts = spec.split(":")
    if len(parts) not in (3, 4):
        raise InvalidInput("Hub calibration is written name[:config]:split:column, e.g. wikitext:wikitext-2-raw-v1:validation:text.")
    name, config, split, column = parts if len(parts) == 4 else (parts[0], None, parts[1], parts[2])
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise InvalidInput("Hub calibration needs the network; use the built-in text or a file offline.")
    try:
        import datasets

        rows = datasets.load_dataset(name, config, split=split)
    except Exception as err:  # the datasets library raises many types for a missing dataset
        raise InvalidInput(f"Could not load hub dataset '{spec}': {str(err).splitlines()[0]}") from None
    text, size = [], 0
    for value in rows[column]:
        text.append(value)
        size += len(value)
        if size >= max_chars:
            break
    return "\n".join(text)
