"""GGUF models in: a ``.gguf`` file (a path, or a Hub id and a file name) loads like any model.

transformers reads a GGUF (``from_pretrained(folder, gguf_file=...)``) by dequantizing every tensor to float: the
first load converts the file once into a plain safetensors folder in LayerCut's cache (as the embedded default is),
and later loads read that folder. The folder records the GGUF it came from (:data:`SOURCE_FILE`), so a GGUF export of
a model loaded this way carries the original file's tokenizer verbatim.

Names: a path ending in ``.gguf`` to an existing file, or ``owner/repo/file.gguf`` (a file at the top of a Hub
repository, ``hf_hub_download``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from prune.core.errors import LayerCutError, ModelNotFound, UnsupportedArchitecture, quoted
from prune.core.failures import as_user_errors
from prune.core.paths import cache_root, digest, local_path

log = logging.getLogger(__name__)

SUFFIX = ".gguf"
SOURCE_FILE = "layercut-gguf.json"  # in a converted folder: {"gguf": the file it came from}
_HUB_FILE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)/(?P<file>[\w.-]+\.gguf)$", re.IGNORECASE)


@dataclass(frozen=True)
class GgufFile:
    """Where a GGUF is: a local folder or a Hub repository, and the file's name in it."""

    where: str
    file: str
    hub: bool

    @property
    def key(self) -> dict:
        """What identifies its content: the Hub's (repo, file), or a local file's path, size and time."""
        if self.hub:
            return {"repo": self.where, "file": self.file}
        stat = (Path(self.where) / self.file).stat()
        return {"path": str(Path(self.where, self.file)), "bytes": stat.st_size, "mtime": stat.st_mtime_ns}


def gguf_file(name: str | None) -> GgufFile | None:
    """The GGUF ``name`` names (an existing local file, or ``owner/repo/file.gguf`` on the Hub), or None."""
    text = str(name or "").strip()
    if not text.lower().endswith(SUFFIX):
        return None
    local = local_path(text)
    if local is not None and local.is_file():
        resolved = local.resolve()
        return GgufFile(str(resolved.parent), resolved.name, hub=False)
    found = _HUB_FILE.match(text)
    if found is None or ".." in text:
        raise ModelNotFound(f"{quoted(text, limit=255)} is neither an existing .gguf file nor a Hub GGUF named "
                            f"owner/repo/file.gguf.")
    return GgufFile(found["repo"], found["file"], hub=True)


def is_hub_gguf(name: str) -> bool:
    """Whether ``name`` reads as ``owner/repo/file.gguf`` (a Hub GGUF, not a path on this machine)."""
    return bool(_HUB_FILE.match(name)) and local_path(name) is None


def gguf_config(found: GgufFile, hub: dict):
    """The model's config read from the file's metadata (no tensor is read), or a one-line refusal."""
    from transformers import AutoConfig

    with _readable(found):
        return AutoConfig.from_pretrained(found.where, gguf_file=found.file, **hub)


def converted_folder(found: GgufFile, hub: dict) -> str:
    """The GGUF dequantized to float32 in a safetensors folder, converted on the first call and cached."""
    folder = folder_for(found)
    if not (folder / "config.json").exists():
        convert(found.where, found.file, folder, hub if found.hub else None)
    return str(folder)


def folder_for(found: GgufFile) -> Path:
    """Where the GGUF's converted folder is (or will be) in the cache."""
    return cache_root() / "models" / f"gguf-{digest(found.key)}"


def convert(where: str, file: str, folder: Path, hub: dict | None = None, name: str | None = None) -> None:
    """Dequantize ``where``/``file`` (a folder, or a Hub repository with ``hub``'s arguments) into ``folder``
    (written beside it, then renamed: a reader never sees half of it), recording the GGUF's local path in it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    log.info("Dequantizing %s once (cached at %s)…", file, folder)
    with _readable(GgufFile(where, file, hub=hub is not None)), _parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=file, **(hub or {}))
        model = AutoModelForCausalLM.from_pretrained(where, gguf_file=file, dtype=torch.float32, **(hub or {}))
        path = Path(where, file) if hub is None else Path(_hub_path(where, file, hub))
    # The GGUF quantizer marker blocks save_pretrained; the weights are plain float32 by now.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if name is not None:
        model.config.name_or_path = name
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".staging-"))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / SOURCE_FILE).write_text(json.dumps({"gguf": str(path)}))
        if (folder / "config.json").exists():  # another process finished first
            shutil.rmtree(staging)
        else:
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("Converted %s in %.1f s", file, time.perf_counter() - started)


class _Once(threading.local):
    """Within :func:`_parsed_once` on this thread: each GGUF's parsed reader and each tensor-name map, by their
    arguments; elsewhere (``readers`` None) nothing is kept."""

    readers: dict | None = None
    maps: dict | None = None


_ONCE = _Once()
_INSTALL = threading.Lock()


@contextmanager
def _parsed_once():
    """transformers parses a GGUF's metadata anew for its config, its tokenizer and its weights (a 49 k-token
    vocabulary: seconds each) and builds the tensor-name map anew for every tensor: within this block, on this
    thread, ``gguf.GGUFReader`` and ``gguf.get_tensor_name_map`` (which it imports at each call) answer each
    argument once. The embedded default's first conversion: 18 s → 8 s on 2 cores."""
    import gguf

    with _INSTALL:
        if not getattr(gguf.GGUFReader, "layercut_once", False):
            gguf.GGUFReader = _once(gguf.GGUFReader, "readers")
            gguf.get_tensor_name_map = _once(gguf.get_tensor_name_map, "maps")
    _ONCE.readers, _ONCE.maps = {}, {}
    try:
        yield
    finally:
        _ONCE.readers = _ONCE.maps = None


def _once(make, kept: str):
    def made(*args, **kwargs):
        memo = getattr(_ONCE, kept)
        if memo is None:
            return make(*args, **kwargs)
        key = (args, tuple(sorted(kwargs.items())))
        if key not in memo:
            memo[key] = make(*args, **kwargs)
        return memo[key]

    made.layercut_once = True
    return made


def source_gguf(folder: str | Path | None) -> Path | None:
    """The GGUF a converted folder came from, if it still exists (its tokenizer goes into a GGUF export)."""
    if folder is None:
        return None
    try:
        path = Path(json.loads((Path(folder) / SOURCE_FILE).read_text())["gguf"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return path if path.is_file() else None


def _hub_path(repo: str, file: str, hub: dict) -> str:
    from huggingface_hub import hf_hub_download

    return hf_hub_download(repo, file, token=hub.get("token"), revision=hub.get("revision"),
                           local_files_only=bool(hub.get("local_files_only")))


def _readable(found: GgufFile):
    """The shared one-line failures (:func:`prune.core.failures.as_user_errors`), and before them transformers' errors
    on a GGUF: an architecture it cannot read, a file it cannot find or read."""
    named = quoted(found.file, limit=255)

    def recognise(err: Exception) -> LayerCutError | None:
        if not isinstance(err, (ValueError, OSError, KeyError)):
            return None
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

        wrong = re.search(r"architecture (\S+) is not supported", str(err))
        if wrong:
            return UnsupportedArchitecture(
                f"transformers cannot read GGUF files of the {wrong[1]} architecture ({named}); it reads "
                f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}.")
        if isinstance(err, OSError):
            return ModelNotFound(f"The GGUF {named} was not found{' on the Hugging Face Hub' if found.hub else ''}"
                                 f" or cannot be read.")
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return ModelNotFound(f"The GGUF {named} cannot be read by transformers: {first}")

    return as_user_errors(f"the reading of {named}", recognise)
