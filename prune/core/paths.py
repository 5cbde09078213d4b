"""Where LayerCut keeps its caches and finds its data, and sanitising of user-given names."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from prune.core.errors import InvalidInput, quoted

CACHE_ENV = "LAYERCUT_CACHE"
DATA_DIR_ENV = "LAYERCUT_DATA_DIR"
REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout, or site-packages when installed


def cache_root() -> Path:
    """``$LAYERCUT_CACHE`` or ``~/.cache/layercut``: models, analyses, results and converted tasks live here."""
    root = Path(os.environ.get(CACHE_ENV) or "~/.cache/layercut").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def default_data_dir() -> Path | None:
    """Where the benchmark data is (``$LAYERCUT_DATA_DIR``, else ``../shared/benchdata`` beside a checkout), so
    tests and the app run offline without configuration; an installed package has none unless told."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    shared = REPO_ROOT.parent / "shared" / "benchdata"
    return shared if (REPO_ROOT / "pyproject.toml").is_file() and shared.is_dir() else None


def local_path(name: str) -> Path | None:
    """The existing file or folder ``name`` means on this machine (``~`` expanded), or None: none is there,
    or no file system takes such a name (too long, "~nobody", a NUL byte)."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError, ValueError):
        return None


def safe_name(text: str, max_len: int = 80) -> str:
    """A file-name-safe slug of ``text`` (no separators, no dot-dot, bounded length)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "unnamed"
    return slug[:max_len]


def safe_child(base: Path, name: str) -> Path:
    """``base/name`` for a user-given name, refusing anything that escapes ``base``."""
    base = Path(base).resolve()
    target = (base / safe_name(name)).resolve()
    if target.parent != base:
        raise InvalidInput(f"Refusing the path {quoted(name)}: it must be a plain folder name.")
    return target


def digest(obj) -> str:
    """A short stable hash of any JSON-serialisable key."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path):
    """The JSON in ``path``, or None if absent or unreadable (treated as a cache miss)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
