"""A shared server (``app.py --shared``) driven over HTTP as visitors would: private exports, the
upload limit."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import httpx
import pytest
from gradio.utils import get_upload_folder
from gradio_client import Client

from conftest import folder_free, shared_server
from prune.core.paths import cache_root
from evaluation.serving.downloads import SHARED_FOLDER
from ui.inputs import MAX_TEXT_BYTES

pytestmark = pytest.mark.slow
CALL_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def server():
    with shared_server() as running:
        yield running


def visitor(url: str) -> Client:
    client = Client(url, verbose=False, download_files=False)
    client.submit("angular", api_name="/startup").result(timeout=CALL_TIMEOUT_S)
    return client


def test_two_visitors_exports_of_one_name_are_private_to_each(server):
    url, _backend = server
    first, second = visitor(url), visitor(url)
    first.predict([20, 26], api_name="/set_cut")
    second.predict([3, 5], api_name="/set_cut")
    said_a, (zip_a,) = first.predict("team-cut", "A", "none", api_name="/export")
    said_b, (zip_b,) = second.predict("team-cut", "A", "none", api_name="/export")
    assert "as `team-cut.zip`" in said_a and "as `team-cut.zip`" in said_b and "/" not in folder_free(said_a)
    folder_a, folder_b = (f["path"].split(f"/{SHARED_FOLDER}/")[1].split("/")[0] for f in (zip_a, zip_b))
    assert folder_a != folder_b and len(folder_a) == len(folder_b) == 32
    got_a, got_b = (httpx.get(url.rstrip("/") + f["url"].split(url.rstrip("/"))[-1]) for f in (zip_a, zip_b))
    assert got_a.status_code == got_b.status_code == 200
    card_a, card_b = (json.loads(zipfile.ZipFile(io.BytesIO(got.content)).read("team-cut/layercut.json"))
                      for got in (got_a, got_b))
    assert card_a["removed_layers"] == list(range(20, 26)) and card_b["removed_layers"] == [3, 4]
    said, (_zip, single) = second.predict("team-gguf", "A", "Q8_0", api_name="/export")  # the GGUF, served alone
    got = httpx.get(url.rstrip("/") + single["url"].split(url.rstrip("/"))[-1])
    assert got.status_code == 200 and got.content[:4] == b"GGUF" and "/" not in folder_free(said)
    # The predictable place a personal machine would use is never served, even when a file lies there.
    plain = cache_root() / "exports" / "team-cut" / "layercut.json"
    plain.parent.mkdir(parents=True, exist_ok=True)
    plain.write_text("{}")
    assert httpx.get(f"{url}gradio_api/file={plain}").status_code == 403


def test_an_upload_over_the_limit_is_refused_by_the_server_and_not_kept(server):
    url, _backend = server
    folder = Path(get_upload_folder())
    before = set(folder.rglob("*"))
    # Straight to the upload route: gradio_client would refuse it on its side, before the server is asked.
    refused = httpx.post(f"{url}gradio_api/upload", files={"files": ("big.txt", b"word " * (MAX_TEXT_BYTES // 5 + 1))})
    fits = httpx.post(f"{url}gradio_api/upload", files={"files": ("small.txt", b"word " * 1000)})
    assert refused.status_code == 413 and fits.status_code == 200, (refused.text, fits.text)
    new = {p.name for p in set(folder.rglob("*")) - before if p.is_file()}
    assert "big.txt" not in new and "small.txt" in new
