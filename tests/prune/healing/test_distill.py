"""Distillation healing: the losses against torch.distributions and whole-sequence logits, zero for a student equal
to its teacher, chunked gradients equal whole ones, and a distilled heal that leaves the original bit-identical."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical, kl_divergence

import prune
from prune.core.calibration import BUILTIN_TEXTS, Calibration
from prune.core.errors import InvalidInput, UnknownMethod
from prune.core.recipe import Recipe
from prune.healing.distill import distill_loss, divergence
from prune.healing.step import Heal
from prune.healing.train import split_windows

from conftest import tiny_model

TEXT = BUILTIN_TEXTS[0].read_text()[:12000]
FAST = dict(text=TEXT, seq_len=32, batch=4, heldout=4, eval_every=2)
IDS = torch.tensor([[5, 17, 42, 9, 120, 77, 3, 250, 11, 64, 8, 99], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])


@pytest.mark.parametrize("teacher", ["forward_kl", "reverse_kl"])
def test_each_divergence_equals_torch_distributions_kl(teacher):
    torch.manual_seed(0)
    student, taught = torch.randn(5, 7), torch.randn(5, 7)
    for temperature in (1.0, 2.0):
        q, p = Categorical(logits=student / temperature), Categorical(logits=taught / temperature)
        expected = kl_divergence(p, q) if teacher == "forward_kl" else kl_divergence(q, p)
        torch.testing.assert_close(divergence(student, taught, teacher, temperature), expected)


@pytest.mark.parametrize("teacher", ["forward_kl", "reverse_kl"])
def test_a_student_equal_to_its_teacher_has_zero_loss(teacher):
    model = tiny_model("llama", 4)
    cut = prune.cut(model, 1, 2)  # and a different one has a positive loss
    with torch.no_grad():
        assert float(distill_loss(model, model, IDS, teacher=teacher)) == 0.0
        assert float(distill_loss(cut, model, IDS, teacher=teacher)) > 1e-4


@pytest.mark.parametrize("arch", ["llama", "gemma2"])  # Gemma 2: the soft-capped head, a known transform
@pytest.mark.parametrize("teacher", ["forward_kl", "reverse_kl"])
def test_the_chunked_loss_equals_one_from_whole_sequence_logits(arch, teacher):
    model = tiny_model(arch, 4)
    student = prune.cut(model, 1, 2)
    ratio, temperature = 0.3, 2.0
    with torch.no_grad():
        s = student(input_ids=IDS).logits[:, :-1].flatten(0, 1).float()
        t = model(input_ids=IDS).logits[:, :-1].flatten(0, 1).float()
    q, p = Categorical(logits=s / temperature), Categorical(logits=t / temperature)
    kl = kl_divergence(p, q) if teacher == "forward_kl" else kl_divergence(q, p)
    ce = torch.nn.functional.cross_entropy(s, IDS[:, 1:].flatten(), reduction="none")
    expected = ((1 - ratio) * ce + ratio * temperature ** 2 * kl).mean()
    for chunk in (None, 5):
        with torch.no_grad():
            found = distill_loss(student, model, IDS, teacher=teacher, ratio=ratio, temperature=temperature,
                                 chunk=chunk)
        torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-6)


def test_chunked_gradients_equal_whole_ones():
    model = tiny_model("llama", 4)
    student = prune.healing.train.shared_copy(prune.cut(model, 1, 2))
    weight = prune.core.architectures.decoder_layers(student)[0].mlp.up_proj.weight
    weight.data = weight.data.clone()
    weight.requires_grad_(True)
    grads = []
    for chunk in (None, 4):
        weight.grad = None
        distill_loss(student, model, IDS, teacher="forward_kl", ratio=0.5, chunk=chunk).backward()
        grads.append(weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-7)
    assert grads[0].abs().sum() > 0


@pytest.mark.parametrize("method", ["lora", "last_layers"])
def test_a_distilled_heal_moves_towards_the_teacher_and_leaves_the_original_alone(method, tiny_tokenizer):
    model = tiny_model("llama", 4)
    before = {k: (v.clone(), v.data_ptr()) for k, v in model.state_dict().items()}
    recipe = Recipe.block(4, 1, 2).then(Heal.of(method, 6, text=TEXT, lr=1e-3, teacher="forward_kl",
                                                **{k: v for k, v in FAST.items() if k != "text"}))
    healed = recipe.apply(model, tiny_tokenizer)  # the recipe hands the original over as the teacher
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name][0]) and value.data_ptr() == before[name][1], name
    record = healed.config.layercut_healed
    assert record["options"]["teacher"] == "forward_kl" and record["steps_done"] == 6
    cut = Recipe.block(4, 1, 2).apply(model)
    train, _ = split_windows(tiny_tokenizer, Calibration(source="text", text=TEXT), 32, 4)
    with torch.no_grad():
        assert float(distill_loss(healed, model, train, teacher="forward_kl")) < \
            float(distill_loss(cut, model, train, teacher="forward_kl"))


def test_the_options_are_checked_and_a_task_heal_records_none_of_them(tiny_tokenizer):
    assert "teacher" not in Heal.of("lora").option and "kd_ratio" not in Heal.of("lora").option
    kd = Heal.of("lora", teacher="reverse_kl", kd_ratio=0.5)
    assert kd.option["temperature"] == 1.0 and kd.short() == "lora+rkl0.5 30"
    assert "reverse KL (token-level MiniLLM) to the original (τ 1), 0.5 of the task loss" in kd.describe()
    assert Heal.from_record(kd.record()) == kd and kd != Heal.of("lora")
    with pytest.raises(UnknownMethod):
        Heal.of("lora", teacher="jsd")
    with pytest.raises(InvalidInput, match="goes with a teacher"):
        Heal.of("lora", kd_ratio=0.5)
    with pytest.raises(InvalidInput, match="kd_ratio"):
        Heal.of("lora", teacher="forward_kl", kd_ratio=0)
    _, cut = tiny_model("llama", 4), prune.cut(tiny_model("llama", 4), 1, 2)
    with pytest.raises(InvalidInput, match="teacher"):
        prune.heal(cut, tiny_tokenizer, method="lora", steps=1, teacher="forward_kl", **FAST)
