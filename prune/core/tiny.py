"""A tiny byte-level BPE tokenizer and a tiny random Llama, built in memory from the built-in calibration text: what
a check of the machine runs (llama.cpp's probe, once per build and machine) and what the tests build on."""

from __future__ import annotations

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from prune.core.calibration import BUILTIN_TEXTS


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (320 tokens) trained on the built-in calibration text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([BUILTIN_TEXTS[0].read_text()], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def tiny_llama(layers: int = 2, hidden: int = 256, seed: int = 0) -> transformers.LlamaForCausalLM:
    """A random Llama of the tokenizer's vocabulary (float32, eval mode); 256 wide by default, so every GGUF type's
    blocks split its rows."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=320, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=layers,
                                      max_position_embeddings=256)
    return transformers.LlamaForCausalLM(config).eval()
