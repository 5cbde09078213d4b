"""An encoder in the app, in a real browser: its model line says what it does, the Generate tab says why it shows no
controls (another visitor's tab keeps them), and its cloze task fills the benchmark table; T5's heatmap marks where
its decoder starts, and the cut chosen stays in one stack."""

from __future__ import annotations

import pytest
import torch
import transformers

from conftest import build_tiny_tokenizer
import test_browser_jobs
from test_browser import ASSETS, VIEWPORT, banner, cloze_row, settled_text, tab

# the fixtures (pytest finds them here by these names): a server of the tiny 30-layer Llama, which an encoder
# replaces on one page and not on another's
browser, page = test_browser_jobs.browser, test_browser_jobs.page
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory):
    """A tiny random ELECTRA (the study's encoder) and a tokenizer with a mask token, as a local folder."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "[MASK]"})
    torch.manual_seed(0)
    config = transformers.ElectraConfig(vocab_size=len(tokenizer), embedding_size=16, hidden_size=32,
                                        num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                                        max_position_embeddings=256)
    folder = tmp_path_factory.mktemp("tiny-electra")
    transformers.AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_an_encoder_shows_what_it_does_and_answers_its_cloze_task(browser, page, encoder_folder):
    other = browser.new_page(viewport=VIEWPORT)  # a second visitor, on the server's model throughout
    other.goto(page.url)
    other.wait_for_selector("#heatmap .lc-plot .hm", timeout=300_000)
    tab(page, "Generate")
    assert page.is_visible("#prompt") and not page.is_visible("#generate-kind-note")  # the server's model generates
    page.fill("#model input", encoder_folder)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Load model").click()
    line = settled_text(page, "#model-info", "an encoder (masked LM)", timeout=300_000)
    assert "4 layers" in line
    note = settled_text(page, "#generate-kind-note", "it generates nothing here")
    assert "is an encoder (a masked LM)" in note and "Benchmarks" in note
    assert not page.is_visible("#prompt") and not page.is_visible("#generate-btn")
    page.screenshot(path=str(ASSETS / "screenshot-encoder-generate.png"), full_page=True)
    tab(other, "Generate")  # the other visitor still generates
    assert other.is_visible("#prompt") and not other.is_visible("#generate-kind-note")
    other.close()
    tab(page, "Benchmarks")
    assert "Original" in cloze_row(page)


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory):
    """A tiny random T5 of 4 encoder and 4 decoder layers, with sentinels in its tokenizer, as a local folder."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=4,
                                   num_decoder_layers=4, num_heads=4, decoder_start_token_id=0, pad_token_id=0)
    folder = tmp_path_factory.mktemp("tiny-t5")
    transformers.AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_t5s_heatmap_marks_where_its_decoder_starts_and_the_cut_stays_in_one_stack(page, t5_folder):
    tab(page, "Analyze & cut")
    page.fill("#model input", t5_folder)
    page.keyboard.press("Enter")
    page.get_by_role("button", name="Load model").click()
    line = settled_text(page, "#model-info", "an encoder-decoder", timeout=300_000)
    assert "8 layers" in line and "can be cut and sparsified" in line
    status = settled_text(page, "#analysis-info", "Layers 0–3 are the encoder, 4–7 the decoder", timeout=300_000)
    assert "Angular distance" in status
    page.wait_for_function("document.querySelector('#heatmap').textContent.includes('decoder →')", timeout=60_000)
    start = int(page.get_attribute("#layer-range .lc-range", "data-start"))
    end = int(page.get_attribute("#layer-range .lc-range", "data-end"))
    assert end <= 4 or start >= 4  # the best block the page chose lies in one stack
    assert f"[{start}, {end})" in banner(page)
    settled_text(page, "#cut-feedback", "No next-token feedback: ")  # a T5 cut predicts no next token
    page.screenshot(path=str(ASSETS / "screenshot-t5-heatmap.png"), full_page=True)
