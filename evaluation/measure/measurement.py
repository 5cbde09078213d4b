"""The one result shape every measurement comes back in, and the comparison tables built from it.

A :class:`Measurement` is one number for one model ("original", "pruned", or any label the
caller gives a variant). :func:`comparison_rows` pairs each pruned-side value with the
original's, and :func:`to_dataframe` / :func:`to_markdown` / :func:`to_csv` render the same
rows, so the UI tabs and the command line show identical tables.

Derived columns, oriented so that "bigger is better" reads the same way everywhere:

* degradation — how much worse the pruned value is, in the metric's own unit (points for %):
  ``original − pruned`` when higher is better, ``pruned − original`` when lower is better;
* retention % — ``100 · pruned / original`` (higher is better) or ``100 · original / pruned``
  (lower is better): below 100 means the cut lost something; "—" when the denominator is 0;
* speedup — the same ratio as a factor, for speed metrics (latency: original / pruned;
  throughput: pruned / original), beside the ideal speedup from per-token FLOPs;
* pruned / original % — the plain ratio, for memory and size (neither better nor worse);
* noise — for values with a standard error (lm-eval's accuracies): whether the difference from the original
  is within what chance alone gives (:func:`noise_band`), in plain words.

With several compressed models (the app's A and B) each gets its own value and derived columns.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, field, fields

ORIGINAL = "original"
PRUNED = "pruned"

# Which derived columns a group shows; a group not listed shows degradation and retention.
_GROUP_COLUMNS = {
    "speed": ("speedup", "ideal_speedup"),
    "memory": ("ratio_pct",),
    "limit": ("ratio_pct",),  # bytes per token, floor and share of the bandwidth limit, per model
    "generation": ("speedup",),
}
_QUALITY_COLUMNS = ("degradation", "retention_pct", "noise")
_COLUMN_TITLES = {
    "degradation": "Degradation", "retention_pct": "Score kept %", "noise": "Noise", "speedup": "Speedup ×",
    "ideal_speedup": "Ideal speedup ×", "ratio_pct": "% of original",
}
# Decimals of each derived column: ratios read alike in every row; None: the row's unit's (see decimals).
_COLUMN_DECIMALS = {"degradation": None, "retention_pct": 1, "speedup": 2, "ideal_speedup": 2, "ratio_pct": 1}
NOISE_SPREADS = 2  # a difference within this many standard errors of it is called noise (chance stays within it ~95 %)


def noise_band(spread_a: float | None, spread_b: float | None) -> float | None:
    """How far apart two values with standard errors ``spread_a`` and ``spread_b`` may fall by chance alone:
    NOISE_SPREADS standard errors of their difference, √(a² + b²) as if independent (two models answering the
    same questions are not, so this errs towards calling a difference noise). None without both."""
    if spread_a is None or spread_b is None or not math.isfinite(spread_a) or not math.isfinite(spread_b):
        return None
    return NOISE_SPREADS * math.hypot(spread_a, spread_b)


def proportion_stderr(share: float, count: int | None) -> float | None:
    """lm-eval's standard error of an accuracy ``share`` (0…1) over ``count`` questions: √(p(1 − p)/(n − 1))."""
    if not count or count < 2 or not 0 <= share <= 1:
        return None
    return math.sqrt(share * (1 - share) / (count - 1))


def noise_words(difference: float, band: float, unit: str = "", places: int = 1) -> str:
    """'within noise (±12.4)' or 'beyond noise (±3.1)': how a difference compares with its :func:`noise_band`."""
    where = "within" if abs(difference) <= band else "beyond"
    return f"{where} noise (±{_number(band, places)}{'' if unit in ('', '%') else ' ' + unit})"


@dataclass(frozen=True)
class Measurement:
    """One measured number for one model."""

    name: str  # e.g. "arc_easy acc", "decode latency (batch 8, 32 new tokens)"
    value: float
    unit: str = ""  # "%", "ms", "tokens/s", "GiB", "" for plain numbers
    higher_is_better: bool | None = True  # None: neither (a parameter count)
    spread: float | None = None  # ± this much; what it is says spread_kind
    spread_kind: str = ""  # "stderr", "IQR", ...
    model: str = ORIGINAL  # which model it belongs to
    group: str = ""  # "benchmarks", "perplexity", "speed", "memory", "generation"
    ideal: float | None = None  # pruned side: the value if the metric scaled with per-token FLOPs
    details: dict = field(default_factory=dict, compare=False)  # raw samples, settings

    def to_dict(self) -> dict:
        data = asdict(self)
        data["value"] = _finite(self.value)
        data["spread"] = _finite(self.spread)
        data["ideal"] = _finite(self.ideal)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Measurement":
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["value"] = math.nan if data.get("value") is None else float(data["value"])
        return cls(**data)


@dataclass(frozen=True)
class Row:
    """One metric of one pruned variant beside the original (either side may be missing)."""

    group: str
    name: str
    unit: str
    higher_is_better: bool | None
    original: Measurement | None
    pruned: Measurement | None

    @property
    def variant(self) -> str:
        return self.pruned.model if self.pruned else ""

    @property
    def gain(self) -> float | None:
        """Pruned relative to original, oriented so that above 1 is better."""
        return _gain(self._value(self.original), self._value(self.pruned), self.higher_is_better)

    @property
    def degradation(self) -> float | None:
        """How much worse the pruned value is, in the metric's unit (points for %)."""
        orig, pruned = self._value(self.original), self._value(self.pruned)
        if orig is None or pruned is None or self.higher_is_better is None:
            return None
        return orig - pruned if self.higher_is_better else pruned - orig

    @property
    def retention_pct(self) -> float | None:
        gain = self.gain
        return None if gain is None else 100.0 * gain

    @property
    def speedup(self) -> float | None:
        return self.gain

    @property
    def ideal_speedup(self) -> float | None:
        ideal = self.pruned.ideal if self.pruned else None
        return _gain(self._value(self.original), ideal, self.higher_is_better)

    @property
    def noise(self) -> float | None:
        """How far the two values may differ by chance (:func:`noise_band` of their standard errors)."""
        if self.original is None or self.pruned is None or self.degradation is None:
            return None
        if not self.original.spread_kind == self.pruned.spread_kind == "stderr":
            return None
        return noise_band(self.original.spread, self.pruned.spread)

    @property
    def ratio_pct(self) -> float | None:
        orig, pruned = self._value(self.original), self._value(self.pruned)
        return None if orig in (None, 0) or pruned is None else 100.0 * pruned / orig

    @staticmethod
    def _value(m: Measurement | None) -> float | None:
        return None if m is None or not math.isfinite(m.value) else float(m.value)


def comparison_rows(measurements: list[Measurement], reference: str = ORIGINAL) -> list[Row]:
    """Pair every other model's measurements with the reference model's, in first-seen order."""
    originals: dict[tuple[str, str], Measurement] = {}
    variants: dict[str, dict[tuple[str, str], Measurement]] = {}
    order: list[tuple[str, str]] = []
    for m in measurements:
        key = (m.group, m.name)
        if key not in order:
            order.append(key)
        if m.model == reference:
            originals[key] = m
        else:
            variants.setdefault(m.model, {})[key] = m
    rows = []
    for key in order:
        orig = originals.get(key)
        paired = [(name, found[key]) for name, found in variants.items() if key in found]
        for _, pruned in paired or [(None, None)]:
            sample = orig or pruned
            rows.append(Row(key[0], key[1], sample.unit, sample.higher_is_better, orig, pruned))
    return rows


def _derived_columns(rows: list[Row]) -> list[str]:
    wanted = []
    for row in rows:
        for col in _GROUP_COLUMNS.get(row.group, _QUALITY_COLUMNS):
            if col not in wanted and (getattr(row, col) is not None or _undefined_ratio(row, col)):
                wanted.append(col)
    return [c for c in _COLUMN_TITLES if c in wanted]


def _undefined_ratio(row: Row, col: str) -> bool:
    """A ratio that both values were measured for but whose denominator is 0 (an original scoring 0)."""
    ratios = {"retention_pct": row.higher_is_better is not None, "speedup": row.higher_is_better is not None,
              "ratio_pct": True}
    both = row._value(row.original) is not None and row._value(row.pruned) is not None
    return ratios.get(col, False) and both and getattr(row, col) is None


def _cell(row: Row | None, col: str, places: dict[str, int] | None):
    """A derived cell: a number (text with ``places``, the decimals per unit), "—" where the ratio is undefined
    (shown, not dropped), else empty."""
    value = getattr(row, col) if row is not None else None
    if places is None:
        return value
    if col == "noise":
        return "" if value is None else noise_words(row.degradation, value, row.unit, places[row.unit])
    if row is not None and _undefined_ratio(row, col):
        return "—"
    fixed = _COLUMN_DECIMALS[col]
    return _number(value, places[row.unit] if fixed is None and row is not None else fixed)


def column_title(label: str) -> str:
    """A compared model's column title: "Pruned" for the CLI's single cut, else its label ("A", "B", a mode)."""
    return "Pruned" if label == PRUNED else label


def table_records(measurements: list[Measurement], reference: str = ORIGINAL, *, text: bool = True) -> list[dict]:
    """The comparison as a list of dicts, one per metric: the original, then each compared model
    with its derived columns (titled "Score kept % (A)" etc. when there are several).

    ``text=True`` formats numbers for display ("71.2 ± 1.3"), every number of one unit with the same decimals
    and each ratio column with its own; ``text=False`` keeps raw numbers and puts spreads in their own columns
    (for CSV and pandas).
    """
    rows = comparison_rows(measurements, reference)
    places = unit_decimals(measurements) if text else None
    variants = list(dict.fromkeys(r.variant for r in rows if r.variant))
    derived = _derived_columns(rows)
    metrics: dict[tuple[str, str], dict[str, Row]] = {}
    for row in rows:
        metrics.setdefault((row.group, row.name), {})[row.variant] = row
    records = []
    for (group, name), per in metrics.items():
        sample = next(iter(per.values()))
        rec: dict = {"Group": group, "Metric": name, "Unit": sample.unit}
        _put(rec, "Original", sample.original, places)
        for label in variants:
            row = per.get(label)
            _put(rec, column_title(label), row.pruned if row else None, places)
            for col in derived:
                applies = row is not None and col in _GROUP_COLUMNS.get(group, _QUALITY_COLUMNS)
                title = _COLUMN_TITLES[col] if len(variants) == 1 else f"{_COLUMN_TITLES[col]} ({label})"
                rec[title] = _cell(row if applies else None, col, places)
        records.append(rec)
    if text and len({r["Group"] for r in records}) <= 1:
        for rec in records:
            rec.pop("Group")
    return records


def _put(rec: dict, title: str, m: Measurement | None, places: dict[str, int] | None) -> None:
    if places is not None:
        rec[title] = _format(m, places)
    else:
        rec[title] = None if m is None else _finite(m.value)
        rec[f"{title} ±"] = None if m is None else _finite(m.spread)


def to_dataframe(measurements: list[Measurement], reference: str = ORIGINAL, *, text: bool = True):
    """A pandas DataFrame of the comparison (what the UI shows)."""
    import pandas as pd

    return pd.DataFrame(table_records(measurements, reference, text=text))


def to_markdown(measurements: list[Measurement], reference: str = ORIGINAL) -> str:
    """A GitHub-flavoured markdown table of the comparison."""
    records = table_records(measurements, reference)
    if not records:
        return "_No measurements._\n"
    headers = list(records[0])
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for rec in records:
        lines.append("| " + " | ".join(str(rec[h]).replace("|", "\\|") for h in headers) + " |")
    spreads = sorted({m.spread_kind for m in measurements if m.spread is not None and m.spread_kind})
    note = f"\n± is the {', '.join(spreads)}.\n" if spreads else ""
    return "\n".join(lines) + "\n" + note


def to_csv(measurements: list[Measurement], reference: str = ORIGINAL) -> str:
    """The comparison as CSV with raw numbers (spreads in their own columns)."""
    records = table_records(measurements, reference, text=False)
    out = io.StringIO()
    if records:
        writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    return out.getvalue()


def to_json_list(measurements: list[Measurement]) -> list[dict]:
    return [m.to_dict() for m in measurements]


def from_json_list(data: list[dict]) -> list[Measurement]:
    return [Measurement.from_dict(d) for d in data]


def _gain(orig: float | None, pruned: float | None, higher_is_better: bool | None) -> float | None:
    if orig is None or pruned is None or higher_is_better is None:
        return None
    num, den = (pruned, orig) if higher_is_better else (orig, pruned)
    return None if den == 0 else num / den


def _finite(value):
    return None if value is None or not math.isfinite(float(value)) else float(value)


def decimals(values) -> int:
    """Decimals that give the largest of ``values`` three significant digits: none from 100 up, one from 10,
    two from 1, three below (0 when all are 0); one table or chart writes all its numbers of a unit with them."""
    largest = max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)
    return 0 if largest == 0 else min(3, max(0, 2 - math.floor(math.log10(largest))))


def unit_decimals(measurements: list[Measurement]) -> dict[str, int]:
    """Each unit's decimals in a table of ``measurements`` (spreads and degradations follow their unit's)."""
    units: dict[str, list[float]] = {}
    for m in measurements:
        units.setdefault(m.unit, []).append(m.value)
    return {unit: decimals(values) for unit, values in units.items()}


def _number(value: float | None, places: int) -> str:
    if value is None:
        return ""
    text = f"{float(value):,.{places}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text  # no "-0.0"


def _format(m: Measurement | None, places: dict[str, int]) -> str:
    if m is None:
        return ""
    text = _number(_finite(m.value), places[m.unit]) or "n/a"
    if m.spread is not None and math.isfinite(m.spread):
        text += f" ± {_number(m.spread, places[m.unit])}"
    return text
