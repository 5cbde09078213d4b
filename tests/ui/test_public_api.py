"""The public API (``ui.api``) as a script or an agent calls it: plain values in, plain JSON out, checked against
the library and the backend reached another way; the API page and MCP list nothing else."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from conftest import free_port
from gradio_client import Client
from gradio_client.exceptions import AppError

import prune
from evaluation.quality import lm_eval_adapter
from evaluation.serving.backend import Backend
from evaluation.core.pool import ModelSpec
from prune.core.recipe import Recipe
from ui.api import PUBLIC
from ui.inputs import Policy

CUT = Recipe.block(4, 1, 3)  # the tiny model's middle two layers


@contextmanager
def launched(policy: Policy):
    """The app on a CPU backend, launched as ``app.py`` launches it: (a client, its URL, the backend)."""
    import app

    backend = Backend(device="cpu")
    demo = app.build_demo(backend, policy=policy)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_options(policy))
    url = f"http://127.0.0.1:{port}/"
    try:
        yield Client(url, verbose=False, download_files=False), url, backend
    finally:
        demo.close()


@pytest.fixture(scope="module")
def server():
    with launched(Policy()) as running:
        yield running


def test_the_api_page_and_mcp_list_only_the_public_endpoints(server):
    client, url, _backend = server
    info = client.view_api(print_info=False, return_format="dict")
    assert set(info["named_endpoints"]) == {f"/{name}" for name in PUBLIC} and not info["unnamed_endpoints"]
    assert info["named_endpoints"]["/compare_models"]["parameters"][4]["type"] == {"type": "integer"}
    tools = httpx.get(f"{url}gradio_api/mcp/schema").json()
    assert {tool["name"] for tool in tools} == set(PUBLIC)
    analyze = next(tool for tool in tools if tool["name"] == "analyze_model")
    assert "importance method" in analyze["inputSchema"]["properties"]["method"]["description"]
    every = httpx.get(f"{url}gradio_api/info", params={"all_endpoints": "true"}).json()["named_endpoints"]
    assert {"/load_model", "/feedback_after_release", "/analyze"} <= set(every)  # the page's own, still callable


def test_analyze_gives_the_librarys_scores_and_each_sizes_best_block(server, tiny_folder):
    client, _url, backend = server
    found = client.predict(tiny_folder, "angular", api_name="/analyze_model")
    model, tokenizer = prune.load_model(tiny_folder, device="cpu")
    expected = prune.score(model, tokenizer, "angular", calibration=backend.models.default_calibration, use_cache=False)
    assert found["num_layers"] == 4 and found["method"] == "angular"
    np.testing.assert_allclose(found["layer_scores"], expected.layer_scores, rtol=1e-5, atol=1e-6)
    blocks = expected.block_scores  # [K, start]: by hand, the lowest score of each row K
    starts = {k: int(np.argmin(blocks[k - 1, :5 - k])) for k in (1, 2, 3)}
    assert found["best_blocks"] == [{"layers": k, "start": start, "end": start + k} for k, start in starts.items()]
    for method, message in (("wanda", "scores no layers"), ("nope", "Unknown method 'nope'")):
        with pytest.raises(AppError, match=message) as refused:
            client.predict(tiny_folder, method, api_name="/analyze_model")
        assert "\n" not in str(refused.value)


def test_compare_gives_the_benchmarks_columns(server, tiny_folder, data_dir):
    client, _url, _backend = server
    found = client.predict(tiny_folder, json.dumps(CUT.to_json()), "", "arc_easy", 3, api_name="/compare_models")
    assert list(found["columns"]) == ["original", "A"] and found["limit"] == 3
    assert Recipe.from_json(found["columns"]["A"]["recipe"]) == CUT and found["columns"]["original"]["recipe"] is None
    # The Benchmarks tab's route, on a backend of its own and without the results cache
    request = lm_eval_adapter.check_request(["arc_easy"], limit=3, data_dir=data_dir)
    expected = Backend(device="cpu").measure.benchmarks(ModelSpec(tiny_folder), {"A": CUT}, request, use_cache=False)
    for m in expected:
        assert found["columns"][m.model]["scores"][m.name]["value"] == pytest.approx(m.value), m


@pytest.mark.parametrize("recipe_a, tasks, limit, message", [
    ("{not json", "arc_easy", 2, "Recipe A: This recipe is not JSON"),
    (json.dumps(Recipe.block(30, 20, 26).to_json()), "arc_easy", 2, "made for a 30-layer model; this model has 4"),
    ('{"steps": []}', "arc_easy", 2, "Recipe A has no steps"),
    ("", "arc_easy, no_such_task", 2, "Unknown task"),
    ("", "arc_easy", 2.5, "whole number"),
])
def test_bad_values_get_one_line_each(server, tiny_folder, recipe_a, tasks, limit, message):
    client, _url, _backend = server
    with pytest.raises(AppError, match=message) as refused:
        client.predict(tiny_folder, recipe_a, "", tasks, limit, api_name="/compare_models")
    assert "\n" not in str(refused.value)


def test_a_shared_server_takes_no_server_path_through_the_api(tiny_folder):
    reads_a_file = {"steps": [{"kind": "sparsify", "method": "wanda", "sparsity": 0.5, "pattern": "unstructured",
                               "calibration": {"source": "file", "path": "/etc/passwd"}}]}
    with launched(Policy(shared=True, model_root=Path(tiny_folder).parent)) as (client, _url, _backend):
        for model in ("/etc", str(Path(tiny_folder).parent.parent)):
            with pytest.raises(AppError, match="is not a model this server can load") as refused:
                client.predict(model, "angular", api_name="/analyze_model")
            assert "\n" not in str(refused.value)
        with pytest.raises(AppError, match="reads no files from its disk"):
            client.predict(tiny_folder, json.dumps(reads_a_file), "", "arc_easy", 2, api_name="/compare_models")
        with pytest.raises(AppError, match="Questions per task must be 0…500"):
            client.predict(tiny_folder, "", "", "arc_easy", 100_000, api_name="/compare_models")
