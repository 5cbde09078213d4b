"""Offline, the model list offers only what can load: the embedded model and the known models in the local Hugging
Face cache; the others once the Hub has answered, asked once in the background. A failed load puts the picker back
on the model still loaded."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

import pytest
from huggingface_hub import constants

from evaluation.serving.hub import HubCheck
from evaluation.core.pool import ModelSpec
from prune.core import loading
from prune.core.architectures import CAUSAL
from ui import help_text
from ui.session import Session

from conftest import handlers_on, stand_in_backend

EMBEDDED = help_text.KNOWN_MODELS[0]
QWEN = ("Qwen2 0.5B Instruct", "Qwen/Qwen2-0.5B-Instruct")


def cache_model(root, repo: str, files) -> None:
    """A Hugging Face cache entry as the hub library lays it out: refs/main → snapshots/<commit>/<files>."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    snapshot = folder / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in files:
        (snapshot / name).write_text("{}")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    return tmp_path


def context(page, reachable):
    return handlers_on(page, stand_in_backend(default_calibration=None, rates=lambda spec: None),
                       hub=SimpleNamespace(reachable=reachable))


def test_offline_the_list_is_the_embedded_model_and_the_cached_ones(page, hub_cache):
    cache_model(hub_cache, QWEN[1], ["config.json", "model.safetensors"])
    cache_model(hub_cache, "EleutherAI/pythia-1b", ["config.json"])  # its weights never arrived: it cannot load
    for unknown in (None, False):  # not answered yet, or no answer: offline
        assert context(page, unknown).context.model_choices() == [EMBEDDED, QWEN]
    assert context(page, True).context.model_choices() == help_text.KNOWN_MODELS  # the Hub answers: every known model


def test_a_cached_model_needs_its_config_and_its_weights(hub_cache):
    cache_model(hub_cache, "org/sharded", ["config.json", "model.safetensors.index.json"])
    cache_model(hub_cache, "org/no-config", ["model.safetensors"])
    assert loading.in_local_cache("org/sharded") and not loading.in_local_cache("org/no-config")
    assert not loading.in_local_cache("org/never-downloaded") and not loading.in_local_cache("../../etc")
    assert not loading.in_local_cache(loading.DEFAULT_MODEL)  # the embedded model is no Hub download


def test_with_hf_hub_offline_the_hub_is_never_asked(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("the network was asked"))
    assert HubCheck().wait() is False


def test_the_question_is_asked_once_in_the_background_and_no_page_waits(page, hub_cache):
    asked, answer = [], threading.Event()

    def slow(timeout_s):  # a network that has not answered yet
        asked.append(timeout_s)
        answer.wait()
        return True

    hub = HubCheck(slow, timeout_s=2.5)
    handlers = handlers_on(page, stand_in_backend(default_calibration=None, rates=lambda spec: None), hub=hub)
    assert hub.reachable is None and handlers.context.model_choices() == [EMBEDDED]  # offline until it answers
    answer.set()
    assert hub.wait() is True and handlers.context.model_choices() == help_text.KNOWN_MODELS
    assert asked == [2.5]


def test_a_failure_to_ask_counts_as_no_hub():
    def broken(_timeout_s):
        raise RuntimeError("no resolver")

    assert HubCheck(broken).wait() is False


def test_a_failed_load_puts_the_picker_back_on_the_model_still_loaded(page):
    picks, header = context(page, False).pick, page.header
    info = SimpleNamespace(name="SmolLM2-135M-Instruct", num_layers=30, num_params=134_515_008, device="cpu",
                           dtype="torch.float32", weight_bytes=538_060_032, resident_bytes=538_060_032,
                           cpu_held_bytes=0, kind=CAUSAL, rates=None, refusals={})
    back = picks.model_back(Session(spec=ModelSpec(), info=info))
    assert back[header.model]["value"] == "SmolLM2-135M-Instruct"
    assert back[header.model_md] == "**SmolLM2-135M-Instruct** · 30 layers · 134.5 M parameters · cpu · float32"
    nothing = picks.model_back(Session())  # nothing was loaded yet: nothing to go back to
    assert nothing[header.model] == nothing[header.model_md] == {"__type__": "update"}
    load, back = ({fn.api_name: fn for fn in page.demo.fns.values()}[name] for name in ("load_model", "model_back"))
    assert back.trigger_after == load._id and back.trigger_only_on_failure
    assert [b._id for b in back.outputs] == [header.model._id, header.model_md._id]
