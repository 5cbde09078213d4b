"""llama.cpp's own quantizer for GGUF out, on tiny Llamas: the tensor types it picks (a known answer from its rules in
``src/llama-quant.cpp``), the model's metadata kept, the file run by llama.cpp itself and read by transformers through
gguf-py's dequantizer (an independent route), LayerCut's numpy writer against llama.cpp's quantizer for the types both
write (the same bytes on the same F16 weights), the importance matrix (computed as llama-imatrix does, and weighting
llama.cpp's rounding), and each refusal in one line."""

import json
import os
import signal
import subprocess
import sys

import gguf
import numpy as np
import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM

from conftest import tiny_model
from llama_helpers import llama_logits
from evaluation.exports import folder, gguf_file, llama_quantize
from evaluation.exports.gguf_file import LAYERCUT, LLAMA_CPP
from evaluation.exports.gguf_out import FAMILIES, GGUF_TYPES, _tensors, write_gguf
from evaluation.exports.imatrix import imatrix
from evaluation.exports.llama_quantize import LLAMA_TYPES, MISSING, quantize, quantized
from evaluation.exports.texts import model_card
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput, LayerCutError, MissingDependency
from prune.core.recipe import Recipe

needs_llama = pytest.mark.skipif(llama_quantize.why_not() is not None, reason="llama-cpp-python is not installed")
IDS = list(range(3, 35))  # 32 tokens
LAYERS = 8  # llama.cpp's use_more_bits(i, 8): layers 0, 3, 6 and 7
MORE_BITS = {i for i in range(LAYERS) if i < LAYERS // 8 or i >= 7 * LAYERS // 8 or (i - LAYERS // 8) % 3 == 2}
BOTH = [t for t in GGUF_TYPES if t in LLAMA_TYPES]  # Q8_0, Q5_1, Q5_0, Q4_1, Q4_0
LEVELS = {"Q8_0": 127, "Q5_1": 31, "Q5_0": 16, "Q4_1": 15, "Q4_0": 8}  # a block's range over its levels: one step
OFFSET = ("Q5_1", "Q4_1")  # scale and minimum per block: the step spans the block's range, not its largest magnitude


def wide_llama(layers: int = LAYERS):
    """A Llama whose matrices' rows split into K-quants' 256-value blocks (the conftest ones are 32 wide)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=320, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=layers, max_position_embeddings=256)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.layercut_name = f"wide-llama-{layers}"
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_tokenizer):
    """The wide Llama as LayerCut's F16 file, and llama.cpp's Q4_K_M and Q6_K of it (through the export's writer)."""
    out, model = tmp_path_factory.mktemp("llama-quantize"), wide_llama()
    found = {"F16": write_gguf(model, tiny_tokenizer, out / "wide.F16.gguf", "F16"), "model": model, "out": out}
    if llama_quantize.why_not() is None:
        for kind in ("Q4_K_M", "Q6_K"):
            found[kind] = gguf_file.write(model, tiny_tokenizer, out / f"wide.{kind}.gguf", kind)
    return found


def _types(path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def _field(reader: gguf.GGUFReader, key: str):
    field = reader.fields[key]
    return field.parts[field.data[0]][0]


def _llama_logits(path) -> np.ndarray:
    """llama.cpp's own logits for IDS from ``path``: [32, vocab], in a child (skips where llama.cpp dies on it)."""
    return llama_logits(path, IDS)


def _transformers_logits(path) -> np.ndarray:
    """transformers' logits for IDS from ``path``, its tensors dequantized by gguf-py: [32, vocab]."""
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([IDS])).logits[0].numpy()


def _relative(found: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(found - expected) / np.linalg.norm(expected))


@needs_llama
def test_the_offered_types_are_llama_cpps_own_file_types_largest_first():
    llama_cpp = pytest.importorskip("llama_cpp")
    for name in LLAMA_TYPES:  # gguf-py's enum and the installed llama.cpp's agree on every one
        assert getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}") == gguf.LlamaFileType[f"MOSTLY_{name}"]
    assert LLAMA_TYPES[0] == "Q8_0" and LLAMA_TYPES[-1] == "Q2_K" and "Q4_K_M" in LLAMA_TYPES
    assert LLAMA_TYPES.index("Q5_K_M") < LLAMA_TYPES.index("Q5_K_S") < LLAMA_TYPES.index("Q5_1")
    assert not any(t.startswith(("IQ", "TQ")) or t in ("Q2_K_S", "MXFP4_MOE", "F16", "BF16") for t in LLAMA_TYPES)
    assert gguf_file.EXPORT_TYPES[:3] == ("F16", "BF16", "Q8_0") and set(gguf_file.EXPORT_TYPES) == {
        *GGUF_TYPES, *LLAMA_TYPES}
    assert {t: gguf_file.default_quantizer(t) for t in ("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K")} == {
        "F16": LAYERCUT, "Q8_0": LAYERCUT, "Q4_0": LAYERCUT, "Q4_K_M": LLAMA_CPP, "Q6_K": LLAMA_CPP}


@needs_llama
def test_q4_k_m_holds_the_types_llama_cpp_picks_and_the_models_metadata(files):
    types = _types(files["Q4_K_M"].path)
    expected = {"output.weight": "Q6_K", "token_embd.weight": "Q4_K", "output_norm.weight": "F32"}
    for i in range(LAYERS):  # llama_tensor_get_type_impl: attn_v and ffn_down get Q6_K where use_more_bits
        for name in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            expected[f"blk.{i}.{name}.weight"] = "Q4_K"
        for name in ("attn_v", "ffn_down"):
            expected[f"blk.{i}.{name}.weight"] = "Q6_K" if i in MORE_BITS else "Q4_K"
        expected[f"blk.{i}.attn_norm.weight"] = expected[f"blk.{i}.ffn_norm.weight"] = "F32"
    assert types == expected
    assert set(_types(files["Q6_K"].path).values()) == {"Q6_K", "F32"}
    reader, source = gguf.GGUFReader(files["Q4_K_M"].path), gguf.GGUFReader(files["F16"])
    assert _field(reader, "general.file_type") == gguf.LlamaFileType.MOSTLY_Q4_K_M
    for key in ("llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                "llama.attention.head_count", "llama.attention.head_count_kv", "llama.context_length"):
        assert _field(reader, key) == _field(source, key)
    assert (_field(reader, "llama.block_count"), _field(reader, "llama.embedding_length")) == (LAYERS, 256)
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 320
    assert files["Q4_K_M"].report.fallbacks == {} and files["Q4_K_M"].report.types == {"Q4_K": 49, "Q6_K": 9,
                                                                                      "F32": 17}
    assert sorted(p.name for p in files["out"].iterdir()) == ["wide.F16.gguf", "wide.Q4_K_M.gguf", "wide.Q6_K.gguf"]


@needs_llama
def test_each_tensor_dequantizes_near_its_f16_weights_within_its_types_rounding(files):
    source = {t.name: t for t in gguf.GGUFReader(files["F16"]).tensors}
    for kind, bound in (("Q4_K_M", {"Q4_K": 0.1, "Q6_K": 0.03}), ("Q6_K", {"Q6_K": 0.03})):
        for tensor in gguf.GGUFReader(files[kind].path).tensors:
            if tensor.tensor_type == gguf.GGMLQuantizationType.F32:
                continue
            weights = gguf.quants.dequantize(source[tensor.name].data, source[tensor.name].tensor_type)
            found = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            assert 0 < _relative(found, weights) < bound[tensor.tensor_type.name], (kind, tensor.name)


@needs_llama
def test_llama_cpp_runs_its_file_as_transformers_reads_it_and_near_the_f16_file(files):
    f16 = _llama_logits(files["F16"])
    assert _relative(f16, _transformers_logits(files["F16"])) < 2e-3  # llama.cpp's F16 run is the model
    errors = {}
    for kind in ("Q6_K", "Q4_K_M"):
        found = _llama_logits(files[kind].path)
        assert np.isfinite(found).all()
        # llama.cpp (its own kernels, activations rounded to 8 bits) and gguf-py + torch agree on what the file holds
        assert _relative(found, _transformers_logits(files[kind].path)) < 0.04, kind
        errors[kind] = _relative(found, f16)
    assert 0 < errors["Q6_K"] < 0.1 and errors["Q6_K"] < errors["Q4_K_M"] < 0.3, errors


@needs_llama
@pytest.mark.parametrize("kind", BOTH)
def test_numpy_and_llama_cpp_write_the_same_bytes_from_the_same_f16_weights(files, tiny_tokenizer, kind):
    """The numpy writer against llama.cpp's quantizer for a type both write: llama.cpp's blocks are exactly
    gguf.quants' of the F16 weights; LayerCut's file (rounded once, from float32) differs by at most a step of the
    format where the F16 rounding moved a value across a rounding boundary, and rounds as well."""
    out, qtype = files["out"] / kind, gguf.GGMLQuantizationType[kind]
    ours = gguf_file.write(files["model"], tiny_tokenizer, out / f"ours.{kind}.gguf", kind)
    theirs = gguf_file.write(files["model"], tiny_tokenizer, out / f"theirs.{kind}.gguf", kind, quantizer=LLAMA_CPP)
    assert (ours.quantizer, theirs.quantizer, ours.report) == (LAYERCUT, LLAMA_CPP, None)
    source = {t.name: t for t in gguf.GGUFReader(files["F16"]).tensors}
    mine = {t.name: t for t in gguf.GGUFReader(ours.path).tensors}
    compared, errors = 0, np.zeros(2)
    plain = {name: data.numpy() for name, data in _tensors(files["model"], FAMILIES["llama"])}  # what LayerCut writes
    for tensor in gguf.GGUFReader(theirs.path).tensors:
        if tensor.tensor_type != qtype:
            assert tensor.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q6_K)
            continue
        f16 = gguf.quants.dequantize(source[tensor.name].data, source[tensor.name].tensor_type)
        assert np.array_equal(gguf.quants.quantize(f16, qtype).view(np.uint8), tensor.data.view(np.uint8))
        assert mine[tensor.name].tensor_type == qtype
        weights = plain[tensor.name]
        found, expected = (gguf.quants.dequantize(t.data, qtype) for t in (mine[tensor.name], tensor))
        apart = np.abs(found - expected).reshape(-1, 32).max(1)
        assert (apart <= 1.25 * _step(weights, kind)).all(), tensor.name
        errors += [np.square(found - weights).sum(), np.square(expected - weights).sum()]
        compared += 1
    assert compared == (7 * LAYERS + 2 if kind == "Q8_0" else 7 * LAYERS + 1)  # below Q8_0 the output layer differs
    assert abs(errors[0] / errors[1] - 1) < 0.01  # both as close to the float32 weights


def _step(weights: np.ndarray, kind: str) -> np.ndarray:
    """One quantization step of each 32-value block of ``weights`` in ``kind``."""
    blocks = weights.reshape(-1, 32)
    span = blocks.max(1) - blocks.min(1) if kind in OFFSET else np.abs(blocks).max(1)
    return span / LEVELS[kind]


@needs_llama
def test_an_export_in_a_llama_cpp_type_says_so_in_its_card_and_keeps_no_temporary_file(tiny_tokenizer, tmp_path):
    model = tiny_model("llama", 4)
    recipe = Recipe.block(4, 1, 2)
    cut = recipe.apply(model)
    steps = []
    path = folder.export(cut, tiny_tokenizer, recipe, base_name="tiny", num_layers=4, target=tmp_path / "cut",
                         gguf="Q4_K_M", progress=lambda fraction, message: steps.append((fraction, message)))
    assert sorted(p.name for p in path.iterdir() if "gguf" in p.name) == ["cut.Q4_K_M.gguf"]
    assert not [p for p in tmp_path.rglob(".*")]  # the F16 source and llama.cpp's scratch folder are gone
    card = (path / folder.CARD).read_text()
    assert ("LayerCut wrote it in F16, then llama.cpp's own quantizer (`llama_model_quantize`, llama-cpp-python "
            f"{llama_quantize.version()}) made it Q4_K_M") in card and "without an importance matrix" in card
    # the tiny Llama is 32 wide: every K-quant falls back (q4_K → q5_0; q6_K → q8_0 for attn_v, ffn_down of layers 2)
    assert "llama.cpp fell back from Q4_K to Q5_0 for 20 tensors and from Q6_K to Q8_0 for 2 tensors" in card
    assert set(_types(path / "cut.Q4_K_M.gguf").values()) == {"Q5_0", "Q8_0", "F32"}
    assert steps[0][1].startswith("Writing the model in F16") and steps[-1][0] == 1.0
    assert steps[-1][1] == "llama.cpp quantizing to Q4_K_M: 30 of 30 tensors done (blk.2.ffn_up.weight)"


def test_an_int8_input_embedding_stays_q8_0_in_llama_cpps_types(tiny_tokenizer, tmp_path):
    from prune.quantize.step import Quantize

    untied = tiny_model("llama", 2)  # tied, token_embd is the output layer: Q8_0 already (q6_K falls back)
    for model, embedding in ((untied, "Q5_0"), (Quantize.of(4, embedding=True).apply(untied), "Q8_0")):
        written = gguf_file.write(model, tiny_tokenizer, tmp_path / "emb.Q4_K_M.gguf", "Q4_K_M")
        assert _types(written.path)["token_embd.weight"] == embedding  # a float one: q4_K, 32 wide: q5_0


def test_a_numpy_type_keeps_its_card_as_before(tiny_tokenizer, tmp_path):
    model = tiny_model("llama", 4)
    recipe = Recipe.block(4, 1, 2)
    cut = recipe.apply(model)
    path = folder.export(cut, tiny_tokenizer, recipe, base_name="tiny", num_layers=4, target=tmp_path / "cut",
                         gguf="Q8_0")
    assert (path / folder.CARD).read_text() == model_card(cut, recipe, base_name="tiny", num_layers=4, name="cut",
                                                          gguf="cut.Q8_0.gguf")


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert isinstance(err.value, LayerCutError) and "\n" not in text and err.value.__cause__ is None
    return text


def test_an_unknown_type_or_quantizer_is_one_line(tiny_tokenizer, tmp_path):
    cut = Recipe.block(4, 1, 2).apply(tiny_model("llama", 4))
    with pytest.raises(InvalidInput) as err:
        folder.check_gguf(cut, tiny_tokenizer, "Q3_K", "x")
    assert _one_line(err).startswith("GGUF type 'Q3_K' is not one LayerCut writes: F16, BF16, Q8_0, ")
    with pytest.raises(InvalidInput) as err:
        gguf_file.quantizer_for("Q4_K_M", LAYERCUT)
    assert _one_line(err) == "Q4_K_M is written by llama.cpp, not by 'LayerCut'."
    with pytest.raises(InvalidInput) as err:
        quantize(tmp_path / "a.gguf", tmp_path / "b.gguf", "IQ2_XXS")
    assert _one_line(err).startswith("GGUF type 'IQ2_XXS' is not one llama.cpp's quantizer writes here: Q8_0, Q6_K")


def test_without_llama_cpp_its_types_are_refused_in_one_line_before_anything_is_written(monkeypatch, tiny_tokenizer,
                                                                                        tmp_path):
    monkeypatch.setattr(llama_quantize, "why_not", lambda: MISSING)
    recipe = Recipe.block(4, 1, 2)
    cut = recipe.apply(tiny_model("llama", 4))
    with pytest.raises(MissingDependency) as err:
        folder.export(cut, tiny_tokenizer, recipe, base_name="tiny", num_layers=4, target=tmp_path / "cut",
                      gguf="Q4_K_M")
    assert _one_line(err) == ("GGUF type Q4_K_M: llama.cpp's quantizer is not installed here: `bash setup.sh` "
                              "installs llama-cpp-python.")
    assert not list(tmp_path.iterdir())
    with pytest.raises(MissingDependency) as err:
        quantize(tmp_path / "a.gguf", tmp_path / "b.gguf", "Q4_K_M")
    assert _one_line(err) == MISSING
    assert gguf_file.quantizer_for("Q4_0") == LAYERCUT  # LayerCut's own types need no llama.cpp


@needs_llama
def test_what_llama_cpp_refuses_is_one_line_and_leaves_no_file(files, tiny_tokenizer, tmp_path):
    small = write_gguf(tiny_model("llama", 2), tiny_tokenizer, tmp_path / "small.F16.gguf", "F16")
    with pytest.raises(InvalidInput) as err:  # llama.cpp would abort its process: asked before it starts
        quantize(small, tmp_path / "out.gguf", "Q4_K_M", output_type="Q4_K")
    assert _one_line(err) == ("llama.cpp cannot write output.weight as Q4_K: its rows hold 32 values, not a multiple "
                              "of Q4_K's 256-value blocks.")
    with pytest.raises(InvalidInput) as err:
        quantize(small, tmp_path / "out.gguf", "Q4_K_M", embedding_type="Q7_K")
    assert _one_line(err).startswith("Tensor type 'Q7_K' is not one of F32, F16, BF16, Q8_0, Q6_K, Q5_K")
    with pytest.raises(InvalidInput) as err:  # LayerCut's Q4_K_M file quantized again
        quantize(files["Q4_K_M"].path, tmp_path / "out.gguf", "Q4_0")
    assert _one_line(err) == "llama.cpp could not quantize to Q4_0: requantizing from type q4_K is disabled"
    with pytest.raises(InvalidInput) as err:
        quantize(tmp_path, tmp_path / "out.gguf", "Q4_0")
    assert _one_line(err).startswith(f"{tmp_path.name} is not a GGUF file llama.cpp's quantizer can read")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.F16.gguf"]


@needs_llama
def test_the_child_process_takes_llama_cpps_abort_and_a_stop_ends_it(tiny_tokenizer, tmp_path):
    small = write_gguf(tiny_model("llama", 2), tiny_tokenizer, tmp_path / "small.F16.gguf", "F16")
    spec = {"source": str(small), "target": str(tmp_path / "out.gguf"), "file_type": "Q4_K_M", "threads": 1,
            "output_type": "Q4_K", "embedding_type": None, "imatrix": None}  # unchecked: what the check prevents
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    ended = subprocess.run([sys.executable, str(llama_quantize.CHILD)], input=json.dumps(spec),
                           capture_output=True, text=True, env=env)
    assert ended.returncode == -signal.SIGABRT and "GGML_ASSERT" in ended.stderr

    class Stop(Exception):
        pass

    def stop(fraction, message):
        raise Stop(message)

    with pytest.raises(Stop):
        quantized(small, tmp_path / "stopped.gguf", "Q4_K_M", progress=stop)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf", "small.F16.gguf"]  # out.gguf: the abort's


def test_a_bfloat16_model_goes_to_llama_cpp_in_bf16(tiny_tokenizer, tmp_path, monkeypatch):
    seen = {}

    def fake(source, target, file_type, imatrix=None, progress=None, **types):
        seen["source"] = gguf.GGUFReader(source).tensors[0].tensor_type.name
        target.write_bytes(b"")
        return llama_quantize.Quantized(target, file_type, {}, {})

    monkeypatch.setattr(llama_quantize, "why_not", lambda: None)
    monkeypatch.setattr(llama_quantize, "quantized", fake)
    model = tiny_model("llama", 2).to(torch.bfloat16)
    written = gguf_file.write(model, tiny_tokenizer, tmp_path / "m.Q4_K_M.gguf", "Q4_K_M")
    assert (written.source_type, seen["source"]) == ("BF16", "BF16")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.Q4_K_M.gguf"]


def test_the_importance_matrix_is_each_matrixs_mean_squared_input_column():
    model, windows = tiny_model("llama", 3), torch.randint(0, 320, (3, 16))
    found = imatrix(model, windows)
    widths = {"attn_q": 32, "attn_k": 32, "attn_v": 32, "attn_output": 32, "ffn_gate": 32, "ffn_up": 32,
              "ffn_down": 64}
    assert {name: len(v) for name, v in found.items()} == {f"blk.{i}.{m}.weight": width for i in range(3)
                                                           for m, width in widths.items()}
    with torch.no_grad():
        states = model(input_ids=windows, output_hidden_states=True).hidden_states  # each layer's input
        for i, layer in enumerate(model.model.layers):  # attention reads the input norm of the layer's input
            expected = layer.input_layernorm(states[i]).square().mean(dim=(0, 1)).numpy()
            for name in ("attn_q", "attn_k", "attn_v"):
                np.testing.assert_allclose(found[f"blk.{i}.{name}.weight"], expected, rtol=1e-5)


@needs_llama
def test_llama_cpp_weights_its_rounding_by_the_importance_matrix(files):
    """An importance matrix reaches llama.cpp through the Python binding: the error it weights drops for every matrix
    of a Q4_K_M and a Q4_0 file, Q8_0 ignores it (quantize_q8_0), and Q4_0 moves the first eighth of the layers'
    ffn_down to Q4_1 as llama.cpp does only with one (llama_tensor_get_type_impl)."""
    source = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in gguf.GGUFReader(files["F16"]).tensors}
    rng = np.random.default_rng(0)
    columns = {name: np.exp(rng.normal(0, 2, w.shape[1])).astype(np.float32)  # [in_features], very uneven
               for name, w in source.items() if name.startswith("blk.") and w.ndim == 2}
    out = files["out"] / "imatrix"
    for kind, most in (("Q4_K_M", 0.8), ("Q4_0", 0.8), ("Q8_0", 1.0)):
        plain = {t.name: t for t in gguf.GGUFReader(quantize(files["F16"], out / f"plain.{kind}.gguf", kind)).tensors}
        weighted = {t.name: t for t in gguf.GGUFReader(
            quantized(files["F16"], out / f"weighted.{kind}.gguf", kind, imatrix=columns).path).tensors}
        for name, tensor in weighted.items():
            if name not in columns:
                assert np.array_equal(tensor.data, plain[name].data)  # token_embd, output and norms: no importances
                continue
            errors = [(columns[name] * np.square(gguf.quants.dequantize(t.data, t.tensor_type) - source[name])).sum()
                      for t in (tensor, plain[name])]
            assert errors[0] <= most * errors[1], (kind, name)
        assert weighted["blk.0.ffn_down.weight"].tensor_type.name == {"Q4_0": "Q4_1"}.get(kind, plain[
            "blk.0.ffn_down.weight"].tensor_type.name)


@needs_llama
def test_an_export_with_calibration_quantizes_with_its_importance_matrix_and_says_so(tiny_tokenizer, tmp_path):
    recipe = Recipe.block(4, 1, 2)
    cut = recipe.apply(tiny_model("llama", 4))
    calibration = Calibration(n_samples=4, seq_len=32)
    steps = []
    path = folder.export(cut, tiny_tokenizer, recipe, base_name="tiny", num_layers=4, target=tmp_path / "cut",
                         gguf="Q4_K_M", gguf_calibration=calibration, progress=lambda f, m: steps.append((f, m)))
    card = (path / folder.CARD).read_text()
    assert "with its default output and embedding types, with an importance matrix from 128 tokens of the " \
           "calibration text (builtin). Tensor types: " in card
    fractions = [f for f, _ in steps]
    assert fractions == sorted(fractions) and steps[0] == (0.4, "Importance matrix for llama.cpp: 4 of 4 calibration "
                                                            "windows")
    plain = gguf_file.write(cut, tiny_tokenizer, tmp_path / "plain.Q4_K_M.gguf", "Q4_K_M")
    differ = [a.name for a, b in zip(gguf.GGUFReader(path / "cut.Q4_K_M.gguf").tensors,
                                     gguf.GGUFReader(plain.path).tensors) if not np.array_equal(a.data, b.data)]
    assert differ and all(name.startswith("blk.") for name in differ)
