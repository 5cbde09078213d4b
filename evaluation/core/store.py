"""The results cache: one JSON file per result, keyed by everything that changes it.

Files live under ``prune.core.paths.cache_root()/results``, named by a digest of the key (model
fingerprint, cut, task, limit, few-shot, seed, scorer, data fingerprint… plus the versions
of LayerCut, torch, transformers and lm-eval). Writes are atomic (temp file + rename); a
file that is unreadable, half-written or not in the expected layout is a miss, never an
error, so a crash can only cost a recomputation.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from prune.core.version import __version__
from prune.core.paths import cache_root, digest, read_json, safe_name, write_atomic

FORMAT = 1  # bump when the stored layout changes


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """Versions of everything whose upgrade could change a measured value."""
    found = {"layercut": __version__, "format": str(FORMAT)}
    for package in ("torch", "transformers", "lm_eval", "datasets", "tokenizers"):
        try:
            found[package] = version(package.replace("_", "-"))
        except PackageNotFoundError:
            found[package] = "absent"
    return found


class ResultStore:
    """A folder of cached results; ``enabled=False`` neither reads nor writes (``--no_cache``)."""

    def __init__(self, root: Path | None = None, enabled: bool = True):
        self._root = Path(root) if root is not None else None
        self.enabled = enabled

    @property
    def root(self) -> Path:
        return self._root if self._root is not None else cache_root() / "results"

    def path(self, key: dict) -> Path:
        full = {**key, "versions": versions()}
        kind = safe_name(str(key.get("kind", "result")), 40)
        return self.root / f"{kind}-{digest(full)}.json"

    def get(self, key: dict):
        """The stored payload for ``key``, or None (absent, disabled, or unreadable)."""
        if not self.enabled:
            return None
        data = read_json(self.path(key))
        if not isinstance(data, dict) or data.get("format") != FORMAT or "payload" not in data:
            return None
        return data["payload"]

    def put(self, key: dict, payload) -> None:
        """Store ``payload`` (JSON-serialisable) atomically; a no-op when disabled."""
        if not self.enabled:
            return
        record = {"format": FORMAT, "key": key, "versions": versions(), "payload": payload}
        write_atomic(self.path(key), json.dumps(record, default=str))
