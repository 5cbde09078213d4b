"""Exports: a derived model saved as a normal Hugging Face folder, with a model card and the same
cut written for mergekit and llama.cpp (and, when asked, the model as one GGUF file), made atomically and kept
within a disk budget.

Dropped attention/MLP blocks are saved as zeros and recorded in the config (``prune.drop.sublayers``):
any transformers loads the folder with the same outputs, ``prune.load_model`` drops them again.

An export is built in a hidden staging folder beside its target and renamed into place, so a
reader never sees half a checkpoint; a killed export leaves only a hidden ``*.layercut-partial``
folder that :func:`remove_leftovers` clears. A folder is a LayerCut export when it holds the
marker file ``layercut.json``; nothing else is ever replaced or removed.
The texts inside (card, mergekit config, llama.cpp argument) come from :mod:`evaluation.exports.texts`.
:func:`zipped` packs a finished export as one ``<name>.zip`` beside it (one download); the zip goes with its
folder when the folder is removed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import psutil
from torch import nn

import prune
from prune.core.calibration import Calibration
from prune.core.errors import InvalidCut, InvalidInput, quoted
from prune.core.paths import write_atomic
from prune.core.recipe import CONFIG_FIELD, Recipe
from prune.drop.sublayers import dropped

from evaluation.core.jobs import Progress
from evaluation.exports import gguf_file, scale_out
from evaluation.exports.gguf_tokenizer import tokenizer_refusal
from evaluation.exports.texts import (LLAMA_FILE, MAX_NAME, MERGEKIT_FILE, base_layers_removed, llama_file_text,
                                      llama_refusal, mergekit_yaml, model_card, model_dtype, tools_read)
from evaluation.measure.measurement import Measurement
from evaluation.measure.memory import folder_bytes, save_checkpoint

MARKER = "layercut.json"  # present in every finished export, and only there
CARD = "README.md"
PARTIAL = ".layercut-partial"  # suffix of staging folders and of exports being replaced or removed

_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,%d}" % (MAX_NAME - 1))
_LEFTOVER = re.compile(r"\..+-(?P<pid>\d+)-[0-9a-f]{8}" + re.escape(PARTIAL))


# ---------------------------------------------------------------- names


def check_export_name(name: str) -> str:
    """A folder name as typed, or a clear error: names are never silently changed."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            f"{quoted(name)} is not a valid export name: use 1–{MAX_NAME} letters, digits, '.', '_' or '-', "
            "not starting with '.'."
        )
    return name


def export(model: nn.Module, tokenizer, recipe: Recipe, *, base_name: str, num_layers: int, target: Path,
           scores: list[Measurement] | None = None, origin: str = "", factored: bool = False,
           gguf: str | None = None, tokenizer_gguf: str | None = None, gguf_quantizer: str | None = None,
           gguf_calibration: Calibration | None = None, progress: Progress | None = None) -> Path:
    """Save the derived model, tokenizer, card and tool configs at ``target``, all or nothing.

    ``model`` is ``recipe.apply(base)``; ``origin`` says where the base weights came from (a Hub id,
    folder or GGUF file) for the card. ``target`` may be new, empty, or an earlier LayerCut export.
    Low-rank projections are saved merged into dense matrices (any transformers loads them), or, with
    ``factored``, as their factors (smaller; ``prune.load_model`` only). ``gguf``: also write the model as
    ``<name>.<type>.gguf`` of that GGUF type (:mod:`evaluation.exports.gguf_file`), checked before anything is
    written, by ``gguf_quantizer`` (default: the type's own), llama.cpp's with an importance matrix from
    ``gguf_calibration`` if given; ``tokenizer_gguf``: the GGUF the base model came from, whose tokenizer it copies;
    ``progress`` hears of that work and may raise to stop it.
    """
    target = Path(target).expanduser()
    check_export_name(target.name)
    if recipe.is_original:
        raise InvalidInput("Nothing to export: the recipe is the original model.")
    if (getattr(model.config, CONFIG_FIELD, None) or {}).get("steps") != recipe.to_json()["steps"]:
        raise InvalidInput(f"The model given was not derived by this recipe ({recipe.describe()}).")
    removed = base_layers_removed(recipe)
    made_for = getattr(recipe.steps[0], "num_layers", num_layers)
    if made_for != num_layers:
        raise InvalidCut(f"This recipe was made for a {made_for}-layer model, not {num_layers}.")
    gguf_name = None if gguf is None else check_gguf(model, tokenizer, gguf, target.name, tokenizer_gguf,
                                                     gguf_quantizer)
    target.parent.mkdir(parents=True, exist_ok=True)
    _check_replaceable(target)
    staging = _partial_path(target)
    staging.mkdir()
    try:
        save_checkpoint(model, tokenizer, staging, factored=factored)
        _record_recipe(staging / "config.json", recipe)
        config = json.loads((staging / "config.json").read_text())
        write_atomic(staging / scale_out.FILE, scale_out.scale_out(f"./{target.name}", config, recipe,
                                                                   factored=factored).markdown())
        written = None if gguf_name is None else gguf_file.write(
            model, tokenizer, staging / gguf_name, gguf, quantizer=gguf_quantizer, tokenizer_gguf=tokenizer_gguf,
            calibration=gguf_calibration, progress=progress)
        write_atomic(staging / CARD, model_card(model, recipe, base_name=base_name, num_layers=num_layers,
                                                name=target.name, scores=scores, origin=origin, factored=factored,
                                                gguf=gguf_name, gguf_note=written.note() if written else ""))
        refused = llama_refusal(model) if removed is not None else None  # llama.cpp would run this cut wrong
        if removed is not None and tools_read(model):
            write_atomic(staging / MERGEKIT_FILE, mergekit_yaml(recipe, base_name, model_dtype(model)))
            if refused is None:
                write_atomic(staging / LLAMA_FILE, llama_file_text(recipe, base_name))
        write_atomic(staging / MARKER, json.dumps({
            "base_model": base_name, "origin": origin, "recipe": recipe.to_json(), "description": recipe.describe(),
            "removed_layers": list(removed) if removed is not None else None, "dropped_blocks": dropped(model),
            "llama_cpp_refused": refused,
            "layercut_version": prune.__version__, "created": datetime.now(timezone.utc).isoformat()}, indent=1))
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def check_gguf(model: nn.Module, tokenizer, file_type: str, name: str, tokenizer_gguf: str | None = None,
               quantizer: str | None = None) -> str:
    """The GGUF file's name in the export, ``<name>.<type>.gguf``, or a one-line refusal: an unknown type or one its
    quantizer cannot write here (:func:`evaluation.exports.gguf_file.quantizer_for`), a model the GGUF writer cannot
    express (:func:`evaluation.exports.gguf_file.refusal`: LayerCut's writer's, or llama.cpp's converter's for the
    architectures it converts), or a tokenizer LayerCut's writer cannot convert (when the model did not come from a GGUF
    whose tokenizer it copies; the converter reads the saved tokenizer itself)."""
    gguf_file.quantizer_for(file_type, quantizer)
    own_tokenizer = tokenizer_gguf is None and not gguf_file.converted(model)
    refusal = gguf_file.refusal(model) or (tokenizer_refusal(tokenizer) if own_tokenizer else None)
    if refusal is not None:
        raise InvalidInput(f"No GGUF for this model: {refusal}")
    return f"{name}.{file_type}.gguf"


def zipped(folder: Path) -> Path:
    """The export ``folder`` as one zip beside it, ``<name>.zip`` holding ``<name>/…``, written all or nothing.

    Stored, not compressed: weights barely compress, and storing costs only the copy.
    """
    folder = Path(folder)
    if not is_export(folder):
        raise InvalidInput(f"'{folder.name}' is not a LayerCut export: nothing to zip.")
    target, staging = zip_path(folder), _partial_path(zip_path(folder))
    try:
        with zipfile.ZipFile(staging, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
            for file in sorted(p for p in folder.rglob("*") if p.is_file()):
                archive.write(file, f"{folder.name}/{file.relative_to(folder).as_posix()}")
        os.replace(staging, target)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return target


def zip_path(folder: Path) -> Path:
    """Where :func:`zipped` puts the zip of the export ``folder``."""
    return folder.with_name(folder.name + ".zip")


def export_bytes(folder: Path) -> int:
    """Bytes an export holds on disk: its folder and its zip, if any."""
    archive = zip_path(folder)
    return folder_bytes(folder) + (archive.stat().st_size if archive.is_file() else 0)


def _record_recipe(config_file: Path, recipe: Recipe) -> None:
    """This recipe's own origin in the saved config: a cached variant may carry another caller's."""
    config = json.loads(config_file.read_text())
    config[CONFIG_FIELD] = recipe.to_json()
    write_atomic(config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")


def is_export(folder: Path) -> bool:
    """Whether ``folder`` is a finished LayerCut export (the only kind ever replaced or removed)."""
    return folder.is_dir() and not folder.is_symlink() and (folder / MARKER).is_file()


def _check_replaceable(target: Path) -> None:
    """Refuse anything at ``target`` but nothing, an empty folder or an earlier LayerCut export."""
    if target.is_symlink() or (target.exists() and not (
            target.is_dir() and (is_export(target) or not any(target.iterdir())))):
        raise InvalidInput(f"Refusing to overwrite '{target.name}': it exists and is not a LayerCut export.")


def _partial_path(target: Path) -> Path:
    """A fresh hidden name beside ``target`` that says which process owns it."""
    return target.parent / f".{target.name}-{os.getpid()}-{secrets.token_hex(4)}{PARTIAL}"


def _swap_in(staging: Path, target: Path) -> None:
    """Rename the finished folder into place; an earlier export there is hidden first, then removed."""
    _check_replaceable(target)  # again: the folder may have changed while the model was saved
    old = None
    if target.exists() and any(target.iterdir()):
        old = _partial_path(target)
        os.rename(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- housekeeping


def remove_leftovers(root: Path) -> int:
    """Remove the hidden folders (and zips) of exports whose process died; returns how many were removed."""
    root = Path(root)
    if not root.is_dir():
        return 0
    removed = 0
    for entry in root.iterdir():
        found = _LEFTOVER.fullmatch(entry.name)
        if not found or entry.is_symlink():
            continue
        pid = int(found["pid"])
        if pid == os.getpid() or psutil.pid_exists(pid):
            continue  # an export still in progress
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        removed += 1
    return removed


def bound_folder(root: Path, max_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the oldest LayerCut exports (never ``keep``) until ``root`` holds at most ``max_bytes``."""
    root = Path(root)
    keep = Path(keep).resolve() if keep is not None else None
    exports = sorted((p for p in root.iterdir() if not p.name.startswith(".") and is_export(p)
                      and p.resolve() != keep), key=lambda p: (p / MARKER).stat().st_mtime)
    total = folder_bytes(root)
    removed = []
    for folder in exports:
        if total <= max_bytes:
            break
        total -= remove_export(folder)
        removed.append(folder)
    return removed


def remove_export(folder: Path) -> int:
    """Remove one export and its zip so that no reader sees half of it; returns the bytes they held."""
    size = export_bytes(folder)
    zip_path(folder).unlink(missing_ok=True)
    hidden = _partial_path(folder)
    os.rename(folder, hidden)
    shutil.rmtree(hidden, ignore_errors=True)
    return size


def model_files_bytes(folder: Path) -> int:
    """Bytes of a saved checkpoint's weights and config files (tokenizer, card and marker left out)."""
    return sum(p.stat().st_size for p in Path(folder).iterdir()
               if p.is_file() and (p.suffix == ".safetensors" or p.name in ("config.json", "generation_config.json")
                                   or p.name.endswith(".index.json")))
