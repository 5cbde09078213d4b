"""The hostile inputs ``benchmarks/shared_probe.py`` sends: values per kind of parameter, special tables for the
parameters that name things (models, exports, calibration data, method options), and each endpoint's cheap baseline.

A case is one call: the endpoint's baseline with one parameter (or a few) replaced by a hostile value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import REPO

HUGE_TEXT = "A" * 100_000
LONG_NAME = "a" * 300

# Each kind's values, most telling first; a "light" parameter (same check as one probed in full) gets a few.
TEXT = [None, "", " \n\t ", HUGE_TEXT, "/etc/passwd", "../../x", "~/.ssh/id_rsa", "file:///etc/passwd", str(REPO),
        "\x00", "NaN", "é🙂\u202e", "<img src=x onerror=alert(1)>", "{0.__class__}%s%n", 12, 2.5, ["a"],
        {"path": "/etc/passwd"}]
# NaN and infinities go as strings: gradio_client sends JSON only, and JSON has no NaN.
NUMBER = [None, "", "abc", "NaN", "inf", "-inf", 2**63, -2**63, 1e308, -1, 0, 2.5, True, "1" * 400, "0x10", [1],
          {"a": 1}]
BOOL = [None, "", "true", "yes", 2, HUGE_TEXT, [True], {"a": 1}]
CHOICE = [None, "", "nope", "../../x", "/etc/passwd", HUGE_TEXT, 0, True, ["paper"], {"a": 1}]
LIST = [None, "", [], [None], ["nope"], ["../../x"], "arc_easy", [2**63], [1e308], [-1], [HUGE_TEXT],
        list(range(10_000)), [[1]], {"a": 1}]
RANGE = [None, "", [26, 20], [25, 31], [-1, 3], [0, 2**63], [0, 1e308], ["a", "b"], [1.5, 3], [0, 30], [5],
         [1, 2, 3], "20,26", [None, None], [True, 5], {"start": 1}, ["NaN", 3]]
FILE = [None, "", "/etc/passwd", {"path": "/etc/passwd"}, {"path": "../../etc/passwd"},
        {"path": f"{REPO}/app.py"}, {"path": f"{REPO}/README.md", "orig_name": "r.txt"},
        {"url": "file:///etc/passwd", "path": "x.txt"}, 12]
KINDS = {"Textbox": TEXT, "Numberinput": NUMBER, "Number": NUMBER, "Slider": NUMBER, "Checkbox": BOOL,
         "Dropdown": CHOICE, "Radio": CHOICE, "Checkboxgroup": LIST, "Layerrange": RANGE, "File": FILE}
LIGHT = 3  # values for a light parameter
CAP, CAP_HEAVY = 30, 12  # values per endpoint over its parameters (/analyze, the calibration's own, has no cap)
# A heavy endpoint's limit whose label says 0 means all, none or the default ("Windows (0 = all)") gets no value
# that means the same by design: each would start the longest job there is, and its Stop costs up to a minute.
DOCUMENTED_ZERO = re.compile(r"\(0 ?[=:]")
MEANS_ZERO = (None, "", 0)
# What the datasets library says after looking into a local folder given as a hub dataset's name.
DATASETS_READ = re.compile(r"data files? (found )?(in|at) |Couldn't find any data file")

# Cheap arguments each endpoint starts from: tiny limits, so an input that passes every check costs little.
CALIBRATION = ("builtin", "", None, 2, 16, "auto")
BASELINE = {
    "/method_info": ("angular",),
    "/load_model": ("", "", False, "auto"),
    "/analyze": ("angular", "", "builtin", "", None, 2, 16, 5, "paper", "auto", "layers"),
    "/analyze_loaded": ("angular", "", "builtin", "", None, 2, 16, 5, "paper", "auto", "layers"),
    "/build": ("magnitude", 10, "unstructured", False, *CALIBRATION),
    "/width_vs_depth": (50, "paper", *CALIBRATION),
    "/startup": ("angular",),
    "/edit_slot": ("A",),
    "/set_cut": ([20, 26],),
    "/best_block": (5, "paper", "layers"),
    "/named_cut": ("10%",),
    "/stability": (5, 2),
    "/export": ("probe-export",),
    "/generate": ("Hi", 8, 0, 1, 0),
    "/divergence": ("Hi", 8),
    "/logit_lens": ("Hi",),
    "/speed": ([1], 2, 2, 1),
    "/benchmarks": (["arc_easy"], 1, 0),
    "/perplexity": (128, 1),
    "/sweep": ("arc_easy", 29, 1),
    "/rank_search": ("weight", "wikitext2", 0.5, 1, 1, "", *CALIBRATION),
    "/heal": ("lora", 1, 1),
    "/sparsity_sweep": ("arc_easy", "0", ["magnitude"], 1, 1),
}
# Work that takes seconds to minutes: stopped with /cancel as soon as it starts (past every check).
HEAVY = {"/startup", "/build", "/width_vs_depth", "/speed", "/memory", "/benchmarks", "/perplexity", "/sweep",
         "/rank_search", "/heal", "/sparsity_sweep", "/stability", "/export"}
# Work of a second or so on the tiny baselines: waited on a little longer before /cancel.
MEDIUM = {"/analyze", "/analyze_loaded", "/generate", "/divergence", "/logit_lens", "/load_model"}
# Parameters checked by the same code as one probed in full elsewhere (the calibration on /analyze, the prompt on
# /generate).
_CALIBRATION_PARAMS = {"source", "detail", "upload", "samples", "seq_len", "bos"}
LIGHT_PARAMS = {"/analyze_loaded": "*", "/build": _CALIBRATION_PARAMS, "/width_vs_depth": _CALIBRATION_PARAMS,
                "/rank_search": _CALIBRATION_PARAMS, "/divergence": {"prompt"}, "/logit_lens": {"prompt"}}


@dataclass(frozen=True)
class Case:
    endpoint: str
    changes: dict  # parameter name → hostile value; the rest is the baseline
    note: str = ""  # what the case is about, when the value alone does not say
    expect_refusal: bool = False  # an "ok" reply is a failure (a path or remote code that must be refused)
    disk_read: re.Pattern | None = None  # a reply matching it says the server read its disk for the visitor
    files: tuple = field(default=())  # local files to upload, parameter names (handed to handle_file)


def model_names(root: Path, outside: Path) -> list[Case]:
    """Models a visitor may name: paths on the server, path tricks, over-long names, and remote code."""
    refused = [None, "/etc/passwd", "/etc", "/", ".", "..", "../../x", "~/.ssh/id_rsa", "~root", "~nosuchuser/x",
               "file:///etc/passwd", str(REPO), f"{REPO}/assets", "./evaluation", "evaluation", "prune",
               "\\\\server\\share", "C:\\Windows", LONG_NAME, f"org/{LONG_NAME}", "a/" * 200, HUGE_TEXT, "\x00",
               "org/model/extra", "org/../model", "%2e%2e/x", "http://127.0.0.1:1/x", "https://huggingface.co/gpt2",
               str(root / "missing"), str(root / ".." / "outside" / "evil"), str(outside / "evil"),
               str(root / "link-out"), 12, ["x"]]
    cases = [Case("/load_model", {"name": name}, expect_refusal=name is not None) for name in refused]
    cases += [Case("/load_model", {"name": name}) for name in ("gpt2", "no-such-org/no-such-model", "default")]
    for folder in (root / "evil", root / "link-out", outside / "evil", root / ".." / "outside" / "evil"):
        cases.append(Case("/load_model", {"name": str(folder), "trust_remote_code": True},
                          "auto_map to code that writes a marker", expect_refusal=True))
    cases.append(Case("/load_model", {"name": str(root / "evil")}, "auto_map, trust off", expect_refusal=True))
    return cases


def export_names() -> list[Case]:
    names = ["../x", "..", ".", "a/b", "/etc", ".hidden", "x" * 300, "a\x00b", "~root", "a b",
             "../../../tmp/pwn", "..\\x", ["x"], HUGE_TEXT]
    return [Case("/export", {"folder": name}, expect_refusal=True) for name in names]


def calibration_rows() -> list[Case]:
    """Calibration sources with details that name server paths, hub datasets that are paths, and texts."""
    rows = [("hub", "/etc:train:text"), ("hub", "./evaluation:train:text"), ("hub", "../../x:train:text"),
            ("hub", f"{REPO}:train:text"), ("hub", HUGE_TEXT), ("wikitext2", "/etc"), ("wikitext2", str(REPO)),
            ("wikitext2", "../../x"), ("file", "/etc/passwd"), ("upload", ""), ("text", ""), ("text", HUGE_TEXT),
            ("default", "/etc/passwd"), ("builtin", "/etc/passwd")]
    return [Case("/analyze", {"source": source, "detail": detail}, disk_read=DATASETS_READ if source == "hub" else None,
                 expect_refusal=source in ("hub", "wikitext2", "file")) for source, detail in rows]


def option_rows() -> list[Case]:
    """Method options: unknown names, wrong types, huge values, code-like text."""
    rows = [("angular", "token=../../x"), ("angular", "token="), ("angular", f"token={HUGE_TEXT}"),
            ("angular", "token=last,token=mean"), ("angular", "=x"), ("angular", "x"), ("angular", "__class__=1"),
            ("angular", "token=__import__('os')"), ("zigzag", "k=0"), ("zigzag", "texts=1e308"),
            ("zigzag", "k=99999999999999999999"), ("ppl", "max_samples=-1"), ("sleb", "num_removals=999"),
            ("taylor", "max_samples=0"), ("sleb", "protect_ends=maybe"), ("zigzag", "max_tokens=nan")]
    return [Case("/analyze", {"method": method, "options": options}) for method, options in rows]


def upload_rows(big: Path, binary: Path, text: Path) -> list[Case]:
    """Real uploads through the client: over the 8 MiB limit, binary, and a small text (accepted)."""
    return [Case("/analyze", {"source": "upload", "upload": path}, note, files=("upload",))
            for path, note in ((big, "upload over 8 MiB"), (binary, "binary upload"), (text, "small text upload"))]


def generic_cases(api: dict) -> list[Case]:
    """Every parameter of every named endpoint with its kind's hostile values (a few for a light one)."""
    cases = []
    for endpoint, info in api["named_endpoints"].items():
        light = LIGHT_PARAMS.get(endpoint, ())
        params = [p for p in info["parameters"]
                  if (endpoint, p["parameter_name"]) not in (("/load_model", "name"), ("/export", "folder"))]
        full = [p for p in params if not (light == "*" or p["parameter_name"] in light)]
        cap = CAP_HEAVY if endpoint in HEAVY else CAP
        spread = max(LIGHT, cap // max(1, len(full)))  # values per fully probed parameter
        for index, param in enumerate(params):
            name = param["parameter_name"]
            values = KINDS.get(param["component"], TEXT)
            if endpoint in HEAVY and DOCUMENTED_ZERO.search(param.get("label") or ""):
                values = [v for v in values if not any(v is z or (type(v) is type(z) and v == z) for z in MEANS_ZERO)]
            count = LIGHT if param not in full else len(values) if endpoint == "/analyze" else spread
            start = index * 5 % len(values) if count < len(values) else 0  # rotated: each value gets used somewhere
            values = (values[start:] + values[:start])[:count]
            cases += [Case(endpoint, {name: value}, expect_refusal=param["component"] == "File" and value is not None)
                      for value in values]
        if not info["parameters"]:
            cases.append(Case(endpoint, {}))
    return cases


def arguments(case: Case, params: list[dict]) -> list:
    """The call's positional arguments: the baseline (each parameter it leaves out at its default), with the case's
    changes."""
    base = BASELINE.get(case.endpoint, ())
    values = {p["parameter_name"]: base[i] if i < len(base) else p.get("parameter_default")
              for i, p in enumerate(params)}
    unknown = set(case.changes) - set(values)
    if unknown:
        raise KeyError(f"{case.endpoint} has no parameter {sorted(unknown)}")
    return [case.changes.get(name, value) for name, value in values.items()]


def show(value, width: int = 80) -> str:
    """A value as typed, long strings abbreviated ('A'*100000), cut to ``width``."""
    if isinstance(value, Path):
        text = f"<upload {value.name}>"
    elif isinstance(value, str) and len(value) > 60:
        text = f"{value[:1]!r}*{len(value)}" if len(set(value)) == 1 else f"{value[:40]!r}…({len(value)} chars)"
    elif isinstance(value, list) and len(value) > 8:
        text = f"[{len(value)} items]"
    elif isinstance(value, list):
        text = "[" + ", ".join(show(v, width) for v in value) + "]"
    else:
        text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"


def describe(case: Case, width: int = 80) -> str:
    text = ", ".join(f"{name}={show(value)}" for name, value in case.changes.items()) or "(no inputs)"
    text += f" [{case.note}]" if case.note else ""
    return text if len(text) <= width else text[:width - 1] + "…"
