"""lm-eval's standard benchmarks, run offline from a local copy of their data.

Each local task is a generated YAML that `include:`s lm-eval's own task YAML (so prompts,
choices, targets, process_docs and metrics stay lm-eval's) and only swaps the data source
for jsonl files converted from the upstream releases into the hub dataset's field layout,
in the hub's row order. Local tasks are named ``layercut_<standard name>`` so they can never
be confused with (or silently fall back to) the hub-backed built-ins; `standard_name` maps
result keys back.

Few-shot pools: the eval split is always the one lm-eval uses. Where the hub task draws
few-shot examples from a split the local data does not have (hellaswag, winogrande, piqa,
boolq, openbookqa: `train`), that split is switched off, so num_fewshot > 0 there would
sample from another split than the hub does. arc (train) and mmlu (dev) match the hub.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from prune.core.errors import InvalidInput
from prune.core.paths import DATA_DIR_ENV, cache_root, default_data_dir

from evaluation.quality import task_sources

if TYPE_CHECKING:
    from lm_eval.tasks import TaskManager

SUPPORTED_TASKS: tuple[str, ...] = (
    "hellaswag",
    "arc_easy",
    "arc_challenge",
    "winogrande",
    "piqa",
    "boolq",
    "openbookqa",
    "mmlu",
    "truthfulqa_mc1",
    "truthfulqa_mc2",
    "lambada_openai",
    "wikitext",
)

LOCAL_PREFIX = "layercut_"
# Bump whenever a converter or the YAML layout changes, so old caches are never reused.
CONVERTER_VERSION = "1"


# ---------------------------------------------------------------- public helpers


def default_cache_dir() -> Path:
    """Where converted tasks go: outside the repository, reused across runs."""
    return cache_root() / "tasks"


def standard_name(local_name: str) -> str:
    """Map a local task/group result key back to lm-eval's standard name."""
    if local_name.startswith(LOCAL_PREFIX):
        return local_name[len(LOCAL_PREFIX) :]
    return local_name


def local_name(name: str) -> str:
    """The name a standard task has in the offline TaskManager."""
    return LOCAL_PREFIX + name


# ---------------------------------------------------------------- fingerprint and atomic writes


def _lm_eval_tasks_dir() -> Path:
    """lm-eval's own task folder, whose YAMLs the local tasks include."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).resolve().parent


def _require_dir(data_dir: Path) -> Path:
    """Fail with a message the user can act on when the data folder is missing."""
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise InvalidInput(
            f"Benchmark data folder {data_dir} does not exist: set {DATA_DIR_ENV} "
            "or the data-dir setting to a folder laid out like shared/benchdata."
        )
    return data_dir.resolve()


def _require_file(data_dir: Path, rel: str) -> Path:
    """Fail naming the missing file and how to point LayerCut at complete data."""
    path = data_dir / rel
    if not path.is_file():
        raise InvalidInput(
            f"Benchmark file {rel} is missing from {data_dir}: set {DATA_DIR_ENV} "
            "or the data-dir setting to a folder laid out like shared/benchdata."
        )
    return path


def _fingerprint(data_dir: Path) -> str:
    """Key for the cache: MANIFEST.tsv (with the files' actual sizes), else file stats."""
    import lm_eval

    # The YAMLs include lm-eval's own by absolute path: a moved or new lm-eval re-prepares.
    stamp = f"converter={CONVERTER_VERSION}\nlm_eval={lm_eval.__version__}:{_lm_eval_tasks_dir()}\n"
    h = hashlib.sha256(stamp.encode())
    manifest = data_dir / "MANIFEST.tsv"
    if manifest.is_file():
        for line in manifest.read_text(encoding="utf-8").splitlines():
            rel = line.split("\t", 1)[0]
            path = data_dir / rel
            size = path.stat().st_size if rel and path.is_file() else -1
            h.update(f"{line}\t{size}\n".encode())
    else:
        for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
            st = path.stat()
            h.update(f"{path.relative_to(data_dir)}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _replace_atomically(path: Path, write: Callable[[Any], None]) -> None:
    """Write via a temp file in the same folder and os.replace, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """Atomically write rows as jsonl, in order."""

    def write(f: Any) -> None:
        for row in rows:
            f.write(json.dumps(row) + "\n")

    _replace_atomically(path, write)


def _write_yaml(path: Path, cfg: dict[str, Any]) -> None:
    """Atomically write a task/group YAML (written last: it is the completion marker)."""
    _replace_atomically(path, lambda f: yaml.safe_dump(cfg, f, sort_keys=False))


# ---------------------------------------------------------------- building the local tasks


def _data_overrides(data_files: dict[str, Path], out_dir: Path) -> dict[str, Any]:
    """YAML keys that swap the hub dataset for local jsonl (its Arrow cache kept beside it)."""
    return {
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {
            "data_files": {s: str(p) for s, p in data_files.items()},
            "cache_dir": str(out_dir / "hf_datasets"),
        },
    }


def _convert_splits(
    data_dir: Path, out_dir: Path, splits: dict[str, task_sources.Split]
) -> dict[str, Path]:
    """Convert each split to jsonl (after checking all its sources exist)."""
    sources = {s: [_require_file(data_dir, rel) for rel in sp.sources] for s, sp in splits.items()}
    files = {}
    for split, sp in splits.items():
        files[split] = out_dir / f"{split}.jsonl"
        _write_jsonl(files[split], sp.convert(sources[split]))
    return files


def _prepare_simple(name: str, data_dir: Path, out_dir: Path) -> None:
    """Convert one ordinary task and write its YAML."""
    spec = task_sources.SPECS[name]
    files = _convert_splits(data_dir, out_dir, spec.splits)
    cfg = {
        "include": str(_lm_eval_tasks_dir() / spec.yaml),
        "task": local_name(name),
        "task_alias": name,
        "tag": [],
        **spec.overrides,
        **_data_overrides(files, out_dir),
    }
    _write_yaml(out_dir / f"{local_name(name)}.yaml", cfg)


def _mmlu_subjects(folder: Path) -> list[str]:
    """The subjects lm-eval's mmlu group covers (from its own per-subject YAMLs)."""
    return sorted(p.stem[len("mmlu_") :] for p in folder.glob("mmlu_*.yaml"))


def _prepare_mmlu(data_dir: Path, out_dir: Path) -> None:
    """Convert the 57 subjects (test + dev for few-shot) and mirror lm-eval's mmlu groups."""
    folder = _lm_eval_tasks_dir() / "mmlu" / "default"
    subjects = _mmlu_subjects(folder)
    for subject in subjects:  # check everything first: fail before writing anything
        for split in ("test", "dev"):
            _require_file(data_dir, f"mmlu/{split}/{subject}_{split}.csv")
    for subject in subjects:
        files = {}
        for split in ("test", "dev"):
            files[split] = out_dir / "data" / f"{subject}_{split}.jsonl"
            src = data_dir / "mmlu" / split / f"{subject}_{split}.csv"
            _write_jsonl(files[split], task_sources.mmlu_csv(src, subject))
        original = folder / f"mmlu_{subject}.yaml"
        tag = yaml.safe_load(original.read_text(encoding="utf-8"))["tag"]
        cfg = {
            "include": str(original),
            "task": local_name(f"mmlu_{subject}"),
            "tag": local_name(tag),
            **_data_overrides(files, out_dir),
        }
        _write_yaml(out_dir / f"{local_name('mmlu_' + subject)}.yaml", cfg)
    top = folder / "_mmlu.yaml"  # written last: it marks mmlu as prepared
    for group_file in [*sorted(folder.glob("_mmlu_*.yaml")), top]:
        group = yaml.safe_load(group_file.read_text(encoding="utf-8"))
        std = group["group"]
        group["group"] = local_name(std)
        group.setdefault("group_alias", std)
        group["task"] = [local_name(t) for t in group["task"]]
        _write_yaml(out_dir / f"{local_name(std)}.yaml", group)


def _is_prepared(name: str, out_dir: Path) -> bool:
    """A task is ready once its (last-written) YAML exists."""
    return (out_dir / f"{local_name(name)}.yaml").is_file()


def prepare_tasks(
    data_dir: Path, cache_dir: Path, tasks: Iterable[str] = SUPPORTED_TASKS
) -> Path:
    """Convert the requested tasks' data once per data fingerprint; returns the include folder."""
    data_dir = _require_dir(data_dir)
    names = _check_names(tasks)
    root = Path(cache_dir).expanduser() / _fingerprint(data_dir)
    for name in names:
        out_dir = root / name
        if _is_prepared(name, out_dir):
            continue
        if name == "mmlu":
            _prepare_mmlu(data_dir, out_dir)
        else:
            _prepare_simple(name, data_dir, out_dir)
    return root


# ---------------------------------------------------------------- TaskManager


def _check_names(task_names: Iterable[str]) -> list[str]:
    """Reject unknown or empty task lists with the supported names in the message."""
    names = [task_names] if isinstance(task_names, str) else list(task_names)
    unknown = [n for n in names if n not in SUPPORTED_TASKS]
    if unknown or not names:
        what = f"Unknown task(s) {', '.join(unknown)}" if unknown else "No task given"
        raise InvalidInput(f"{what}; supported: {', '.join(SUPPORTED_TASKS)}.")
    return names


def task_manager(
    task_names: Iterable[str],
    data_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> tuple[TaskManager, list[str]]:
    """TaskManager + names to evaluate: local offline tasks when data exists, else the hub's."""
    from lm_eval.tasks import TaskManager

    names = _check_names(task_names)
    data_dir = data_dir if data_dir is not None else default_data_dir()
    if data_dir is None:
        return TaskManager(), names
    folder = prepare_tasks(data_dir, cache_dir or default_cache_dir(), names)
    # Only the local folder is indexed: faster, and nothing can fall back to the hub.
    tm = TaskManager(include_path=str(folder), include_defaults=False)
    return tm, [local_name(n) for n in names]
