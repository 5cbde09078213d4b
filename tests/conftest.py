"""Shared fixtures: tiny real models built from configs, a tiny tokenizer, isolated caches."""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import transformers

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_COMMON = dict(vocab_size=320, hidden_size=32, num_attention_heads=4, max_position_embeddings=256)

# One small config per architecture family the adapter table covers.
TINY_CONFIGS = {
    "llama": lambda n: transformers.LlamaConfig(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                num_key_value_heads=2),
    "mistral": lambda n: transformers.MistralConfig(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                    num_key_value_heads=2),
    "qwen2": lambda n: transformers.Qwen2Config(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                num_key_value_heads=2, use_sliding_window=True, sliding_window=16,
                                                max_window_layers=n // 2),
    "gemma2": lambda n: transformers.Gemma2Config(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                                  num_key_value_heads=2, head_dim=8, sliding_window=16),
    "phi3": lambda n: transformers.Phi3Config(**_COMMON, intermediate_size=64, num_hidden_layers=n,
                                              num_key_value_heads=2, pad_token_id=0),
    "gpt_neox": lambda n: transformers.GPTNeoXConfig(**_COMMON, intermediate_size=64, num_hidden_layers=n),
    "gpt2": lambda n: transformers.GPT2Config(vocab_size=320, n_embd=32, n_head=4, n_layer=n, n_positions=256),
    "opt": lambda n: transformers.OPTConfig(vocab_size=320, hidden_size=32, num_attention_heads=4, num_hidden_layers=n,
                                            ffn_dim=64, max_position_embeddings=256, word_embed_proj_dim=32),
}


def free_port() -> int:
    """A free localhost port for an app under test."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def shared_server():
    """The app launched as a shared server (``app.py --shared``) on the default model: (its URL, its backend)."""
    import app
    from evaluation.serving.backend import Backend
    from prune.core.paths import default_data_dir
    from ui.inputs import Policy

    policy = Policy(shared=True)
    backend = Backend(data_dir=str(default_data_dir()))
    demo = app.build_demo(backend, policy=policy)
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_options(policy))
    try:
        yield f"http://127.0.0.1:{port}/", backend
    finally:
        demo.close()


@pytest.fixture(scope="session")
def page():
    """The app's page laid out once (on a CPU backend): its components by name, which handlers' outputs are keyed by."""
    from evaluation.serving.backend import Backend
    from ui.page import build_page

    return build_page(Backend(data_dir="", device="cpu"))


def handlers_on(page, backend, policy=None, **context):
    """The page's handlers on ``backend`` (a real one or a stand-in), showing their results in ``page``'s components."""
    from ui.handlers import Context
    from ui.page import PageHandlers

    return PageHandlers.on(Context(backend, policy, **context), page)


def stand_in_backend(jobs: dict | None = None, **models):
    """A stand-in for the backend: ``jobs`` maps "part.method" (``"analysis.score"``) to a function, ``models`` are
    attributes of its models part (``default_calibration``, ``rates``, ``data_dir``…)."""
    from types import SimpleNamespace

    parts: dict[str, dict] = {"models": dict(models)}
    for path, function in (jobs or {}).items():
        part, method = path.split(".")
        parts.setdefault(part, {})[method] = function
    return SimpleNamespace(**{part: SimpleNamespace(**members) for part, members in parts.items()})


def update_of(outputs: dict, component):
    """What a handler's outputs do to ``component``: its update, or no change (``gr.update()``) if they leave it out."""
    import gradio as gr

    return outputs.get(component, gr.update())


def tiny_model(arch: str, layers: int = 4, seed: int = 0):
    """A randomly initialised real model of ``arch`` (float32, eval mode)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(TINY_CONFIGS[arch](layers), dtype=torch.float32)
    model.eval()
    model.layercut_name = f"tiny-{arch}-{layers}-{seed}"
    return model


def tied_llama(layers: int = 4):
    """The tiny Llama with its LM head tied to the input embedding (one matrix), as SmolLM2 and Llama 3.2 1B are."""
    config = TINY_CONFIGS["llama"](layers)
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def tiny_gemma(config_class, layers: int, **changes):
    """A Gemma 2/3 whose matrices split into 32-wide blocks. head_dim = query_pre_attn_scalar = 256: llama.cpp scales
    by 1/√head_dim and transformers' GGUF loader leaves the scalar at its default 256. A 4-token window < 16 tokens,
    so which layers slide changes the logits."""
    torch.manual_seed(0)
    config = config_class(vocab_size=320, hidden_size=64, intermediate_size=128, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256, sliding_window=4,
                          max_position_embeddings=256, num_hidden_layers=layers, **changes)
    return with_random_norms(transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval())


def with_random_norms(model):
    """Gemma's RMSNorm weights start at 0 (it multiplies by 1 + w): random ones show the file's w + 1 is undone."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(0, 0.2)
    return model


def tiny_qwen2(layers: int = 4):
    """Qwen2 without sliding windows (llama.cpp has none for it; the conftest one slides its upper layers)."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=320, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=64, num_hidden_layers=layers, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


# A minimal chat template for the tiny tokenizer: each message between role and end-of-text marks
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|endoftext|>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def build_tiny_tokenizer():
    """A byte-level BPE tokenizer (320 tokens) trained on the built-in calibration text."""
    from prune.core.tiny import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(autouse=True, scope="session")
def isolated_cache(tmp_path_factory):
    """Analyses and results go to a fresh folder; the dequantized default model is reused."""
    persistent = Path(os.environ.get("LAYERCUT_CACHE") or Path.home() / ".cache" / "layercut")
    (persistent / "models").mkdir(parents=True, exist_ok=True)
    root = tmp_path_factory.mktemp("layercut-cache")
    (root / "models").symlink_to(persistent / "models", target_is_directory=True)
    os.environ["LAYERCUT_CACHE"] = str(root)
    yield root


@pytest.fixture(scope="session")
def default_model():
    """The embedded default (SmolLM2-135M-Instruct), loaded once per session."""
    import prune

    return prune.load_model()


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory, tiny_tokenizer):
    """A 4-layer tiny Llama and its tokenizer saved as a normal Hugging Face folder."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama", 4).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def tiny_llama_30(tmp_path_factory):
    """A tiny random Llama of 30 layers (the default model's count) and its tokenizer, with a minimal chat template
    (MT-Bench talks to a chat model), as a folder, its positions widened to 2048 (the frontier's and healing's windows
    of 512 tokens): a server's model where the pages are the point, not the 135 M model's numbers."""
    model = tiny_model("llama", 30)
    model.config.max_position_embeddings = 2048
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    folder = tmp_path_factory.mktemp("tiny-llama-30")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def spec(tiny_folder):
    """The tiny folder as a model spec (a module may define its own)."""
    from evaluation.core.pool import ModelSpec

    return ModelSpec(tiny_folder)


@pytest.fixture(scope="module")
def backend(spec):
    """A CPU backend with the tiny model loaded, one per test module."""
    from evaluation.serving.backend import Backend

    b = Backend(device="cpu")
    b.models.load(spec)
    return b


@pytest.fixture(scope="session")
def data_dir():
    """The benchmark data folder (LAYERCUT_DATA_DIR or ../shared/benchdata); its absence fails, never skips."""
    from prune.core.paths import default_data_dir

    path = default_data_dir()
    if path is None or not path.is_dir():
        pytest.fail("no benchmark data folder: set LAYERCUT_DATA_DIR (CI has ../shared/benchdata)")
    return path


@pytest.fixture(autouse=True)
def one_thread_for_tiny_models(request):
    """Tests not marked slow use tiny models, whose many small ops run far faster on one thread
    (OpenMP barriers cost more than they save, most of all on a busy machine)."""
    if request.node.get_closest_marker("slow"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def assert_read_sequentially(seen: list, derived, model, ids) -> None:
    """Each layer's recorded calibration inputs ``seen`` are ``derived``'s own (the outputs of the layers
    already changed before it), and past the first layer no longer the original ``model``'s."""
    from prune.core.hidden import residual_streams

    (after,), (before,) = residual_streams(derived, ids), residual_streams(model, ids)
    assert len(seen) == len(after) - 1
    for index, hidden in enumerate(seen):
        torch.testing.assert_close(hidden, after[index], rtol=1e-4, atol=1e-5)
        if index > 0:
            assert not torch.allclose(hidden, before[index], atol=1e-3)


def folder_free(message: str) -> str:
    """An export message less what may name a path: the llama.cpp option, and the scale-out commands' folder as
    unzipped (``pretrained=./<name>,``); any "/" left would name a folder of the server."""
    import re

    return re.sub(r"pretrained=\./[^/,\s]+,", "", message.replace("`--prune-layers`", ""))


def deployment_frontier(axis: str = "bytes", sizes: tuple = (0.9,)):
    """A frontier of made-up points with known answers (see tests/evaluation/frontier/test_deployment.py): a
    Wanda-like point holding the original's bytes and speed (and a slightly lower perplexity), a 2:4-like one slower
    than the original, an int8-like one a quarter of the bytes, a depth cut 85 % of both."""
    from evaluation.frontier.result import MIB, FrontierResult, Point
    from prune.core.recipe import Recipe
    from prune.quantize.step import Quantize
    from prune.sparsity.step import Sparsify

    params, stored = 1_000_000, 512 * MIB

    def point(families, recipe, share, size, ms, ppl, floor=None):
        return Point(families, None, recipe, round(share * params), round(size * stored), ms, 67.4, 1.0, ppl, 0.5,
                     1.0, 1.0, floor)

    cut = Recipe.block(8, 4, 5)
    points = (point(("sparsity",), Recipe((Sparsify.of("magnitude", 0.127),)), 0.873, 1.0, 66.6, 9.9),
              point(("2:4",), Recipe((Sparsify.of("magnitude", pattern="2:4"),)), 0.6, 1.0, 70.0, 30.0),
              point(("int8",), Recipe((Quantize.of(8),)), 1.0, 0.27, 40.0, 10.2, floor=3.4),
              point(("depth, block",), cut, 0.85, 0.85, 58.0, 14.0, floor=10.7))
    dense = point((), Recipe(), 1.0, 1.0, 67.4, 10.0, floor=12.6)
    return FrontierResult(axis, sizes, "block_influence", "arc_easy", "acc", 4, 32, 2, dense, points)
