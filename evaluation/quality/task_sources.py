"""Where each standard task's data lies in the local data folder, and how it is read.

Each reader yields rows of an upstream release in the hub dataset's field layout and row
order; each :class:`Spec` names lm-eval's own task YAML and the local files of each split.
:mod:`evaluation.quality.offline_tasks` writes them as jsonl for those YAMLs.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prune.core.errors import InvalidInput

MMLU_LETTERS = "ABCD"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a jsonl file in file order."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def read_lines(path: Path) -> list[str]:
    """Non-empty stripped lines, for the one-label-per-line files."""
    with path.open(encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


# ---------------------------------------------------------------- converters (-> hub layouts)
# Each takes the source paths (in the order its spec lists them) and yields hub-layout rows.


def hellaswag(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """Rowan/hellaswag: the loader's fields, with `label` as a string like the hub has it."""
    for path in paths:
        for d in read_jsonl(path):
            yield {
                "ind": int(d["ind"]),
                "activity_label": d["activity_label"],
                "ctx_a": d.get("ctx_a", ""),
                "ctx_b": d.get("ctx_b", ""),
                "ctx": d["ctx"],
                "endings": d.get("endings", []),
                "source_id": d["source_id"],
                "split": d["split"],
                "split_type": d["split_type"],
                "label": str(d.get("label", "")),
            }


def arc(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """allenai/ai2_arc: question stem flattened, choices as {text, label} lists."""
    for d in read_jsonl(paths[0]):
        choices = d["question"]["choices"]
        yield {
            "id": d["id"],
            "question": d["question"]["stem"],
            "choices": {
                "text": [c["text"] for c in choices],
                "label": [c["label"] for c in choices],
            },
            "answerKey": d["answerKey"],
        }


def winogrande(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """allenai/winogrande: drop qID, keep answer as the string "1"/"2"."""
    for d in read_jsonl(paths[0]):
        yield {
            "sentence": d["sentence"],
            "option1": d["option1"],
            "option2": d["option2"],
            "answer": str(d["answer"]),
        }


def piqa(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """baber/piqa: questions joined line by line with the separate labels file."""
    docs = list(read_jsonl(paths[0]))
    labels = read_lines(paths[1])
    if len(docs) != len(labels):
        raise InvalidInput(
            f"{paths[0]} has {len(docs)} questions but {paths[1]} has {len(labels)} labels."
        )
    for d, label in zip(docs, labels):
        yield {"goal": d["goal"], "sol1": d["sol1"], "sol2": d["sol2"], "label": int(label)}


def boolq(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """super_glue boolq: CSV to typed rows (label 1 = yes)."""
    with paths[0].open(encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            yield {
                "question": row["question"],
                "passage": row["passage"],
                "idx": int(row["idx"]),
                "label": int(row["label"]),
            }


def openbookqa(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """allenai/openbookqa main: already in the hub layout, keep only its fields."""
    for d in read_jsonl(paths[0]):
        yield {k: d[k] for k in ("id", "question_stem", "choices", "answerKey")}


def mmlu_csv(path: Path, subject: str) -> Iterator[dict[str, Any]]:
    """cais/mmlu: headerless CSV rows to question/subject/choices/answer(int)."""
    with path.open(encoding="utf-8", newline="") as f:
        for row in csv.reader(f):
            if row[5] not in MMLU_LETTERS:
                raise InvalidInput(f"{path}: answer {row[5]!r} is not one of A-D.")
            yield {
                "question": row[0],
                "subject": subject,
                "choices": row[1:5],
                "answer": MMLU_LETTERS.index(row[5]),
            }


def truthfulqa(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """truthful_qa multiple_choice: {answer: label} dicts to ordered choices/labels lists."""
    with paths[0].open(encoding="utf-8") as f:
        rows = json.load(f)
    for row in rows:
        yield {
            "question": row["question"],
            "mc1_targets": {
                "choices": list(row["mc1_targets"].keys()),
                "labels": list(row["mc1_targets"].values()),
            },
            "mc2_targets": {
                "choices": list(row["mc2_targets"].keys()),
                "labels": list(row["mc2_targets"].values()),
            },
        }


def lambada(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """EleutherAI/lambada_openai default: OpenAI's file, text field only."""
    for d in read_jsonl(paths[0]):
        yield {"text": d["text"]}


def wikitext_pages(paths: list[Path]) -> Iterator[dict[str, Any]]:
    """EleutherAI/wikitext_document_level: split the raw file into articles like its loader."""
    with paths[0].open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    page: list[str] = []
    for line in lines:
        heading = line.replace("= = =", "===").replace("= =", "==").strip()
        if heading.startswith("= ") and heading.endswith(" ="):
            text = "\n".join(page)
            if text.strip():
                yield {"page": text}
            page = []
        page.append(line)
    yield {"page": "\n".join(page)}


# ---------------------------------------------------------------- task specs


@dataclass(frozen=True)
class Split:
    """One split of a local task: its source files and how to convert them."""

    sources: tuple[str, ...]
    convert: Callable[[list[Path]], Iterable[dict[str, Any]]]


@dataclass(frozen=True)
class Spec:
    """How one standard task is rebuilt from the local data folder."""

    yaml: str  # lm-eval's task YAML, relative to lm_eval/tasks
    splits: dict[str, Split]
    overrides: dict[str, Any] = field(default_factory=dict)


NO_TRAIN = {"training_split": None}


def arc_spec(kind: str) -> Spec:
    """ARC-Easy / ARC-Challenge with all three splits, so few-shot matches the hub."""
    base = f"arc/ARC-{kind}/ARC-{kind}"
    return Spec(
        yaml=f"arc/arc_{kind.lower()}.yaml",
        splits={
            "train": Split((f"{base}-Train.jsonl",), arc),
            "validation": Split((f"{base}-Dev.jsonl",), arc),
            "test": Split((f"{base}-Test.jsonl",), arc),
        },
    )


def truthfulqa_spec(name: str) -> Spec:
    """TruthfulQA mc1/mc2 read the same v0 mc_task.json."""
    return Spec(
        yaml=f"truthfulqa/{name}.yaml",
        splits={"validation": Split(("truthfulqa/v0/mc_task.json",), truthfulqa)},
    )


SPECS: dict[str, Spec] = {
    "hellaswag": Spec(
        yaml="hellaswag/hellaswag.yaml",
        splits={
            "validation": Split(
                tuple(f"hellaswag/hellaswag_val.part{i}of4.jsonl" for i in range(1, 5)),
                hellaswag,
            )
        },
        overrides=NO_TRAIN,
    ),
    "arc_easy": arc_spec("Easy"),
    "arc_challenge": arc_spec("Challenge"),
    "winogrande": Spec(
        yaml="winogrande/default.yaml",
        splits={"validation": Split(("winogrande/dev.jsonl",), winogrande)},
        overrides=NO_TRAIN,
    ),
    "piqa": Spec(
        yaml="piqa/piqa.yaml",
        splits={"validation": Split(("piqa/valid.jsonl", "piqa/valid-labels.lst"), piqa)},
        overrides=NO_TRAIN,
    ),
    "boolq": Spec(
        yaml="super_glue/boolq/default.yaml",
        splits={"validation": Split(("boolq/validation.csv",), boolq)},
        overrides=NO_TRAIN,
    ),
    "openbookqa": Spec(
        yaml="openbookqa/openbookqa.yaml",
        splits={
            "validation": Split(("openbookqa/validation.jsonl",), openbookqa),
            "test": Split(("openbookqa/test.jsonl",), openbookqa),
        },
        overrides=NO_TRAIN,
    ),
    "truthfulqa_mc1": truthfulqa_spec("truthfulqa_mc1"),
    "truthfulqa_mc2": truthfulqa_spec("truthfulqa_mc2"),
    "lambada_openai": Spec(
        yaml="lambada/lambada_openai.yaml",
        splits={"test": Split(("lambada/lambada_openai_test.jsonl",), lambada)},
    ),
    "wikitext": Spec(
        yaml="wikitext/wikitext.yaml",
        splits={"test": Split(("wikitext2/wiki.test.raw",), wikitext_pages)},
        overrides={"training_split": None, "validation_split": None},
    ),
}
