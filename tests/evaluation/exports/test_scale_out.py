"""The scale-out commands and warnings: tensor-parallel sizes worked out by hand from head and width counts."""

import json

import pytest

from conftest import tiny_model
from evaluation.exports import folder as exports, scale_out
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify

CUT = Recipe.block(6, 2, 4)


@pytest.mark.parametrize("config, sizes", [
    ({"num_attention_heads": 9, "num_key_value_heads": 3, "intermediate_size": 1536}, (1,)),  # SmolLM2-135M: 9 heads
    ({"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336}, (1, 2, 4, 8)),  # Llama 3 8B
    ({"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 11002}, (1, 2)),  # 11002 = 2 · 5501
    ({"num_attention_heads": 24, "num_key_value_heads": 3, "intermediate_size": 8192}, (1,)),  # 3 KV heads: 2 ∤ 3
    ({"num_attention_heads": 16, "num_key_value_heads": 2, "intermediate_size": 4096}, (1, 2, 4, 8)),  # 2 | 4, 2 | 8
    ({"n_head": 12, "n_inner": None}, (1, 2, 4)),  # GPT-2: 12 heads, the MLP width not in the config
])
def test_the_tensor_parallel_sizes_vllm_accepts(config, sizes):
    assert scale_out.tensor_parallel_sizes(config) == sizes


def test_commands_use_the_largest_size_that_works_and_say_which_do_not():
    config = {"num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 11002}
    found = scale_out.scale_out("./cut", config, CUT)
    hf, vllm = found.commands
    assert hf.startswith("accelerate launch -m lm_eval run --model hf --model_args pretrained=./cut,dtype=bfloat16 ")
    assert vllm.startswith("lm_eval run --model vllm --model_args pretrained=./cut,tensor_parallel_size=2,")
    assert found.notes == ("vLLM takes tensor_parallel_size 1 or 2 for this model, not 4 or 8: 32 attention heads, "
                           "8 KV heads and an MLP width of 11002 must divide evenly over the GPUs.",)
    assert "```bash" in found.markdown() and found.notes[0] in found.markdown()


def test_drops_two_four_and_factored_weights_are_said():
    config = {"num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 64}
    assert scale_out.scale_out("./x", config, CUT).notes == ()
    drop = Recipe.drop(6, (1,), ())
    two_four = Recipe((Sparsify.of("magnitude", 0.5, "2:4"),))
    assert "saved as zeros" in scale_out.scale_out("./x", config, drop).notes[0]
    assert "vLLM runs it as a dense model" in scale_out.scale_out("./x", config, two_four).notes[0]
    assert "only LayerCut loads" in scale_out.scale_out("./x", config, CUT, factored=True).notes[0]


def test_an_export_holds_its_commands_naming_the_folder_as_unzipped(tiny_tokenizer, tmp_path):
    base = tiny_model("llama", 6)
    path = exports.export(CUT.apply(base), tiny_tokenizer, CUT, base_name="org/tiny", num_layers=6,
                          target=tmp_path / "deep" / "my-cut")
    text = (path / scale_out.FILE).read_text()
    config = json.loads((path / "config.json").read_text())
    assert text == scale_out.scale_out("./my-cut", config, CUT).markdown()
    assert str(tmp_path) not in text and "pretrained=./my-cut," in text
