"""The compiled decode mode decodes the eager loop's tokens, and its compile is kept out of the timed runs."""

import pytest
import torch
import transformers
from torch._dynamo.utils import counters

from evaluation.measure import compiled, speed
from prune.core.errors import InvalidInput
from tests.conftest import tiny_model


def _uncached_greedy(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The independent route: the whole sequence through the model for every token, no cache."""
    sequence = prompt
    with torch.no_grad():
        for _ in range(new_tokens):
            token = model(input_ids=sequence).logits[:, -1].argmax(-1, keepdim=True)
            sequence = torch.cat([sequence, token], dim=1)
    return sequence[:, prompt.shape[1]:]


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]  # dynamo's count of the graphs it has compiled in this process


@pytest.mark.slow  # inductor builds C++ kernels: 23–45 s on a busy 2-core machine with a cold cache, 2–4 s warm
def test_the_compiled_mode_decodes_the_eager_tokens_and_compiles_only_in_its_first_run_at_a_shape():
    model = tiny_model("llama")
    prompt = torch.tensor([[5, 17, 3, 99, 42, 7], [1, 2, 3, 4, 5, 6]])  # [2, 6]
    expected = _uncached_greedy(model, prompt, 6)
    runs = compiled.CompiledRuns(most_new_tokens=6)
    before = _graphs()
    _, _, first_compile = runs.run(model, prompt, 6)
    assert _graphs() > before and first_compile > 0  # the first run at this shape compiled, and was timed apart
    compiled_now = _graphs()
    cache, fresh = runs._cache(model, prompt)
    assert not fresh
    prefill_ms, decode_ms, tokens = compiled.generate(model, prompt, 6, cache)
    assert torch.equal(tokens, expected)  # the eager loop's greedy tokens (the speed test checks that loop alike)
    _, _, again = runs.run(model, prompt, 6)
    assert again == 0 and _graphs() == compiled_now  # the timed runs compile nothing
    _, _, one_row = runs.run(model, prompt[:1], 6)  # a new batch: a new cache shape, compiled (and timed apart) again
    assert one_row > 0


@pytest.mark.slow  # as above
def test_the_layers_compile_by_region_and_another_model_of_the_same_shape_reuses_their_code():
    model, other = tiny_model("llama"), tiny_model("llama", seed=1)  # the same shape, other weights
    prompt = torch.tensor([[5, 17, 3, 99, 42, 7]])
    runs = compiled.CompiledRuns(most_new_tokens=5)
    before = _graphs()
    runs.run(model, prompt, 5)
    assert _graphs() - before == 1  # one graph serves the four layers (their weights and cache layers are its inputs)
    assert all(layer._compiled_call_impl is None for layer in model.model.layers)  # eager again after the run
    compiled_now = _graphs()
    _, _, second = runs.run(other, prompt, 5)
    assert _graphs() == compiled_now  # the weights are the graphs' inputs: the first model's code serves
    cache, _ = runs._cache(other, prompt)
    assert torch.equal(compiled.generate(other, prompt, 5, cache)[2], _uncached_greedy(other, prompt, 5))


@pytest.mark.slow  # as above, 5-12 s an architecture
@pytest.mark.parametrize("arch", ["mistral", "gemma2", "gpt2"])
def test_regional_compile_decodes_the_eager_tokens_where_a_layer_asks_more_of_its_cache(arch):
    """Sliding-window layers (mistral, gemma2's alternating ones) and GPT-2's own layer-index scaling: a layer that
    reads more than ``update`` from its cache, or its own index, gets a graph of its own and the same tokens."""
    model = tiny_model(arch)
    prompt = torch.tensor([[5, 17, 3, 99, 42, 7]])
    runs = compiled.CompiledRuns(most_new_tokens=5)
    runs.run(model, prompt, 5)
    cache, _ = runs._cache(model, prompt)
    assert torch.equal(compiled.generate(model, prompt, 5, cache)[2], _uncached_greedy(model, prompt, 5))


@pytest.mark.slow  # as above (two models, each compiled)
def test_speed_rows_in_the_compiled_mode_are_named_apart_and_give_each_models_compile_time():
    models = {"original": tiny_model("llama"), "A": tiny_model("llama", layers=2)}
    rows = speed.measure_speed(models, batch_sizes=(1,), prompt_len=6, new_tokens=(4,), repeats=1, compiled=True)
    timed = [m for m in rows if not m.name.startswith("compile")]
    assert timed and all(m.name.endswith(" (compiled)") and m.details["mode"] == "compiled" for m in timed)
    compile_rows = [m for m in rows if m.name.startswith("compile")]
    assert [(m.model, m.name, m.unit) for m in compile_rows] == [("original", "compile time (batch 1)", "s"),
                                                                 ("A", "compile time (batch 1)", "s")]
    assert all(m.value > 0 for m in compile_rows)


def test_eager_rows_keep_their_names_and_say_they_ran_eagerly():
    rows = speed.measure_speed({"original": tiny_model("llama")}, batch_sizes=(1,), prompt_len=6, new_tokens=(3,),
                               repeats=1, warmup=0)
    assert rows and all(m.details["mode"] == "eager" and "compiled" not in m.name for m in rows)


def test_the_compiled_mode_refuses_a_model_without_decoding():
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=320, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64)
    encoder = transformers.AutoModelForMaskedLM.from_config(config).eval()
    with pytest.raises(InvalidInput, match="generates nothing"):
        compiled.CompiledRuns(4).run(encoder, torch.tensor([[1, 2, 3]]), 4)


@pytest.mark.slow  # as above (two tiny models compiled)
def test_the_backend_gives_compiled_rows_beside_the_eager_ones_with_the_ideal_paired_by_mode(backend, spec):
    from prune.core.recipe import Recipe

    found = backend.measure.speed(spec, {"pruned": Recipe.block(4, 1, 3)}, batch_sizes=(1,), prompt_len=6,
                                  new_tokens=(3,),
                          repeats=1, compiled=True)
    modes = {(m.model, m.details["mode"]) for m in found}
    assert modes == {("original", "eager"), ("original", "compiled"), ("pruned", "eager"), ("pruned", "compiled")}
    assert all(m.details["kernel"] == "dense" for m in found)
    decode = [m for m in found if m.model == "pruned" and m.name.startswith("decode")]
    assert sorted(m.name for m in decode) == ["decode latency per token (batch 1, 3 new)",
                                              "decode latency per token (batch 1, 3 new) (compiled)"]
    assert all(m.details["ideal_speedup"] > 1 for m in decode)  # each against the original's row of its own mode


def test_a_model_the_compiler_refuses_is_one_line(monkeypatch):
    def refusing(model, token, kwargs):
        raise RuntimeError("Unsupported: a tensor subclass without __tensor_flatten__\nmore detail")

    monkeypatch.setattr(compiled, "_decode_step", refusing)
    with pytest.raises(InvalidInput, match=r"^torch.compile could not compile this model's decode step \(Unsupported: "
                                           r"a tensor subclass without __tensor_flatten__\); time it eagerly.$"):
        compiled.CompiledRuns(4).run(tiny_model("llama"), torch.tensor([[1, 2, 3]]), 4)


@pytest.mark.slow  # two compiles of a tiny model (~10 s each warm)
@pytest.mark.parametrize("bits", [8, 4])
def test_quantized_weights_compile_their_kernels_as_opaque_calls_and_decode_the_eager_tokens(bits):
    import prune

    model = prune.Quantize.of(bits).apply(tiny_model("llama"))
    prompt = torch.tensor([[5, 17, 3, 99, 42, 7]])
    expected = _uncached_greedy(model, prompt, 5)  # the kernels, eagerly, over the whole sequence each step
    runs = compiled.CompiledRuns(most_new_tokens=5)
    runs.run(model, prompt, 5)
    cache, _ = runs._cache(model, prompt)
    assert torch.equal(compiled.generate(model, prompt, 5, cache)[2], expected)
