"""Probe a shared LayerCut server as hostile visitors would, and count what goes wrong.

    .venv/bin/python -m benchmarks.shared_probe [--quick] [--only /load_model,/export] [--checks] [--all] [--keep]

Starts ``app.py --shared`` in a subprocess (private cache, model root and HF modules folder; the dequantized
default model is reused), then, as visitors with gradio_client, sends every named endpoint hostile inputs
(``benchmarks/probe_inputs.py``: wrong types, huge numbers, NaN, 100,000-character strings, server paths, path tricks,
remote code under the model root, uploads over the limit, bad export names), and checks isolation between
visitors (cuts, results, Stop, exports of the same name), the file route without a session and ``/config``.
Each reply is classed: ok, a one-line message, the catch-all "Something went wrong", Gradio's bare error, a
traceback, a server path, a crash (the server stops answering). Prints counts per class and per endpoint, every
failing input, and one summary line, and writes them to ``benchmarks/results/shared_probe.json`` (``--quick``,
``--only`` or ``--checks``, the checks alone: ``shared_probe_partial.json``). Always exits 0: it is a measurement.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from benchmarks import harness
from benchmarks import probe_inputs as pi
from benchmarks.probe_server import TRACEBACK, Server
from benchmarks.record import write_result
from ui.slot_text import NO_GGUF

LIGHT_WAIT_S, MEDIUM_WAIT_S, HEAVY_WAIT_S, STOP_WAIT_S = 30, 10, 4, 60
CATCH_ALL = "Something went wrong"
BARE = ("", "Error", "Error raised.", "The upstream Gradio app has raised an exception but has not enabled verbose "
        "error reporting. To enable, set show_error=True in launch().")
PATH = re.compile(r"(?<![\w.:/~-])(?:~/|/(?:root|home|tmp|work|usr|opt|var|etc|proc|srv|mnt|lib|dev|sys)\b)"
                  r"[^\s'\"`)<>,;*|]*")
# "accepted": a path, remote code or a file the server must refuse was taken (or read from its disk).
FAILURES = ("crash", "hang", "traceback", "server path", "catch-all", "bare error", "accepted", "long message")
REMOTE_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("remote code ran on the server")
from transformers import LlamaConfig, LlamaForCausalLM


class EvilConfig(LlamaConfig):  # its own classes: registering them must not touch Llama's
    pass


class EvilModel(LlamaForCausalLM):
    config_class = EvilConfig
"""


@dataclass
class Reply:
    case: pi.Case
    kind: str  # ok, error (AppError), http (the server refused the request), exception, hang
    text: str  # the message, or the outputs' strings
    seconds: float
    started: bool = False  # it passed every check and started work, stopped with /cancel
    stop_s: float = 0.0  # from /cancel to its end
    flags: set = field(default_factory=set)

    @property
    def verdict(self) -> str:
        """The worst thing about the reply, or what it was."""
        for flag in FAILURES:
            if flag in self.flags:
                return flag
        return {"ok": "ok", "error": "message", "http": "refused (HTTP 4xx)"}.get(self.kind, self.kind)


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    paths: int = 0  # server paths it found


class Probe:
    def __init__(self, server: Server, quick: bool, only: set[str], checks_only: bool = False) -> None:
        self.server, self.quick, self.only, self.checks_only = server, quick, only, checks_only
        self.replies: list[Reply] = []
        self.checks: list[Check] = []
        self.crashes = 0
        self.export_p: tuple = ("", [])
        self.marker_case: str | None = None
        # every named endpoint: the API page lists only the public ones, the page's own events stay callable
        self.api = httpx.get(f"{server.url}gradio_api/info", params={"all_endpoints": "true"}, timeout=30).json()
        self.params = {name: info["parameters"] for name, info in self.api["named_endpoints"].items()}

    def visitor(self) -> Client:
        return Client(self.server.url, verbose=False, download_files=False)

    # ------------------------------------------------------------ calls
    def call(self, client: Client, case: pi.Case) -> Reply:
        """Send one case; heavy work is stopped with /cancel as soon as it starts, anything else after a wait."""
        args = pi.arguments(case, self.params[case.endpoint])
        names = [p["parameter_name"] for p in self.params[case.endpoint]]
        for name in case.files:
            args[names.index(name)] = handle_file(str(case.changes[name]))
        started = time.monotonic()
        try:
            job = client.submit(*args, api_name=case.endpoint)
            if self._finishes(job, case.endpoint):
                return self._outcome(case, job, 5, started)
            stopping = time.monotonic()
            self._cancel(client)
            try:
                reply = self._outcome(case, job, STOP_WAIT_S, started)
            except TimeoutError:
                return Reply(case, "hang", f"still running {STOP_WAIT_S} s after /cancel", self._since(started))
            reply.started, reply.stop_s = True, time.monotonic() - stopping
            return reply
        except httpx.HTTPStatusError as err:
            code = err.response.status_code
            return Reply(case, "http" if code < 500 else "exception", f"HTTP {code}: {err.response.text[:300]}",
                         self._since(started))
        except Exception as err:  # a connection error is a crash; anything else is reported
            return Reply(case, "exception", f"{type(err).__name__}: {err}", self._since(started))

    @staticmethod
    def _finishes(job, endpoint: str) -> bool:
        """Whether the job ends within its wait; heavy work counts as started at its first progress or output."""
        heavy = endpoint in pi.HEAVY
        wait = HEAVY_WAIT_S if heavy else MEDIUM_WAIT_S if endpoint in pi.MEDIUM else LIGHT_WAIT_S
        deadline = time.monotonic() + wait
        while not job.done() and time.monotonic() < deadline:
            if heavy and (job.status().progress_data or job.outputs()):
                return job.done()
            time.sleep(0.05)
        return job.done()

    def _outcome(self, case, job, wait, started) -> Reply:
        try:
            return Reply(case, "ok", "\n".join(strings(job.result(timeout=wait))), self._since(started))
        except AppError as err:
            return Reply(case, "error", str(err.message), self._since(started))

    def _cancel(self, client: Client) -> None:
        try:
            client.predict(api_name="/cancel")
        except Exception:  # the wait after it says whether the job stopped
            pass

    @staticmethod
    def _since(started: float) -> float:
        return time.monotonic() - started

    def record(self, reply: Reply) -> Reply:
        reply.flags |= classify(reply, self.server.paths())
        if reply.kind == "exception" and not self.server.alive():
            reply.flags.add("crash")
            self.crashes += 1
            print(f"  server down after {reply.case.endpoint} {pi.describe(reply.case)}: restarting", file=sys.stderr)
            self.server.restart()
        if self.marker_case is None and self.server.marker.exists():
            self.marker_case = f"{reply.case.endpoint} {pi.describe(reply.case)}"
        self.replies.append(reply)
        return reply

    def ready(self, client: Client, endpoint: str) -> None:
        """A visitor with the default model, a tiny analysis and cut A = [20, 26) (and answers to explain)."""
        steps = [("/load_model", pi.BASELINE["/load_model"]), ("/analyze", pi.BASELINE["/analyze"]),
                 ("/set_cut", ([20, 26],))]
        if endpoint == "/divergence":
            steps.append(("/generate", pi.BASELINE["/generate"]))
        for name, args in steps:
            try:
                client.predict(*args, api_name=name)
            except Exception as err:  # the cases then show what the visitor gets
                print(f"  set-up {name} failed before {endpoint}: {err}", file=sys.stderr)

    # ------------------------------------------------------------ the probe
    def run(self) -> None:
        if self.checks_only:
            self.run_checks()
            return
        cases = self.cases()
        by_endpoint: dict[str, list[pi.Case]] = {}
        for case in cases:
            by_endpoint.setdefault(case.endpoint, []).append(case)
        began = time.monotonic()
        for endpoint in self.endpoints():  # each endpoint once with its baseline, by a visitor with nothing loaded
            self.record(self.call(self.visitor(), pi.Case(endpoint, {}, "fresh visitor")))
        print(f"  fresh visitors: {len(self.endpoints())} inputs, {time.monotonic() - began:.0f} s", file=sys.stderr)
        client = self.visitor()
        for endpoint, group in by_endpoint.items():
            began = time.monotonic()
            self.ready(client, endpoint)
            for case in group:
                self.record(self.call(client, case))
            print(f"  {endpoint}: {len(group)} inputs, {time.monotonic() - began:.0f} s", file=sys.stderr)
            if not self.server.alive():
                self.crashes += 1
                self.server.restart()
                client = self.visitor()
        if not self.only:
            self.run_checks()

    def endpoints(self) -> list[str]:
        return [name for name in self.params if not self.only or name in self.only]

    def cases(self) -> list[pi.Case]:
        def sourced(case: pi.Case) -> pi.Case:  # a calibration file is read for the "upload" source only
            named = {p["parameter_name"] for p in self.params[case.endpoint]}
            return replace(case, changes={"source": "upload", **case.changes}) \
                if "upload" in case.changes and "source" in named else case

        cases = [sourced(case) for case in pi.generic_cases(self.api)]
        cases += pi.calibration_rows() + pi.option_rows() + pi.export_names()
        cases += pi.model_names(self.server.model_root, self.server.outside)
        cases += pi.upload_rows(*self.upload_files())
        cases = [case for case in cases if case.endpoint in self.endpoints()]
        if self.quick:
            cases = cases[::4]
        order = list(self.params)
        return sorted(cases, key=lambda c: order.index(c.endpoint))

    def upload_files(self) -> tuple[Path, Path, Path]:
        big, binary, text = (self.server.tmp / name for name in ("big.txt", "binary.txt", "small.txt"))
        big.write_text("the quick brown fox jumps over the lazy dog\n" * (9 * 2**20 // 44 + 1))
        binary.write_bytes(b"\x00\x01\x02" * 1000)
        text.write_text("A short text to calibrate on, long enough for two windows of sixteen tokens. " * 4)
        return big, binary, text

    # ------------------------------------------------------------ checks beyond single inputs
    def run_checks(self) -> None:
        for check in (self.check_config, self.check_isolation, self.check_stop, self.check_exports,
                      self.check_file_route):
            began = time.monotonic()
            try:
                check()
            except Exception as err:  # a check that cannot run is a failed check
                self.checks.append(Check(check.__name__.removeprefix("check_"), False,
                                         f"could not run: {type(err).__name__}: {str(err)[:200]}"))
            print(f"  {check.__name__}: {time.monotonic() - began:.0f} s", file=sys.stderr)
        marker = self.server.marker.exists()
        self.checks.append(Check("remote code", not marker, f"marker written after {self.marker_case}" if marker
                                 else "the marker file never appeared"))

    def check_config(self) -> None:
        """/config and the API description name no server path; Gradio's upload limit."""
        for route in ("config", "gradio_api/info"):
            text = httpx.get(self.server.url + route, timeout=30).text
            found = {p for p in self.server.paths() if p in text} | set(PATH.findall(text))
            found = sorted(p for p in found if not any(p != q and p in q for q in found))  # the longest of each
            where = "; ".join(f"{p} (…{text[max(0, text.find(p) - 60):text.find(p)]!s})" for p in found[:5])
            self.checks.append(Check(f"GET /{route}", not found, where or "no server path", len(found)))
        limit = json.loads(httpx.get(self.server.url + "config", timeout=30).text).get("max_file_size")
        self.checks.append(Check("upload size limit", limit is not None,
                                 f"Gradio's max_file_size is {limit}: uploads of any size reach the server's disk"
                                 if limit is None else f"max_file_size {limit} bytes"))

    def check_isolation(self) -> None:
        """Two visitors' cuts and results stay their own."""
        p, q = self.visitor(), self.visitor()
        for visitor in (p, q):
            self.ready(visitor, "")
        q.predict([3, 5], api_name="/set_cut")
        banner_p = p.predict("A", api_name="/edit_slot")[1]
        banner_q = q.predict("A", api_name="/edit_slot")[1]
        own = "[20, 26)" in banner_p and "[3, 5)" in banner_q
        crossed = "[3, 5)" in banner_p or "[20, 26)" in banner_q
        self.checks.append(Check("isolation of cuts", own and not crossed,
                                 f"P sees {short(banner_p, 90)!r}; Q sees {short(banner_q, 90)!r}"))
        table_p = p.predict(["arc_easy"], 1, 0, api_name="/benchmarks")[0]
        table_q = q.predict(["arc_challenge"], 1, 0, api_name="/benchmarks")[0]
        rows_p, rows_q = metrics(table_p), metrics(table_q)  # other tasks: no metric in common
        self.checks.append(Check("isolation of results", bool(rows_p and rows_q) and not rows_p & rows_q,
                                 f"P's metrics {sorted(rows_p)}; Q's {sorted(rows_q)}"))

    def check_stop(self) -> None:
        """Another visitor's Stop leaves a job running; its owner's Stop ends it soon."""
        p, q = self.visitor(), self.visitor()
        self.ready(p, "")
        job = p.submit(["arc_easy"], 0, 0, api_name="/benchmarks")  # every question: many minutes
        deadline = time.monotonic() + 30
        while job.status().code.name != "PROCESSING" and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)
        for name in ("/cancel", "/cancel_generation", "/cancel_speed", "/cancel_benchmarks"):
            q.predict(api_name=name)
        time.sleep(3)
        survived = not job.done()
        self.checks.append(Check("Stop of another visitor", survived,
                                 "P's job kept running" if survived else f"P's job ended: {outcome(job)}"))
        began = time.monotonic()
        p.predict(api_name="/cancel")
        try:
            job.result(timeout=STOP_WAIT_S)
            stopped, detail = False, "it finished instead of stopping"
        except TimeoutError:
            stopped, detail = False, f"still running {STOP_WAIT_S} s after Stop"
        except Exception as err:
            stopped, detail = True, f"ended {time.monotonic() - began:.1f} s after Stop: {short(str(err), 80)}"
        self.checks.append(Check("Stop of one's own job", stopped, detail))

    def check_exports(self) -> None:
        """Two visitors exporting the same folder name: neither gets the other's model."""
        p, q = self.visitor(), self.visitor()
        for visitor in (p, q):
            self.ready(visitor, "")
        q.predict([3, 5], api_name="/set_cut")
        self.export_p = p.predict("probe-same", "A", NO_GGUF, api_name="/export")  # each visitor's slot A
        try:
            reply_q = short(q.predict("probe-same", "A", NO_GGUF, api_name="/export")[0], 100)
        except AppError as err:
            reply_q = f"refused: {short(err.message, 100)}"
        layers = exported_layers(self.export_p[1])  # read through P's own link, after Q exported the same name
        self.checks.append(Check("exports of the same name: P's download", layers == 24,
                                 f"P cut 6 layers and downloads a model of {layers} layers; Q got {reply_q!r}"))
        kept = layers == 24
        self.checks.append(Check("exports of the same name: P's folder", kept, "P's folder still holds P's model"
                                 if kept else f"Q's export replaced the folder P was told it saved ({layers} layers)"))

    def check_file_route(self) -> None:
        """The file route without a session: a visitor's download, the exports folder itself, server files."""
        archive = download(self.export_p[1])
        if archive:
            status = httpx.head(archive["url"], timeout=30).status_code
            self.checks.append(Check("a download's own link without a session", True,
                                     f"HTTP {status} for {pi.show(archive.get('path'), 70)} (a link only its visitor "
                                     "was given)"))
        exported = f"{self.server.cache}/exports/probe-same/config.json"  # the folder name anyone may guess
        status = httpx.get(self.server.url + f"gradio_api/file={exported}", timeout=30).status_code
        self.checks.append(Check("an export by its folder path, without a session", status in (403, 404),
                                 f"HTTP {status} for {exported}", int(status == 200)))
        targets = ["/etc/passwd", f"{pi.REPO}/app.py", f"{self.server.cache}/exports/../../server.log",
                   str(self.server.model_root / "evil" / "config.json"), str(Path.home() / ".bashrc"),
                   "../../../../etc/passwd", str(self.server.log_path)]
        for target in targets:
            status = httpx.get(self.server.url + f"gradio_api/file={target}", timeout=30).status_code
            self.checks.append(Check(f"GET file={pi.show(target, 60)}", status in (403, 404), f"HTTP {status}",
                                     int(status == 200)))


def classify(reply: Reply, server_paths: list[str]) -> set:
    """The failure flags of one reply; the typed inputs are not counted as server paths when echoed."""
    flags, text = set(), reply.text
    typed = " ".join(str(v) for v in reply.case.changes.values())
    if reply.kind == "hang":
        flags.add("hang")
    if TRACEBACK.search(text):
        flags.add("traceback")
    if any(p in text and p not in typed for p in server_paths) or any(
            p not in typed for p in PATH.findall(text)):
        flags.add("server path")
    if reply.kind == "error":
        if text.strip() in BARE:
            flags.add("bare error")
        elif text.startswith(CATCH_ALL):
            flags.add("catch-all")
        elif "\n" in text.strip() or len(text) > 500:
            flags.add("long message")
    if reply.kind == "exception" and text.startswith("HTTP 5"):
        flags.add("bare error")
    if reply.kind == "ok" and reply.case.expect_refusal or reply.case.disk_read and reply.case.disk_read.search(text):
        flags.add("accepted")
    return flags


def strings(value) -> list[str]:
    """Every string in a reply's outputs, skipping file payloads (their server paths are Gradio's, by design)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        if "path" in value and ("meta" in value or "orig_name" in value):
            return []
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in strings(v)]
    return []


def metrics(table) -> set:
    """The metrics a results table shows (the page sends the table as an update: its value and column widths)."""
    table = table.get("value", table) if isinstance(table, dict) else table
    if not isinstance(table, dict) or "Metric" not in table.get("headers", []):
        return set()
    index = table["headers"].index("Metric")
    return {row[index] for row in table["data"]}


def download(files) -> dict | None:
    """The one zip an export offers its visitor."""
    return next((f for f in files or [] if str(f.get("path", "")).endswith(".zip")), None)


def exported_layers(files) -> int | None:
    """num_hidden_layers of the exported model a visitor downloads: the config.json in its zip, read through the file
    route."""
    archive = download(files)
    if archive is None:
        return None
    with tempfile.TemporaryFile() as held:
        with httpx.stream("GET", archive["url"], timeout=120) as reply:
            for chunk in reply.iter_bytes():
                held.write(chunk)
        with zipfile.ZipFile(held) as zipped:
            config = next(name for name in zipped.namelist() if Path(name).name == "config.json")
            return json.loads(zipped.read(config)).get("num_hidden_layers")


def outcome(job) -> str:
    try:
        job.result(timeout=0)
        return "finished"
    except Exception as err:
        return short(str(err), 80)


def short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def plant_remote_code(server: Server) -> None:
    """A model folder under the root (and one beside it, and a link out) whose config's auto_map names its own
    Python file; importing that file writes the marker."""
    for folder in (server.model_root / "evil", server.outside / "evil"):
        folder.mkdir()
        (folder / "evil.py").write_text(REMOTE_CODE.format(marker=str(server.marker)))
        (folder / "config.json").write_text(json.dumps({
            "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 320,
            "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}}))
    (server.model_root / "link-out").symlink_to(server.outside / "evil", target_is_directory=True)


def report(probe: Probe, seconds: float, every: bool) -> dict:
    """Print the probe's findings; return them as figures."""
    replies = probe.replies
    if every:
        print("\n== Every reply")
        for r in replies:
            print(f"  {r.case.endpoint:<18} {pi.describe(r.case):<80}\n      {r.verdict}: {short(r.text, 160)!r}")
    print(f"\n== Replies by class ({len(replies)} inputs)")
    for verdict, count in Counter(r.verdict for r in replies).most_common():
        print(f"  {verdict:<20} {count:>5}")
    columns = ["ok", "message", "refused (HTTP 4xx)", *FAILURES, "exception"]
    print("\n== Per endpoint (started: passed every check, stopped with /cancel)")
    print(f"  {'endpoint':<24}{'n':>5}{'started':>8} " + " ".join(f"{c[:9]:>9}" for c in columns))
    for endpoint in probe.endpoints():
        mine = [r for r in replies if r.case.endpoint == endpoint]
        counts = Counter(r.verdict for r in mine)
        print(f"  {endpoint:<24}{len(mine):>5}{sum(r.started for r in mine):>8} "
              + " ".join(f"{counts.get(c, 0) or '.':>9}" for c in columns))
    failing = [r for r in replies if r.flags or r.kind == "exception"]
    print(f"\n== Failing inputs ({len(failing)})")
    for r in failing:
        print(f"  {r.case.endpoint:<18} {pi.describe(r.case):<80}\n      {'/'.join(sorted(r.flags)) or r.kind}: "
              f"{short(r.text, 160)!r}")
    started = [r for r in replies if r.started]
    print(f"\n== Inputs that passed every check and started work, then were stopped ({len(started)})")
    for r in started:
        print(f"  {r.case.endpoint:<18} {pi.describe(r.case):<80} stopped in {r.stop_s:.1f} s")
    print("\n== Checks")
    for check in probe.checks:
        print(f"  [{'pass' if check.passed else 'FAIL'}] {check.name}: {check.detail}")
    logged = probe.server.log_tracebacks()
    print(f"\n== Server log: {len(logged)} tracebacks")
    for line, count in Counter(logged).most_common(15):
        print(f"  {count:>4} × {short(line, 150)}")
    slowest = sorted(replies, key=lambda r: -r.seconds)[:5]
    print("\n== Slowest inputs: " + "; ".join(f"{r.case.endpoint} {pi.describe(r.case, 40)} {r.seconds:.0f} s"
                                          for r in slowest))
    flagged = Counter(flag for r in replies for flag in r.flags)
    n = len(replies) + len(probe.checks)
    paths = flagged["server path"] + sum(c.paths for c in probe.checks)
    failed = sum(not c.passed for c in probe.checks)
    print(f"\nprobe: {n} inputs, {flagged['traceback']} tracebacks, {paths} server paths, "
          f"{probe.crashes + flagged['crash']} crashes, {flagged['catch-all']} catch-all, {flagged['bare error']} bare "
          f"errors, {int(probe.server.marker.exists())} marker files; also {flagged['accepted']} accepted, "
          f"{flagged['hang']} hangs, {flagged['long message']} long messages, {failed} failed checks, "
          f"{len(logged)} server-log tracebacks; {seconds:.0f} s")
    return {"summary": {"inputs": n, "tracebacks": flagged["traceback"], "server_paths": paths,
                        "crashes": probe.crashes + flagged["crash"], "catch_all": flagged["catch-all"],
                        "bare_errors": flagged["bare error"], "marker_files": int(probe.server.marker.exists()),
                        "accepted": flagged["accepted"], "hangs": flagged["hang"],
                        "long_messages": flagged["long message"], "failed_checks": failed,
                        "server_log_tracebacks": len(logged), "seconds": round(seconds)},
            "by_class": dict(Counter(r.verdict for r in replies)),
            "by_endpoint": {endpoint: dict(Counter(r.verdict for r in replies if r.case.endpoint == endpoint))
                            for endpoint in probe.endpoints()},
            "failing": [{"endpoint": r.case.endpoint, "input": pi.describe(r.case),
                         "verdict": "/".join(sorted(r.flags)) or r.kind, "reply": short(r.text, 160)} for r in failing],
            "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in probe.checks],
            "server_log": dict(Counter(logged))}


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--quick", action="store_true", help="every fourth input only (a smoke run)")
    parser.add_argument("--only", default="", help="comma list of endpoints to probe (no isolation checks then)")
    parser.add_argument("--checks", action="store_true", help="the isolation and file-route checks only")
    parser.add_argument("--all", action="store_true", help="print every reply, not only the failing ones")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (server log, cache)")
    args = parser.parse_args()
    began = time.monotonic()
    server = Server()
    try:
        plant_remote_code(server)
        print(f"server up in {server.start():.0f} s at {server.url} (folder {server.tmp})", file=sys.stderr)
        probe = Probe(server, args.quick, {name for name in args.only.split(",") if name}, args.checks)
        probe.run()
        server.stop()
        found = report(probe, time.monotonic() - began, args.all)
        write_result("shared_probe_partial" if args.quick or args.only or args.checks else "shared_probe", found,
                     how="app.py --shared in a subprocess, probed by gradio_client visitors with probe_inputs.py's "
                         f"hostile inputs{' (every fourth: --quick)' if args.quick else ''}"
                         + (f", endpoints {args.only}" if args.only else ""))
    finally:
        server.stop() if args.keep else server.cleanup()


if __name__ == "__main__":
    main()
