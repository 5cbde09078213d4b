"""C4 perplexity by SparseGPT's and Wanda's rule, on a small C4-format shard built here."""

import math

import pytest
import torch
from tokenizers.processors import TemplateProcessing

from conftest import build_tiny_tokenizer, tiny_model
from evaluation.quality import c4
from own_tasks import write_shard
from prune.core.errors import InvalidInput

SEQ = 128


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny tokenizer with a BOS before every text, as a Llama tokenizer adds one."""
    tok = build_tiny_tokenizer()
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", tok.eos_token_id)])
    return tok


def by_hand(tokenizer, texts, seq_len, windows=256):
    """The papers' rule written out: ' '.join of the first 1100, BOS + the text's tokens, cut to 256 × seqlen,
    numel // seqlen windows."""
    ids = [tokenizer.eos_token_id] + tokenizer(" ".join(texts[:1100]), add_special_tokens=False)["input_ids"]
    ids = ids[: windows * seq_len]
    count = len(ids) // seq_len
    return torch.tensor([ids[i * seq_len:(i + 1) * seq_len] for i in range(count)])


def test_the_first_1100_documents_joined_with_a_space_in_whole_windows(tmp_path, tokenizer):
    texts = [f"Document {i} says hello." for i in range(1200)]
    texts[1100] = "ZEBRA " * 50  # the 1101st is never read
    shard = write_shard(tmp_path / c4.LOCAL, texts)
    assert c4.shard(tmp_path) == shard
    read = c4.documents(shard)
    assert read == texts[:1100]
    found = c4.windows(tokenizer, read, SEQ)
    expected = by_hand(tokenizer, texts, SEQ)
    assert torch.equal(found, expected) and found[0, 0] == tokenizer.eos_token_id  # one BOS, at the very start
    assert len(found) < 256  # the short text gives fewer windows than 256


def test_a_long_text_is_cut_to_256_windows(tmp_path, tokenizer):
    texts = [" ".join(["Alice was beginning to get very tired of sitting by her sister."] * 4)] * 1100
    found = c4.windows(tokenizer, texts, SEQ)
    assert found.shape == (256, SEQ) and torch.equal(found, by_hand(tokenizer, texts, SEQ))


def test_the_backend_scores_the_windows_as_sparsegpts_llama_eval(tmp_path, monkeypatch, tiny_tokenizer):
    from evaluation.serving.backend import Backend
    from evaluation.core.pool import ModelSpec
    from prune.core.recipe import Recipe

    monkeypatch.setenv("LAYERCUT_CACHE", str(tmp_path / "cache"))
    model = tiny_model("llama", 4)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    texts = [" ".join(["Alice was beginning to get very tired of sitting by her sister."] * 3)] * 60
    write_shard(tmp_path / "data" / c4.LOCAL, texts)
    backend = Backend(data_dir=str(tmp_path / "data"), device="cpu")
    found = backend.measure.c4_results(ModelSpec(str(folder)), {"cut": Recipe.block(4, 1, 2)}, limit=3)
    seq_len = 256  # the tiny model's positions, under the papers' 2048
    windows = c4.windows(tiny_tokenizer, texts, seq_len)[:3]
    nlls = []
    with torch.no_grad():
        for window in windows:  # SparseGPT's llama_eval: mean loss of the shifted window × seqlen, then exp
            logits = model(window[None]).logits
            loss = torch.nn.functional.cross_entropy(logits[0, :-1], window[1:])
            nlls.append(loss * seq_len)
    expected = math.exp(float(torch.stack(nlls).sum() / (len(windows) * seq_len)))
    entry = found["original"]
    assert entry["results"]["perplexity,none"] == pytest.approx(expected, rel=1e-5)
    assert entry["n-samples"]["effective"] == 3 and entry["seq_len"] == seq_len and entry["tokens"] == 3 * 255
    assert found["cut"]["results"]["perplexity,none"] != pytest.approx(expected)
    assert backend.measure.c4_results(ModelSpec(str(folder)), {}, limit=3)["original"] == entry  # from the cache


def test_offline_without_the_file_one_line_says_what_to_put_where(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InvalidInput) as caught:
        c4.shard(tmp_path)
    assert str(caught.value) == (f"C4 perplexity needs allenai/c4's en/c4-validation.00000-of-00008.json.gz: the Hub "
                                 f"cannot be reached, so download it and put it at "
                                 f"{tmp_path}/c4/c4-validation.00000-of-00008.json.gz.")


def test_a_file_that_is_not_a_shard_is_one_line(tmp_path):
    bad = tmp_path / c4.LOCAL
    bad.parent.mkdir()
    bad.write_text("not gzip")
    with pytest.raises(InvalidInput, match="is not a C4 shard"):
        c4.documents(bad)
