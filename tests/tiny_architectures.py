"""Tiny random models of the architectures people pick in 2026, built from each type's own config, shrunk (hidden
64, 4 layers, 4 experts of which 2 per token), with the tiny tokenizer's vocabulary. ``ARCHITECTURES`` names each
type with its kind; ``tiny(model_type)`` builds one (float32, eval mode)."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

DENSE, MOE, HYBRID, VISION = "dense", "mixture of experts", "hybrid", "vision-language"
COMMON = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)
EXPERTS = dict(moe_intermediate_size=32, num_experts=4, num_local_experts=4, num_experts_per_tok=2, n_routed_experts=4,
               n_shared_experts=1, shared_expert_intermediate_size=32, n_group=1, topk_group=1)
MLA = dict(q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8)
MAMBA = dict(mamba_d_state=8, mamba_n_heads=4, mamba_d_head=32, mamba_n_groups=1)

# model type → (kind, its own config fields)
ARCHITECTURES = {
    # the 18 of the issue
    "qwen3": (DENSE, {}), "gemma3_text": (DENSE, {}), "exaone4": (DENSE, {}), "seed_oss": (DENSE, {}),
    "ernie4_5": (DENSE, {}), "cohere2": (DENSE, {}), "apertus": (DENSE, {}),
    "qwen2_moe": (MOE, {}), "qwen3_moe": (MOE, {}), "olmoe": (MOE, {}), "gpt_oss": (MOE, {}),
    "deepseek_v3": (MOE, {**MLA, "first_k_dense_replace": 1}), "glm4_moe": (MOE, {"first_k_dense_replace": 1}),
    "llama4_text": (MOE, {"intermediate_size_mlp": 128, "interleave_moe_layer_step": 2}), "granitemoe": (MOE, {}),
    "qwen3_next": (HYBRID, {"linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
                            "linear_value_head_dim": 16, "full_attention_interval": 2}),
    "lfm2": (HYBRID, {"layer_types": ["conv", "full_attention", "conv", "full_attention"], "block_ff_dim": 128}),
    "falcon_h1": (HYBRID, {**MAMBA, "mamba_d_ssm": 128}),
    # and more that transformers ships
    "mixtral": (MOE, {}), "phimoe": (MOE, {}), "dots1": (MOE, {}), "ernie4_5_moe": (MOE, {}),
    "hunyuan_v1_moe": (MOE, {}), "minimax": (MOE, {}), "jetmoe": (MOE, {}), "exaone_moe": (MOE, {}),
    "deepseek_v2": (MOE, {**MLA, "first_k_dense_replace": 1}), "qwen3_5_moe_text": (HYBRID, {}),
    "granitemoehybrid": (HYBRID, {**MAMBA, "layer_types": ["mamba", "attention", "mamba", "attention"]}),
    "qwen3_5_text": (HYBRID, {}),
    "lfm2_moe": (HYBRID, {"layer_types": ["conv", "full_attention", "conv", "full_attention"], "num_dense_layers": 1}),
    "olmo3": (DENSE, {}), "ministral": (DENSE, {}), "stablelm": (DENSE, {}), "helium": (DENSE, {}),
    "starcoder2": (DENSE, {}), "nemotron": (DENSE, {}), "glm4": (DENSE, {}), "arcee": (DENSE, {}),
    "internlm3": (DENSE, {}), "hunyuan_v1_dense": (DENSE, {}),
    "gemma3": (VISION, {}),
}


def tiny_config(model_type: str):
    kind, own = ARCHITECTURES[model_type]
    if kind == VISION:
        return AutoConfig.for_model(model_type, text_config={**COMMON, "model_type": "gemma3_text"},
                                    vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                       num_attention_heads=2, image_size=32, patch_size=8),
                                    mm_tokens_per_image=4)
    return AutoConfig.for_model(model_type, **{**COMMON, **(EXPERTS if kind in (MOE, HYBRID) else {}), **own})


def tiny(model_type: str, seed: int = 0, vocab_size: int | None = None):
    """A randomly initialised model of ``model_type`` (float32, eval mode); ``vocab_size``: another tokenizer's (the
    default model's, which llama.cpp's converter knows)."""
    config = tiny_config(model_type)
    if vocab_size is not None:
        config.get_text_config().vocab_size = vocab_size
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.layercut_name = f"tiny-{model_type}"
    return model
