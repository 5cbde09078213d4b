"""A public server's safety, piece by piece: no visitor code, no server files, gated models keyed by
their token, private exports, bounded disk and questions, a closed page's jobs stopped."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import prune
from conftest import handlers_on, tiny_model
from evaluation.serving.backend import Backend
from evaluation.exports.folder import MARKER
from evaluation.core.jobs import Cancelled
from evaluation.core.pool import ModelPool, ModelSpec
from prune.core.calibration import hub_dataset, load_text
from prune.core.errors import InvalidInput
from ui import inputs
from evaluation.serving.downloads import Downloads, bound_cache
from ui.handlers import Context
from ui.session import Session

DEFAULT = prune.Calibration()
REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ visitor code


def custom_code_folder(root: Path, marker: Path) -> Path:
    """A real tiny Llama whose config maps AutoConfig to its own Python file, which leaves ``marker`` if run."""
    folder = root / "custom-code"
    tiny_model("llama", 2).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import LlamaConfig\n\n\nclass EvilConfig(LlamaConfig):\n    pass\n")
    return folder


def test_a_shared_server_never_runs_a_visitors_model_code(tmp_path, tiny_tokenizer, page):
    marker = tmp_path / "code-ran"
    folder = custom_code_folder(tmp_path / "models", marker)
    tiny_tokenizer.save_pretrained(folder)
    shared = inputs.Policy(shared=True, model_root=(tmp_path / "models").resolve())
    picks = handlers_on(page, Backend(device="cpu"), shared).pick
    with pytest.raises(Exception, match="runs no model code") as refused:
        list(picks.load_model(Session(), str(folder), "", True, "auto"))
    assert "\n" not in str(refused.value) and not marker.exists()
    *_, last = picks.load_model(Session(), str(folder), "", False, "auto")  # unticked: the native Llama code
    assert "2 layers" in last[page.header.model_md] and not marker.exists()
    # The folder's code is live: a personal machine that trusts it runs it (this is what the refusal prevents).
    prune.core.loading.check_model(str(folder), trust_remote_code=True)
    assert marker.read_text() == "ran"


# ------------------------------------------------------------------ server files


@pytest.mark.parametrize("spec", ["/etc:train:text", "/etc/passwd:default:train:text", "./evaluation:train:text",
                                  "~/data:train:text", "../x:train:text", "evaluation:train:text",
                                  "tests/x:train:text", "csv:train:text", "JSON:default:train:text",
                                  "a/b/c:train:text", "file:///etc/passwd:train:text", "org/x:train",
                                  "org/x:train:te/xt", "org/x:../y:train:text", ""])
def test_hub_calibration_takes_only_hub_dataset_ids(spec, monkeypatch):
    monkeypatch.chdir(REPO)  # where "evaluation" and "tests" are folders
    loaded = []
    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: True)
    monkeypatch.setattr("datasets.load_dataset", lambda *args, **kwargs: loaded.append(args))
    for policy in (inputs.Policy(shared=True), inputs.Policy()):
        with pytest.raises(InvalidInput, match="is not a Hugging Face dataset: write hub calibration as"):
            inputs.calibration("hub", spec, None, 4, 8, policy, DEFAULT)
    with pytest.raises(InvalidInput, match="is not a Hugging Face dataset"):  # the command line's route too
        load_text(prune.Calibration(source="hub", dataset=spec))
    assert loaded == []


def test_hub_dataset_ids_are_split_into_their_parts(monkeypatch):
    monkeypatch.chdir(REPO)
    assert hub_dataset("Salesforce/wikitext:wikitext-2-raw-v1:validation:text") == (
        "Salesforce/wikitext", "wikitext-2-raw-v1", "validation", "text")
    assert hub_dataset("imdb:train:text") == ("imdb", None, "train", "text")
    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: True)
    cal = inputs.calibration("hub", "imdb:train:text", None, 4, 8, inputs.Policy(shared=True), DEFAULT)
    assert (cal.source, cal.dataset) == ("hub", "imdb:train:text")


def test_inline_calibration_text_is_capped_like_an_upload():
    at_cap = "x" * inputs.MAX_TEXT_BYTES
    assert inputs.calibration("text", at_cap, None, 4, 8, inputs.Policy(shared=True), DEFAULT).text == at_cap
    with pytest.raises(InvalidInput, match="longer than 8 MiB"):
        inputs.calibration("text", at_cap + "é", None, 4, 8, inputs.Policy(), DEFAULT)


# ------------------------------------------------------------------ gated models


def test_a_gated_model_is_never_handed_to_a_visitor_without_its_token():
    pool = ModelPool("cpu")
    opened = ModelSpec("org/gated", token="hf_opener")
    pool.adopt(opened, tiny_model("llama", 2), None)
    assert pool.peek(ModelSpec("org/gated", token="hf_opener")) is not None
    assert pool.peek(ModelSpec("org/gated")) is None and pool.peek(ModelSpec("org/gated", token="hf_guess")) is None


def test_a_visitor_without_the_token_loads_for_themselves(monkeypatch):
    backend = Backend(device="cpu")
    backend.models.pool.adopt(ModelSpec("org/gated", token="hf_opener"), tiny_model("llama", 2), None)
    asked = []

    def hub_refuses(name, **hub):
        asked.append(hub["token"])
        raise prune.core.errors.ModelNotFound("Model 'org/gated' needs a token.")

    monkeypatch.setattr("evaluation.core.pool.check_model", hub_refuses)
    with pytest.raises(prune.core.errors.ModelNotFound, match="needs a token"):
        backend.models.load(ModelSpec("org/gated"))
    assert asked == [None]


# ------------------------------------------------------------------ questions


def test_all_questions_are_bounded_on_a_shared_server_only():
    shared, personal = inputs.Policy(shared=True, max_questions=500), inputs.Policy()
    assert [shared.limit(v, "Questions") for v in (0, "", None, 10, 500)] == [500] * 3 + [10, 500]
    with pytest.raises(InvalidInput, match="Questions must be 0…500, not 501"):
        shared.limit(501, "Questions")
    assert [personal.limit(v, "Questions") for v in (0, 10, 100_000)] == [None, 10, 100_000]
    assert "at most 500" in shared.limit_words() and personal.limit_words() == "0 = all"


# ------------------------------------------------------------------ exports


def fake_export(folder: Path, size: int, age_s: float = 0.0) -> Path:
    folder.mkdir(parents=True)
    (folder / MARKER).write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * size)
    then = time.time() - age_s
    for path in (folder / MARKER, folder / "model.safetensors", folder):
        os.utime(path, (then, then))
    return folder


def shared_downloads(tmp_path, **budgets) -> Downloads:
    cache = tmp_path / "gradio"
    return Downloads(True, cache / "layercut-exports", cache, **budgets)


def test_each_visitor_exports_to_a_private_unguessable_folder(tmp_path):
    downloads = shared_downloads(tmp_path)
    first, second = downloads.folder("session-a"), downloads.folder("session-b")
    assert first != second and first == downloads.folder("session-a")
    assert first.parent == second.parent == tmp_path / "gradio" / "layercut-exports"
    assert len(first.name) == 32 and "session-a" not in first.name
    assert shared_downloads(tmp_path).folder("session-a") != first  # another process: another key
    fake_export(first / "team-cut", 10)
    fake_export(second / "team-cut", 20)
    assert [(p / "team-cut" / "model.safetensors").stat().st_size for p in (first, second)] == [10, 20]
    personal = Downloads(False, tmp_path / "exports", tmp_path / "gradio")
    assert personal.folder("session-a") == personal.folder("session-b") == tmp_path / "exports"


def test_exports_go_after_their_age_or_past_the_budget_oldest_first(tmp_path):
    downloads = shared_downloads(tmp_path, exports_budget_bytes=250, max_age_s=3600)
    old = fake_export(downloads.folder("a") / "old", 10, age_s=4000)
    early = fake_export(downloads.folder("a") / "early", 100, age_s=300)
    middle = fake_export(downloads.folder("b") / "middle", 100, age_s=200)
    newest = fake_export(downloads.folder("b") / "newest", 100)
    not_an_export = downloads.folder("b") / "stray"
    not_an_export.mkdir()
    assert downloads.tidy(keep=newest) == [old, early]
    assert middle.exists() and newest.exists() and not_an_export.exists()
    assert downloads.tidy(keep=newest) == []


def test_gradios_cache_stays_under_its_bound_and_keeps_what_is_recent(tmp_path):
    cache = tmp_path / "gradio"
    entries = []
    for i, age in enumerate((3000, 2000, 1000, 10)):
        entry = cache / f"hash{i}"
        entry.mkdir(parents=True)
        (entry / "file.bin").write_bytes(b"\0" * 100)
        os.utime(entry, (time.time() - age, time.time() - age))
        entries.append(entry)
    exports_root = fake_export(cache / "layercut-exports" / "k" / "x", 1000, age_s=5000).parent.parent
    assert bound_cache(cache, 250, skip=exports_root) == entries[:2]
    assert bound_cache(cache, 0, skip=exports_root) == [entries[2]]  # the last few minutes' stay
    assert entries[3].exists() and exports_root.exists()


# ------------------------------------------------------------------ a closed page


def test_a_closed_page_stops_that_visitors_jobs_only(tiny_folder, tmp_path):
    backend = Backend(device="cpu")
    context = Context(backend, inputs.Policy(shared=True), downloads=shared_downloads(tmp_path))
    stopped, started = {}, threading.Barrier(3)

    def job(owner: str) -> None:
        with backend.models.jobs.run("a long job", owner=owner, hold=False) as running:
            started.wait()
            try:
                while True:
                    running.check()
                    time.sleep(0.01)
            except Cancelled:
                stopped[owner] = True
                raise

    threads = [threading.Thread(target=lambda o=o: pytest.raises(Cancelled, job, o)) for o in ("gone", "stays")]
    for thread in threads:
        thread.start()
    started.wait()
    context.page_closed(SimpleNamespace(session_hash="gone"))
    threads[0].join(timeout=30)
    assert stopped == {"gone": True} and backend.models.jobs.busy("stays") and not backend.models.jobs.busy("gone")
    backend.cancel("stays")
    threads[1].join(timeout=30)
    assert stopped == {"gone": True, "stays": True}


def test_the_page_stops_a_visitors_jobs_when_gradio_says_it_closed(tmp_path):
    import app

    demo = app.build_demo(Backend(device="cpu"), policy=inputs.Policy(shared=True))
    unloads = [fn.fn for fn in demo.fns.values() if any(target[1] == "unload" for target in fn.targets)]
    assert [f.__name__ for f in unloads] == ["page_closed"] and unloads[0].__self__.backend is not None


def test_the_page_shows_the_servers_memory_beside_the_variant_budget(tmp_path):
    import psutil

    backend = Backend(device="cpu")
    line = Context(backend, inputs.Policy(shared=True), downloads=shared_downloads(tmp_path)).server_memory()
    budget = backend.models.variants.budget_bytes / 2**30
    resident = float(line.split("Server memory: ")[1].split(" GiB")[0])
    assert f"cached 0.00 of {budget:.2f} GiB" in line
    assert abs(resident - psutil.Process().memory_info().rss / 2**30) < 0.1


@pytest.mark.parametrize("name, message", [(12, "named by text"), (["x"], "named by text"),
                                           ("~nosuchuser/x", "not a model this server can load")])
def test_model_names_that_are_no_text_or_no_home_get_one_line(name, message):
    with pytest.raises(prune.core.errors.LayerCutError, match=message):
        inputs.model_spec(name, None, False, "auto", inputs.Policy(shared=True))


@pytest.mark.parametrize("method", [None, "nope", "A" * 1000])
def test_an_unknown_method_is_one_line_before_anything_runs(method, tmp_path, page):
    picks = handlers_on(page, Backend(device="cpu"), inputs.Policy(shared=True),
                        downloads=shared_downloads(tmp_path)).pick
    for call in (lambda: picks.method_info(method),
                 lambda: picks.analyze(Session(info=SimpleNamespace(num_layers=4)), method, "", "default", "",
                                       None, 4, 8, 1)):
        with pytest.raises(Exception, match="Unknown method") as refused:
            call()
        assert len(str(refused.value)) < 400 and "\n" not in str(refused.value)
