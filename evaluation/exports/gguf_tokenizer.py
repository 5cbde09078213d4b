"""The ``tokenizer.*`` metadata of a GGUF export: copied from the GGUF the model came from, or converted from a
byte-level BPE tokenizer as llama.cpp's converter does (``TextModel._set_vocab_gpt2`` / ``get_vocab_base``).

SentencePiece-style tokenizers (Llama 2, Gemma) are refused: the converter reads their ``tokenizer.model`` for
the merge scores, which a fast tokenizer does not carry (its fallback, gguf's ``LlamaHfVocab``, scores every
token -1000, and llama.cpp would then merge in the wrong order). A model loaded from a GGUF has its file's
tokenizer copied instead, whatever its kind.

``tokenizer.ggml.pre`` names llama.cpp's pre-tokenizer (``llama-vocab.cpp``). The converter finds it by hashing
the token ids of a test text against known models; we read it off the tokenizer's own pre-tokenizer, for the
three shapes in :data:`PRE_TOKENIZERS`, and refuse others rather than guess (llama.cpp's ``default`` splits
text differently from every one of them).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gguf

from prune.core.errors import InvalidInput

# The Split regexes of Llama 3's and Qwen2's tokenizer.json, before a ByteLevel without its own regex.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's name for each pre-tokenizer by its Split regex; None: a plain ByteLevel with GPT-2's own regex.
PRE_TOKENIZERS = {None: "gpt-2", _LLAMA3_SPLIT: "llama-bpe", _QWEN2_SPLIT: "qwen2"}


def add_tokenizer(writer: gguf.GGUFWriter, tokenizer, config, source: str | None) -> None:
    """Write the tokenizer metadata: ``source``'s verbatim when given, else ``tokenizer`` converted."""
    if source is not None:
        copy_tokenizer(writer, source, config.vocab_size)
    else:
        _convert(writer, tokenizer, config)


def copy_tokenizer(writer: gguf.GGUFWriter, source: str, vocab_size: int) -> None:
    """Every ``tokenizer.*`` field of the GGUF ``source``, types kept: the vocabulary the model was loaded with."""
    fields = gguf.GGUFReader(source).fields
    tokens = fields.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens.data) != vocab_size:
        count = "no" if tokens is None else len(tokens.data)
        raise InvalidInput(f"{Path(source).name} has {count} tokens, not the model's {vocab_size}: not its tokenizer.")
    for field in fields.values():
        if field.name.startswith("tokenizer."):
            kind = field.types[0]
            sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)


def tokenizer_refusal(tokenizer) -> str | None:
    """None if :func:`add_tokenizer` can convert ``tokenizer``, else one line saying why not."""
    if not getattr(tokenizer, "is_fast", False):
        return "Only a fast tokenizer (a tokenizer.json) can be converted to GGUF; this one is not."
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    if spec["model"]["type"] != "BPE" or spec["model"].get("byte_fallback"):
        return ("LayerCut converts only byte-level BPE tokenizers to GGUF; this one is SentencePiece-style or "
                f"{spec['model']['type']}: load the model from its GGUF file, whose tokenizer is then copied.")
    if _pre_name(spec.get("pre_tokenizer")) is None:
        return ("This tokenizer splits text in a way LayerCut cannot name for llama.cpp (GPT-2, Llama 3 and Qwen2 "
                "splits are known): load the model from its GGUF file, whose tokenizer is then copied.")
    return None


def _pre_name(pre: dict | None) -> str | None:
    """llama.cpp's ``tokenizer.ggml.pre`` for a tokenizer.json pre-tokenizer, or None when not one we know."""
    if pre and pre.get("type") == "ByteLevel" and pre.get("use_regex", True) and not pre.get("add_prefix_space"):
        return PRE_TOKENIZERS[None]
    steps = (pre or {}).get("pretokenizers") or []
    if (pre or {}).get("type") != "Sequence" or len(steps) != 2:
        return None
    split, byte_level = steps
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex", True) or byte_level.get("add_prefix_space"):
        return None
    return PRE_TOKENIZERS.get(split.get("pattern", {}).get("Regex"))


def _convert(writer: gguf.GGUFWriter, tokenizer, config) -> None:
    """Byte-level BPE as ``_set_vocab_gpt2`` writes it; merges and special ids read back by gguf's ``SpecialVocab``."""
    refusal = tokenizer_refusal(tokenizer)
    if refusal:
        raise InvalidInput(refusal)
    tokens, kinds = _vocabulary(tokenizer, config.vocab_size)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_name(json.loads(tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]))
    writer.add_token_list(tokens)
    writer.add_token_types(kinds)
    with tempfile.TemporaryDirectory() as folder:  # SpecialVocab reads the files a checkpoint folder holds
        tokenizer.save_pretrained(folder)
        config.to_json_file(Path(folder) / "config.json")
        gguf.SpecialVocab(folder, load_merges=True, n_vocab=len(tokens)).add_to_gguf(writer, quiet=True)


def _vocabulary(tokenizer, vocab_size: int) -> tuple[list[str], list[int]]:
    """Tokens by id and their types, as ``get_vocab_base``: ids without a token become ``[PAD<id>]`` (unused)."""
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    if max(by_id) >= vocab_size:
        raise InvalidInput(f"The tokenizer has token ids up to {max(by_id)}, past the model's {vocab_size} embeddings.")
    added = tokenizer.added_tokens_decoder
    tokens, kinds = [], []
    for index in range(vocab_size):
        token = by_id.get(index)
        tokens.append(token if token is not None else f"[PAD{index}]")
        kinds.append(_kind(token, added.get(index)))
    return tokens, kinds


def _kind(token: str | None, added) -> int:
    """The GGUF token type: control for special added tokens (and ``<|…|>`` ones, as the converter guesses)."""
    if token is None:
        return gguf.TokenType.UNUSED
    if added is None:
        return gguf.TokenType.NORMAL
    looks_special = token.startswith("<|") and token.endswith("|>")  # TextModel.does_token_look_special
    return gguf.TokenType.CONTROL if added.special or looks_special else gguf.TokenType.USER_DEFINED
