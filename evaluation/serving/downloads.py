"""Where a visitor's exports are written, how they are offered, and how long they stay.

A personal machine writes ``<cache>/exports/<name>`` and keeps it (the user's own disk); Gradio
offers its zip, ``<name>.zip`` beside it, through its allowed paths (by a copy in its cache). An
export's zip is counted and removed with its folder.

A shared server writes each visitor's exports to a private folder inside Gradio's cache,
``<gradio cache>/layercut-exports/<key>/<name>``, where ``key`` is a keyed digest of the visitor's
session (128 bits, with a secret made anew by each server process). So two visitors' names never
collide, nobody can guess another's folder, the folder is no allowed path (a plain GET of a
predictable path is refused), and Gradio serves the files where they lie instead of copying them:
the link the owner's page receives is the only way to them. An export goes after ``max_age_s`` (an
hour: as long as Gradio keeps a closed page's state, so a page that only lost its connection for a
moment still finds it), or oldest first when newer ones need the disk budget; a server's whole
folder goes when it stops (or, if it was killed, when the next one starts).

Either way Gradio's cache (uploads, and the copies of a personal machine's downloads) is kept
under ``cache_budget_bytes``, oldest first, beside Gradio's own removal by age.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from evaluation.exports import folder as exports
from evaluation.measure.memory import folder_bytes
from prune.core.paths import cache_root

SHARED_FOLDER = "layercut-exports"
EXPORTS_BUDGET_BYTES = 8 * 2**30  # older exports are removed past this
CACHE_BUDGET_BYTES = 4 * 2**30  # Gradio's cache beside the exports
DOWNLOAD_LIMIT_BYTES = 2 * 2**30  # larger exports are not offered for download
MAX_AGE_S = 3600  # a shared server's exports
RECENT_S = 300  # Gradio's newest entries are never removed: an upload may be about to be read


@dataclass(frozen=True)
class Downloads:
    """The exports of one server: ``folder(owner)`` to write one, ``tidy`` after."""

    shared: bool
    root: Path
    gradio_cache: Path
    exports_budget_bytes: int = EXPORTS_BUDGET_BYTES
    cache_budget_bytes: int = CACHE_BUDGET_BYTES
    max_age_s: float = MAX_AGE_S
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False, compare=False)

    @classmethod
    def for_server(cls, shared: bool, gradio_cache: Path, **budgets) -> Downloads:
        """This process's exports beside Gradio's cache; a shared server starts from an empty folder and removes it
        at exit."""
        if not shared:
            root = cache_root() / "exports"
            exports.remove_leftovers(root)  # a killed export's staging folders
            return cls(False, root, gradio_cache, **budgets)
        root = gradio_cache / SHARED_FOLDER
        shutil.rmtree(root, ignore_errors=True)  # a killed server's visitors are gone with their keys
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        return cls(True, root, gradio_cache, **budgets)

    def folder(self, owner: str | None) -> Path:
        """Where ``owner``'s exports go: the one exports folder, or on a shared server their private one."""
        if not self.shared:
            return self.root
        digest = hmac.new(self._key, (owner or "").encode(), hashlib.sha256).hexdigest()[:32]
        return self.root / digest

    def tidy(self, keep: Path | None = None) -> list[Path]:
        """Remove exports past their age (shared) or the budget, never ``keep``; then bound Gradio's cache."""
        removed = []
        found = self._exports()
        if self.shared:
            expired = [p for p in found if p != keep and time.time() - _mtime(p) > self.max_age_s]
            for folder in expired:
                exports.remove_export(folder)
            removed += expired
            found = [p for p in found if p not in expired]
        total = sum(exports.export_bytes(p) for p in found)
        for folder in sorted((p for p in found if p != keep), key=_mtime):
            if total <= self.exports_budget_bytes:
                break
            total -= exports.remove_export(folder)
            removed.append(folder)
        bound_cache(self.gradio_cache, self.cache_budget_bytes, skip=self.root)
        return removed

    def offered(self, size: int) -> bool:
        """Whether an export of ``size`` bytes is offered for download here."""
        return size <= min(DOWNLOAD_LIMIT_BYTES, self.exports_budget_bytes)

    def _exports(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        folders = [self.root] if not self.shared else [p for p in self.root.iterdir() if p.is_dir()]
        return [p for folder in folders for p in folder.iterdir()
                if not p.name.startswith(".") and exports.is_export(p)]


def bound_cache(cache: Path, max_bytes: int, skip: Path | None = None) -> list[Path]:
    """Remove the oldest entries of Gradio's cache (never ``skip``, never the last few minutes') past ``max_bytes``."""
    if not cache.is_dir():
        return []
    entries = [p for p in cache.iterdir() if p != skip and not p.is_symlink()]
    sizes = {p: _bytes(p) for p in entries}
    total = sum(sizes.values())
    removed = []
    for entry in sorted(entries, key=_mtime):
        if total <= max_bytes or time.time() - _mtime(entry) < RECENT_S:
            break
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        total -= sizes[entry]
        removed.append(entry)
    return removed


def _bytes(path: Path) -> int:
    try:
        return folder_bytes(path) if path.is_dir() else path.stat().st_size
    except OSError:  # removed meanwhile
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
