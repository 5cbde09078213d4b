"""The app through its named API endpoints, as a script would drive it with gradio_client."""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from conftest import folder_free, free_port
from gradio_client import Client
from gradio_client.exceptions import AppError

import prune
from prune.core import loading
from prune.core.recipe import Recipe
from ui import text
from ui.api import PUBLIC

pytestmark = pytest.mark.slow
# /analyze's last inputs (which N layers, BOS, remove) as the page shows them: gradio_client fills in no defaults for
# the page's own endpoints, which are undocumented (ui.api)
AS_SHOWN = ("paper", "auto", "layers")


@pytest.fixture(scope="module")
def client():
    import app

    demo = app.build_demo()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_options())
    try:
        yield Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
    finally:
        demo.close()


def every_endpoint(client) -> dict:
    """Every named endpoint, the page's own (undocumented: off the API page, still callable) included."""
    return httpx.get(f"{client.src}gradio_api/info", params={"all_endpoints": "true"}).json()["named_endpoints"]


def test_every_event_is_a_named_endpoint_off_the_api_page(client):
    names = set(every_endpoint(client))
    assert set(client.view_api(print_info=False, return_format="dict")["named_endpoints"]) == {
        f"/{name}" for name in PUBLIC}  # the page's events are not listed (ui.api)
    assert {"/load_model", "/analyze", "/set_cut", "/select_cell", "/best_block", "/named_cut", "/export",
            "/generate", "/speed", "/memory", "/benchmarks", "/perplexity", "/cancel", "/startup", "/edit_slot",
            "/clear_cut", "/sweep", "/build", "/width_vs_depth", "/method_info", "/rank_search", "/divergence",
            "/feedback_after_release", "/feedback_after_click", "/feedback_after_slot", "/feedback_after_build",
            "/feedback_after_versus", "/feedback_after_search", "/feedback_after_heal", "/cut_size"} <= names


def test_load_analyze_cut_generate_benchmark(client):
    model_md, block_size, layer_range, banner, *_ = client.predict("", "", False, "auto", api_name="/load_model")
    assert "SmolLM2-135M-Instruct" in model_md and "30 layers" in model_md
    # updates are dicts
    assert block_size["value"] == 3 and "**A** (editing): empty" in banner and "**B**: empty" in banner
    assert layer_range["props"]["layers"] == 30 and len(layer_range["props"]["layer_params"]) == 30, layer_range

    _range, banner, heatmap, bars, _greedy, _named, _slot, _feedback, status = client.predict(
        "angular", "token=last", "builtin", "", None, 16, 128, 5, *AS_SHOWN, api_name="/analyze")
    assert heatmap["data"][0]["type"] == "heatmap" and len(heatmap["data"][0]["z"]) == 29
    assert "(5 of 30)" in banner and "Angular" in status
    stability = client.predict(5, 10, api_name="/stability")
    assert "wins" in stability and "of 10 resamples" in stability and "Angular" in stability
    with pytest.raises(AppError, match="Resamples must be 2…200"):
        client.predict(5, 1, api_name="/stability")

    layer_range, banner, *_ = client.predict([20, 26], api_name="/set_cut")
    assert "[20, 26)" in banner and "(6 of 30)" in banner and layer_range["value"] == [20, 26]
    with pytest.raises(AppError, match="empty or inverted"):
        client.predict([26, 20], api_name="/set_cut")
    with pytest.raises(AppError, match="outside"):
        client.predict([25, 31], api_name="/set_cut")
    _range, banner, *_ = client.predict(4, "paper", "layers", api_name="/best_block")
    assert "(4 of 30)" in banner
    with pytest.raises(AppError, match="whole number"):
        client.predict(2.5, "paper", "layers", api_name="/best_block")

    # Block Influence as ShortGPT picks: the 4 lowest-BI layers wherever they are; or the best block of 4
    _range, banner, *_ = client.predict("block_influence", "", "builtin", "", None, 16, 128, 4, "paper", "auto",
                                        "layers", api_name="/analyze")
    model, tokenizer = prune.load_model()
    scores = prune.score(model, tokenizer, "block_influence", calibration=prune.Calibration(n_samples=16),
                         use_cache=False).layer_scores
    lowest = sorted(np.argsort(scores, kind="stable")[:4].tolist())
    assert Recipe.cut(30, lowest).describe() in banner
    _range, banner, *_ = client.predict(4, "block", "layers", api_name="/best_block")
    assert "(4 of 30) = block [" in banner
    with pytest.raises(AppError, match="not in the list of choices"):
        client.predict(4, "greedy", "layers", api_name="/best_block")
    client.predict("B", api_name="/edit_slot")
    _range, banner, *_ = client.predict([20, 26], api_name="/set_cut")
    assert "**A**: layers" in banner and "**B** (editing): layers 20–25" in banner

    job = client.submit("What is the capital of France?", 12, 0, 1, 0, api_name="/generate")
    original, original_stats, a, a_stats, b, b_stats, marked_a, marked_b, note = job.result()
    assert note.startswith("Measured on **SmolLM2-135M-Instruct** · Original · A: cut ") and note.endswith(
        f" · {b['label']}"), note  # the answers name the models they came from
    assert marked_a["visible"] is False and marked_b["visible"] is False  # the plain answers show while streaming
    assert "Paris" in original["value"] and a["value"].strip() and b["value"].strip()
    assert b["label"] == "B: cut 20–25"
    assert "tokens/s" in original_stats and "tokens/s" in a_stats and "tokens/s" in b_stats
    assert len(job.outputs()) > 2  # streamed, not returned at the end
    with pytest.raises(AppError, match="prompt is empty"):
        client.predict("  ", 12, 0, 1, 0, api_name="/generate")
    with pytest.raises(AppError, match="at most 4,000"):
        client.predict("x" * 20_000, 12, 0, 1, 0, api_name="/generate")
    with pytest.raises(AppError, match="seed must be a whole number"):
        client.predict("Hi", 12, 0, 1, "abc", api_name="/generate")

    shown, _plot = client.predict(["arc_easy"], 3, 0, api_name="/benchmarks")
    table = shown["value"]  # with the columns' widths: every header fits, the table fits the page
    assert len(shown["column_widths"]) == len(table["headers"])
    metrics = [row[table["headers"].index("Metric")] for row in table["data"]]
    b_title = text.column_label("B", {"B": Recipe.block(30, 20, 26)})  # each model's column titled with its recipe
    assert "arc_easy acc" in metrics and {"Original", "Score kept % (A)", b_title, "Score kept % (B)"} <= set(
        table["headers"])
    assert [h for h in table["headers"] if h.startswith("A: ")] == [a["label"]]  # as its generation column
    with pytest.raises(AppError, match="whole number"):
        client.predict(["arc_easy"], 2.5, 0, api_name="/benchmarks")
    with pytest.raises(AppError, match="at least one benchmark"):
        client.predict([], 3, 0, api_name="/benchmarks")

    for slot in ("B", "A"):  # the edited slot by default, and either on request: one zip each
        message, (archive,) = client.predict("", slot, "none", api_name="/export")
        assert message.startswith(f"Saved **{slot}** as `") and "from_pretrained" in message
        assert "/" not in folder_free(message)  # no folder of the server
        with zipfile.ZipFile(archive["path"]) as found:
            names = {name.split("/", 1)[1] for name in found.namelist()}
            marker = json.loads(found.read(next(n for n in found.namelist() if n.endswith("/layercut.json"))))
        assert {"config.json", "model.safetensors", "tokenizer.json", "layercut.json"} <= names
        removed = marker["removed_layers"]  # B: [20, 26) by hand; A: the best block of 4
        assert removed == list(range(20, 26)) if slot == "B" else len(removed) == 4 and removed != list(range(20, 26))
    message, (archive, single) = client.predict("cut-gguf", "A", "Q8_0", api_name="/export")
    assert Path(single["path"]).name == "cut-gguf.Q8_0.gguf" and "`cut-gguf.Q8_0.gguf`" in message
    with pytest.raises(AppError, match="letters, digits"):
        client.predict("my cut!", "A", "none", api_name="/export")


def test_the_page_opens_on_a_cut_that_still_answers(client):
    """A fresh visitor: the default model, angular's best block of a tenth of the layers as A, and A knows Paris."""
    fresh = Client(client.src, verbose=False, download_files=False)
    model, _md, _size, _range, banner, *_rest, stability, status = fresh.predict("angular", api_name="/startup")
    assert model["value"] == "SmolLM2-135M-Instruct" and "(3 of 30)" in banner and "WikiText-2" in banner
    offered = [name for _label, name in model["choices"]]  # offline (HF_HUB_OFFLINE): only what can load here
    assert offered[0] == "SmolLM2-135M-Instruct" and all(loading.in_local_cache(name) for name in offered[1:])
    assert "wins" in stability
    original, _stats, a, *_ = fresh.predict("What is the capital of France?", 24, 0, 1, 0, api_name="/generate")
    assert "Paris" in original["value"] and "Paris" in a["value"], (banner, a)


def test_a_long_job_can_be_cancelled_and_the_device_is_free_again(client):
    client.predict("angular", api_name="/startup")  # a model and a cut, whatever ran before
    job = client.submit(["hellaswag"], 400, 0, api_name="/benchmarks")
    deadline = time.monotonic() + 60
    while job.status().code.name not in ("PROCESSING", "PROGRESS") and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # let it start scoring
    client.predict(api_name="/cancel")
    started = time.monotonic()
    with pytest.raises(AppError, match="Cancel"):
        job.result(timeout=120)
    assert time.monotonic() - started < 60, "the job did not stop soon after cancel"
    original, _stats, a, *_ = client.predict("What is the capital of France?", 8, 0, 1, 0, api_name="/generate")
    assert original["value"].strip() and a["value"].strip()


def test_a_missing_model_is_a_message(client):
    """While a model loads nothing of the previous one shows; when the load fails the previous one is back."""
    _model, _md, _size, _range, before, *_ = client.predict("angular", api_name="/startup")
    job = client.submit("no-such-org/no-such-model", "", False, "auto", api_name="/load_model")
    with pytest.raises(AppError, match="not found"):
        job.result(timeout=120)
    loading, restored = job.outputs()[0], job.outputs()[-1]
    assert "Loading no-such-org/no-such-model" in loading[3] and loading[-1].startswith("Loading")
    assert not [t for t in loading[4]["data"] if t.get("type") == "heatmap"]  # no stale heatmap
    assert restored[3] == before and "Angular" in restored[-1]
    with pytest.raises(AppError, match="Unknown option"):
        client.predict("angular", "tokens=last", "builtin", "", None, 16, 128, 5, *AS_SHOWN, api_name="/analyze")


def test_sweep_measures_every_cut_and_ranks_the_methods(client, tiny_folder):
    """On a tiny 4-layer Llama: what is checked is that every method is analysed and ranked, not the default
    model's numbers (on it this took about 2 minutes)."""
    model_md, *_ = client.predict(tiny_folder, "", False, "auto", api_name="/load_model")
    assert "4 layers" in model_md
    client.predict("angular", "token=last", "builtin", "", None, 16, 128, 2, *AS_SHOWN, api_name="/analyze")
    plot, table, summary = client.predict("arc_easy", 2, 5, False, api_name="/sweep")
    assert "Best cut measured" in summary and "the uncut model" in summary
    assert [row[0] for row in table["data"]] == ["angular"]  # by default only the analysis on show
    plot, table, summary = client.predict("arc_easy", 2, 5, True, api_name="/sweep")  # and every other method
    methods = [row[0] for row in table["data"]]
    assert {"angular", "block_influence", "relative_magnitude", "ppl", "taylor", "zigzag"} <= set(methods)


def test_hostile_values_get_one_line_each_before_any_work(client):
    """What a probe of a shared server sent through the API: each gets its own one-line message, never
    Gradio's bare "Error" or "Something went wrong"."""
    with pytest.raises(AppError, match=r"too long \(300 characters\)"):
        client.predict("a" * 300, "", False, "auto", api_name="/load_model")
    client.predict("", "", False, "auto", api_name="/load_model")
    client.predict("angular", "token=last", "builtin", "", None, 16, 128, 3, *AS_SHOWN, api_name="/analyze")
    for method, options, message in (("ppl", "max_samples=0", "max_samples must be a whole number 1…4,096, not 0"),
                                     ("zigzag", "texts=0", "texts must be a whole number 2…20,000, not 0"),
                                     ("sleb", "num_removals=0", "num_removals must be a whole number 1…1,024")):
        with pytest.raises(AppError, match=message):
            client.predict(method, options, "builtin", "", None, 16, 128, 3, *AS_SHOWN, api_name="/analyze")
    said = []
    for call in (("angular", "", "builtin", "", None, 16, 128, 3, "paper", "auto", "attention", "/analyze"),
                 (3, "paper", "attention", "/best_block")):
        with pytest.raises(AppError, match="scores whole layers only: to remove attention blocks") as refused:
            client.predict(*call[:-1], api_name=call[-1])
        said.append(str(refused.value))
    assert said[0] == said[1]
    with pytest.raises(AppError) as refused:
        client.predict("angular", "token=" + "x" * 100_000, "builtin", "", None, 16, 128, 3, *AS_SHOWN,
                       api_name="/analyze")
    assert "token must be one of last, mean" in str(refused.value) and len(str(refused.value)) < 200

    for value in ("", "abc"):  # a slider's value reaches the handler as sent
        with pytest.raises(AppError, match=f"The number of layers must be a whole number, not '{value}'"):
            client.predict(value, "paper", "layers", api_name="/best_block")
        with pytest.raises(AppError, match=f"Max new tokens must be a whole number, not '{value}'"):
            client.predict("Hi", value, 0, 1, 0, api_name="/generate")
    with pytest.raises(AppError, match="Temperature must be a number, not ''"):
        client.predict("Hi", 12, "", 1, 0, api_name="/generate")
    with pytest.raises(AppError, match="The seed must be 0…4,294,967,295, not 9223372036854775808"):
        client.predict("Hi", 12, 0, 1, 2**63, api_name="/generate")
    with pytest.raises(AppError, match="Questions per task must be 0…100,000, not 9223372036854775808"):
        client.predict(["arc_easy"], 2**63, 0, api_name="/benchmarks")


def test_the_api_schema_gives_the_types_the_server_takes(client):
    endpoints = every_endpoint(client)
    batches = endpoints["/speed"]["parameters"][0]["type"]
    window = endpoints["/perplexity"]["parameters"][0]["type"]
    assert batches["items"] == {"enum": ["1", "4", "8", "16", "32"], "type": "string"}
    assert window == {"type": "string", "enum": ["128", "512", "2048"]}
    assert {p["type"]["type"] for p in endpoints["/generate"]["parameters"][1:4]} == {"number"}  # the sliders
    client.predict("", "", False, "auto", api_name="/load_model")
    table, *_ = client.predict(["1"], 8, 2, 1, False, False, "Q4_0", api_name="/speed")  # compiled, llama.cpp, int4 as
    assert table["value"]["data"], table
    shown, *_ = client.predict("128", 1, "wikitext2", False, api_name="/perplexity")  # the last: also in llama.cpp
    table = shown["value"]
    metrics = [row[table["headers"].index("Metric")] for row in table["data"]]
    assert any("perplexity" in metric.lower() for metric in metrics), metrics


def test_the_page_config_names_no_server_path(client):
    import os
    import sys
    import urllib.request

    from conftest import REPO

    config = urllib.request.urlopen(client.src.rstrip("/") + "/config").read().decode()
    assert "plotly" in config  # the script is still there, by a relative path
    for path in {str(REPO), os.path.realpath(REPO), sys.prefix, os.path.realpath(sys.prefix), os.path.expanduser("~"),
                 "site-packages"}:
        assert path not in config, path
