"""The default calibration: WikiText-2 when the data folder has it, a long built-in text otherwise, spread windows."""

from __future__ import annotations

import pytest
import torch

import prune
from ui.handlers import default_block_size
from prune.core.calibration import Calibration, default_calibration, load_text, token_windows


def counting_tokenizer(count: int):
    """A stand-in tokenizer whose text is the tokens 0 … count-1, so windows are checkable by hand."""
    return lambda text, add_special_tokens=False: {"input_ids": list(range(count))}


def test_windows_spread_evenly_over_the_whole_text():
    tok = counting_tokenizer(100)
    four = token_windows(tok, Calibration(source="text", text="x", n_samples=4, seq_len=10))
    assert four[:, 0].tolist() == [0, 30, 60, 90] and four[-1, -1].item() == 99
    assert torch.equal(four[1], torch.arange(30, 40))
    whole = token_windows(tok, Calibration(source="text", text="x", n_samples=50, seq_len=10))
    assert torch.equal(whole.flatten(), torch.arange(100))  # only 10 fit: they tile the text
    one = token_windows(tok, Calibration(source="text", text="x", n_samples=1, seq_len=10))
    assert one.tolist() == [list(range(10))]


def test_uneven_spacing_never_overlaps():
    windows = token_windows(counting_tokenizer(1000), Calibration(source="text", text="x", n_samples=7, seq_len=128))
    starts = windows[:, 0]
    assert starts[0] == 0 and windows[-1, -1] == 999
    assert (starts.diff() >= 128).all()


def test_default_is_wikitext2_from_the_data_folder(data_dir):
    cal = default_calibration(data_dir)
    assert cal == Calibration(source="wikitext2", path=str(data_dir))
    assert load_text(cal).lstrip().startswith("= Homarus gammarus =")


def test_default_without_data_is_the_long_builtin_text(tmp_path):
    assert default_calibration(None) == Calibration() == default_calibration(tmp_path)
    text = load_text(Calibration())
    assert text.startswith("The river begins high in the mountains")  # texts/calibration.txt first
    assert "Alice was beginning to get very tired of sitting by her sister" in text
    assert len(text) > 140_000


def test_the_builtin_text_fills_the_default_windows(tiny_tokenizer):
    cal = Calibration()
    assert token_windows(tiny_tokenizer, cal).shape == (cal.n_samples, cal.seq_len)


@pytest.mark.slow
def test_the_opening_cut_of_the_default_calibration_answers_paris(default_model, data_dir):
    """The app opens on angular's best block of a tenth of the layers; that cut still knows Paris."""
    from evaluation.measure.generation import TokenStream, encode_prompt

    model, tokenizer = default_model
    size = default_block_size(model.config.num_hidden_layers)  # the app's opening block size: 3 of 30
    assert size == 3
    result = prune.score(model, tokenizer, "angular", calibration=default_calibration(data_dir))
    start, end = result.best_block(size)
    prompt = encode_prompt(tokenizer, "What is the capital of France?")
    stream = TokenStream(prune.cut(model, start, end), tokenizer, prompt, max_new_tokens=24, temperature=0.0, top_p=1.0,
                         seed=0)
    while not stream.done:
        stream.step()
    assert "Paris" in stream.state()["text"], (start, end, stream.state()["text"])
