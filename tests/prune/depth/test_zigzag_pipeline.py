"""Zigzag persistence on tiny real models: the authors' representations, the method, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from conftest import TINY_CONFIGS, tiny_model
from evaluation import cli as benchmark
from evaluation.serving.models import Models
from evaluation.exports.zigzag_csv import result_from_csv, write_bars_csv
from prune.core.architectures import decoder_layers, final_norm, get_path
from prune.core.calibration import BUILTIN_TEXTS, Calibration, load_text
from prune.core.errors import InvalidInput, UnsupportedArchitecture
from prune.core.hidden import norm_last_tokens, residual_streams
from prune.depth.methods import get_method
from prune.depth.methods import zigzag as zigzag_module
from prune.depth.methods.context import Context
from test_topology import SHARED, _scrambled_states

# Where each family's feed-forward block starts: its input is the norm output the authors read.
FFN_ENTRY = {"llama": "mlp", "mistral": "mlp", "qwen2": "mlp", "gemma2": "mlp", "phi3": "mlp",
             "gpt_neox": "mlp", "gpt2": "mlp", "opt": "fc1"}
TEXTS = [[5, 9, 13], [7, 8, 9, 10, 11, 12, 2, 40, 41, 42, 43], [3], [100, 101, 102, 103, 104, 105]]


def test_every_tiny_family_has_a_known_feed_forward_entry():
    assert set(FFN_ENTRY) == set(TINY_CONFIGS)


@pytest.mark.parametrize("arch", sorted(FFN_ENTRY))
def test_norm_states_are_what_the_feed_forward_block_reads(arch):
    model = tiny_model(arch, layers=3)
    states = norm_last_tokens(model, TEXTS, tokens_per_batch=24)  # padded batches of unequal texts
    assert states.shape == (4, len(TEXTS), 32)
    for n, ids in enumerate(TEXTS):
        seen = []
        hooks = [get_path(layer, FFN_ENTRY[arch]).register_forward_pre_hook(
            lambda _m, args: seen.append(args[0].reshape(-1, args[0].shape[-1])[-1]))
            for layer in decoder_layers(model)]
        try:
            # [1, D], one text unpadded
            h_last = residual_streams(model, torch.tensor([ids]), last_token_only=True)[0][-1]
        finally:
            for hook in hooks:
                hook.remove()
        expected = torch.stack(seen + [final_norm(model)(h_last)[0]])
        torch.testing.assert_close(states[:, n], expected, atol=2e-5, rtol=1e-4)


def test_a_model_without_a_pre_feed_forward_norm_is_refused():
    config = transformers.Olmo2Config(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with pytest.raises(UnsupportedArchitecture, match="feed-forward"):
        norm_last_tokens(model, TEXTS)


def test_whole_texts_are_lines_without_wikitext_headings():
    text = " = Valkyria = \n\n The game began . \n = = Plot = = \nSecond paragraph\n\n"
    assert zigzag_module.whole_texts(text) == ["The game began .", "Second paragraph"]


def test_the_description_says_where_it_differs():
    description = get_method("zigzag").description
    assert "post-attention norm" in description and "0.9/0.8·max r" in description
    assert "calibration text instead of" in description


@pytest.mark.parametrize("pair", [3, 7])
def test_the_method_scores_layer_i_by_r_i_and_never_cuts_the_final_norm(monkeypatch, tiny_tokenizer, pair):
    asked = []

    def fake_states(_model, ids):  # representations 0..8 of an 8-layer model; pair, pair + 1 identical
        asked.append(len(ids))
        return torch.from_numpy(_scrambled_states(pair, representations=9, seed=pair))

    monkeypatch.setattr(zigzag_module, "norm_last_tokens", fake_states)
    ctx = Context(tiny_model("llama", 8), tiny_tokenizer, Calibration())  # the built-in texts
    paragraphs = len(zigzag_module.whole_texts(load_text(Calibration())))  # one text per non-empty line
    result = zigzag_module.zigzag(ctx, texts=30, max_tokens=2048, k=5)
    assert asked == [30] and result.params["texts"] == 30 and not result.warnings
    cut = [m for m in (pair, pair + 1) if m < 8]
    assert result.cuts == {"10%": cut, "20%": cut}
    assert result.block_scores.shape == (8, 8) and result.layer_scores.shape == (8,)
    assert np.all(result.layer_scores[cut] == 0) and np.all(np.delete(result.layer_scores, cut) > 0.2)
    assert result.best_layers(len(cut)) == cut
    fewer = zigzag_module.zigzag(ctx, texts=paragraphs + 100, max_tokens=2048, k=5)
    assert asked[-1] == paragraphs and f"gives {paragraphs} texts" in fewer.warnings[0]


def test_a_k_of_at_least_the_texts_is_refused_before_the_hidden_states(monkeypatch, tiny_tokenizer):
    asked = []
    monkeypatch.setattr(zigzag_module, "norm_last_tokens", lambda _model, ids: asked.append(ids))
    ctx = Context(tiny_model("llama", 2), tiny_tokenizer, Calibration(source="text", text="one\ntwo\n\nthree"))
    with pytest.raises(InvalidInput, match="Zigzag's k = 3 needs more than k texts; the calibration gives 3"):
        zigzag_module.zigzag(ctx, texts=256, k=3)
    assert asked == []


def test_our_diagrams_written_as_the_authors_csv_give_the_same_result(monkeypatch, tiny_tokenizer, tmp_path):
    monkeypatch.setattr(zigzag_module, "norm_last_tokens",
                        lambda _model, _ids: torch.from_numpy(_scrambled_states(2, representations=9, seed=5)))
    ctx = Context(tiny_model("llama", 8), tiny_tokenizer, Calibration())
    diagrams, params, _ = zigzag_module.text_diagrams(ctx, texts=30)
    assert params["representations"] == 9 and set(diagrams) == {0, 1}
    write_bars_csv(diagrams, 9, tmp_path / "ours.csv")
    from_file = result_from_csv(tmp_path / "ours.csv", 8)
    direct = zigzag_module.zigzag(ctx, texts=30, max_tokens=2048, k=5)
    assert from_file.cuts == direct.cuts == {"10%": [2, 3], "20%": [2, 3]}
    np.testing.assert_allclose(from_file.layer_scores, direct.layer_scores)


def test_identity_layers_give_flat_persistence_and_no_usable_cut(tiny_tokenizer):
    model = tiny_model("llama", 4)
    for layer in decoder_layers(model):  # zero every projection, keep the norms: each layer is exactly x -> x
        for module in layer.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.data.zero_()
    words = sorted(set(BUILTIN_TEXTS[0].read_text().split()))
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(words, size=4)) for _ in range(80)]
    ctx = Context(model, tiny_tokenizer, Calibration(source="text", text="\n".join(lines)))
    result = zigzag_module.zigzag(ctx, texts=80, max_tokens=64, k=5)
    # every representation is RMSNorm(embedding of the last token): all 1-cycles persist everywhere
    np.testing.assert_allclose(result.params["persistence"], np.ones(5))
    assert min(result.params["betti_1"]) > 0
    assert result.cuts == {}  # both cuts would remove all 4 layers
    assert sum("would remove every layer" in w for w in result.warnings) == 2


# --- the command line ----------------------------------------------------------------------------


def _cli(capsys, *args):
    code = benchmark.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_model_loading(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("the dry run loaded a model")

    monkeypatch.setattr(Models, "load", refuse)


def test_dry_run_prints_the_authors_cuts_without_loading_the_model(capsys, no_model_loading):
    if not SHARED.is_dir():
        pytest.fail(f"missing {SHARED}")
    code, out, err = _cli(capsys, "--persistence", "--zigzag_output", SHARED / "sst_llama_2_7b_knn_5.csv",
                          "--dry_run", "--num_hidden_layers", 32)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"10%": list(range(20, 30)), "20%": list(range(18, 32))}
    assert "removes 10 of 32 layers (31 %)" in err and "removes 14 of 32 layers (44 %)" in err


def test_dry_run_takes_the_depth_from_the_model_config(capsys, tiny_folder, tmp_path, no_model_loading):
    rows = [(0, 1, 10)] + [(1, 3, 8)] * 3 + [(1, 3, 6), (1, 1, 2), (1, 9, 10)]  # test_topology's small file
    (tmp_path / "small.csv").write_text("dimension,birth,death\n" + "".join(f"{d},{b},{e}\n" for d, b, e in rows))
    code, out, err = _cli(capsys, "--persistence", "--zigzag_output", tmp_path / "small.csv", "--dry_run",
                          "--model", tiny_folder)
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"10%": [1, 2], "20%": [1, 2, 3]}
    assert "more than half" in err


@pytest.mark.parametrize("args, reason", [
    (["--persistence", "--dry_run"], "need --zigzag_output"),
    (["--full", "--zigzag_output", "x.csv"], "go with --persistence"),
    (["--persistence", "--zigzag_output", "/nonexistent.csv", "--dry_run", "--num_hidden_layers", 4], "does not exist"),
    (["--persistence", "--zigzag_output", SHARED / "sst_llama_2_7b_knn_5.csv", "--dry_run", "--num_hidden_layers", 30],
     "describes 32 layers"),
])
def test_bad_zigzag_flags_exit_with_a_one_line_reason(capsys, no_model_loading, args, reason):
    code, _, err = _cli(capsys, *args)
    assert code == 2
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and reason in errors[0], err


def test_persistence_mode_evaluates_the_cuts_of_a_zigzag_file(capsys, tiny_folder, tmp_path):
    rows = [(0, 1, 10)] + [(1, 3, 8)] * 3 + [(1, 3, 6), (1, 1, 2), (1, 9, 10)]  # test_topology's small file
    (tmp_path / "small.csv").write_text("dimension,birth,death\n" + "".join(f"{d},{b},{e}\n" for d, b, e in rows))
    code, _, err = _cli(capsys, "--persistence", "--zigzag_output", tmp_path / "small.csv", "--model", tiny_folder,
                        "--task", "arc_easy", "--limit", 2, "--output_folder", tmp_path / "out")
    assert code == 0, err
    removed = {mode: json.loads((tmp_path / "out" / f"results_{mode}.json").read_text())["config"]["removed_layers"]
               for mode in ("persistence_10", "persistence_20")}
    assert removed == {"persistence_10": [1, 2], "persistence_20": [1, 2, 3]}
    assert "removes 3 of 4 layers (75 %)" in err
