"""Encoders (masked LMs: ELECTRA, BERT, RoBERTa) and an encoder-decoder (T5) on cloze tasks by the seed's rule, and
their sparsity sweep by the CLI."""

from __future__ import annotations

import pytest
import torch
import transformers
from lm_eval.api.instance import Instance

import prune
from conftest import build_tiny_tokenizer
from evaluation.quality import cloze, cloze_request
from evaluation.quality.fast_lm import make_fast
from evaluation.quality.masked_lm import MaskedLM
from evaluation.quality.sentinel_lm import SentinelLM
from prune.core.errors import InvalidInput
from prune.sparsity.masks import zero_fraction
import test_cloze
from test_cloze import TASK
from test_cloze_sweep_cli import LEVELS, sweep_by_cli

known_answers = test_cloze.known_answers  # the fixture: pytest finds it here by this name
_COMMON = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64)
ENCODERS = {  # the seed's encoder first
    "electra": lambda v, pad: transformers.ElectraConfig(vocab_size=v, embedding_size=16, max_position_embeddings=256,
                                                         pad_token_id=pad, **_COMMON),
    "bert": lambda v, pad: transformers.BertConfig(vocab_size=v, max_position_embeddings=256, pad_token_id=pad,
                                                   **_COMMON),
    "roberta": lambda v, pad: transformers.RobertaConfig(vocab_size=v, max_position_embeddings=258, pad_token_id=pad,
                                                         **_COMMON),
}


@pytest.fixture(scope="module")
def masked_tokenizer():
    """The tiny BPE tokenizer with a mask token and T5's first two sentinels."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"mask_token": "[MASK]",
                                  "additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})
    return tokenizer


def tiny_encoder(arch: str, tokenizer, seed: int = 0):
    torch.manual_seed(seed)
    if arch == "t5":
        config = transformers.T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=3,
                                       num_decoder_layers=2, num_heads=4, decoder_start_token_id=tokenizer.pad_token_id,
                                       pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        return transformers.AutoModelForSeq2SeqLM.from_config(config, dtype=torch.float32).eval()
    config = ENCODERS[arch](len(tokenizer), tokenizer.pad_token_id)
    return transformers.AutoModelForMaskedLM.from_config(config, dtype=torch.float32).eval()


def score_by_hand(model, tokenizer, left: str, candidate: str, right: str) -> float:
    """The rule on one plain forward pass of the whole model (its full head): the three parts tokenized apart and
    joined (the left's trailing space goes with the candidate, as byte-level BPE splits words), the candidate's tokens
    masked, the end kept when too long (the first token stays)."""
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"]
           for text in (left.rstrip(" "), " " + candidate, right)]
    whole, start = ids[0] + ids[1] + ids[2], len(ids[0])
    where = list(range(start, start + len(ids[1])))
    limit = model.config.max_position_embeddings - 2
    if len(whole) > limit:
        cut = len(whole) - limit
        whole, where = whole[:1] + whole[1 + cut:], [i - cut for i in where]
    masked = list(whole)
    for i in where:
        masked[i] = tokenizer.mask_token_id
    with torch.no_grad():
        probs = model(torch.tensor([masked])).logits[0].softmax(-1)
    return float(probs[torch.tensor(where), torch.tensor([whole[i] for i in where])].mean())


def sentinel_score_by_hand(model, tokenizer, left: str, candidate: str, right: str) -> float:
    """T5's rule on one plain pass with ``labels`` (transformers shifts them): the blank as <extra_id_0> in the input
    (its last 512 tokens), the target <extra_id_0> candidate <extra_id_1>, the candidate's tokens' mean probability."""
    source = tokenizer(left + "<extra_id_0>" + right)["input_ids"][-512:]
    words = tokenizer(candidate, add_special_tokens=False)["input_ids"]
    sentinels = tokenizer.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_1>"])
    target = [sentinels[0], *words, sentinels[1]]
    with torch.no_grad():
        probs = model(input_ids=torch.tensor([source]), labels=torch.tensor([target])).logits[0].softmax(-1)
    return float(probs[torch.arange(1, 1 + len(words)), torch.tensor(words)].mean())


def by_hand(model, tokenizer, *request) -> float:
    rule = sentinel_score_by_hand if model.config.model_type == "t5" else score_by_hand
    return rule(model, tokenizer, *request)


def best_by_hand(model, tokenizer, question) -> str:
    scores = [by_hand(model, tokenizer, *cloze_request.parts(question, option)) for option in question["options"]]
    return question["options"][scores.index(max(scores))]


@pytest.mark.parametrize("arch", [*ENCODERS, "t5"])
def test_an_encoder_scores_each_candidate_in_the_blank_by_the_rule(arch, masked_tokenizer):
    model = tiny_encoder(arch, masked_tokenizer)
    lm = make_fast(model, masked_tokenizer, batch_size=3)
    assert isinstance(lm, SentinelLM if arch == "t5" else MaskedLM)
    question = cloze.questions(TASK)[0]
    requests = [Instance("cloze", question, cloze_request.parts(question, option), i)
                for i, option in enumerate(question["options"])]
    scores = lm.cloze(requests)  # batched, padded, the head at the masked positions only
    expected = [by_hand(model, masked_tokenizer, *r.args) for r in requests]
    assert scores == pytest.approx(expected, rel=1e-4, abs=1e-9)
    assert len(set(scores)) > 1 and all(0 < s < 1 for s in scores)


@pytest.mark.parametrize("arch", [*ENCODERS, "t5"])
def test_the_sparsity_sweep_of_an_encoder_starts_from_the_rule_by_hand(arch, masked_tokenizer, known_answers, tmp_path,
                                                                      capsys, data_dir):
    folder = tmp_path / f"tiny-{arch}"
    tiny_encoder(arch, masked_tokenizer).save_pretrained(folder)
    masked_tokenizer.save_pretrained(folder)
    model, tokenizer = prune.load_model(str(folder), device="cpu")
    assert type(model).__name__.endswith("ForConditionalGeneration" if arch == "t5" else "ForMaskedLM")
    rows = [dict(q) for q in cloze.questions(TASK)[:4]]
    for i, row in enumerate(rows):  # the dense model's own pick right in three questions of four
        best = best_by_hand(model, tokenizer, row)
        row["answer"] = best if i < 3 else next(o for o in row["options"] if o != best)
    known_answers(rows)
    before = {name: p.clone() for name, p in model.named_parameters()}

    data, out = sweep_by_cli(folder, data_dir, tmp_path, capsys)
    assert data["levels"] == LEVELS and data["methods"] == ["magnitude", "wanda"] and data["metric"] == "acc"
    assert data["dense_accuracy"] == 0.75  # the rule applied by hand, on one plain forward pass per option
    half = prune.sparsify(model, tokenizer, "magnitude", 0.5)
    expected = sum(best_by_hand(half, tokenizer, row) == row["answer"] for row in rows) / len(rows)
    assert data["accuracy"]["magnitude"][2] == expected
    assert all(len(data["accuracy"][m]) == len(LEVELS) for m in data["methods"])
    assert data["dense_perplexity"] is None or data["dense_perplexity"] != data["dense_perplexity"]  # none: a masked LM
    assert "(no perplexity: not a causal LM); dense: 75.00 %" in out and "| magnitude | 75.00 | " in out
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())  # the original untouched
    assert zero_fraction(half) == pytest.approx(0.5, abs=0.01)


def test_an_encoder_refuses_a_log_likelihood_task_in_one_line(masked_tokenizer):
    lm = make_fast(tiny_encoder("bert", masked_tokenizer), masked_tokenizer)
    with pytest.raises(InvalidInput, match="an encoder or an encoder-decoder answers cloze tasks only"):
        lm.loglikelihood([])
    with pytest.raises(InvalidInput, match="^Perplexity needs a causal language model"):
        lm.loglikelihood_rolling([])
