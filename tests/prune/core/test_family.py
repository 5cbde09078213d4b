"""The family registry: each family declared once, and the picker, the CLI and the loader read it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

import prune
from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput
from prune.core.family import FAMILIES, choices, step_families
from prune.core.recipe import Recipe
from prune.core.step import STEPS, Step
from prune.quantize.step import Quantize
from evaluation.cli import build_parser
from evaluation.cli.checks import check_mode
from evaluation.cli.steps import adds_step, extra_steps

from conftest import REPO


def test_every_family_declares_its_step_paper_and_link_once():
    assert list(FAMILIES) == ["depth", "patch", "drop", "sparsity", "width", "experts", "lowrank", "healing",
                              "quantize"]
    assert {f.step.kind for f in FAMILIES.values()} == set(STEPS) == {"cut", "patch", "drop", "sparsify", "width",
                                                                       "experts", "lowrank", "heal", "quantize"}
    for family in FAMILIES.values():
        assert issubclass(family.step, Step) and family.paper and family.link.startswith("https://")


def test_each_picker_choice_builds_its_familys_step_at_its_default_level():
    found = choices()
    assert list(found) == ["magnitude", "wanda", "sparsegpt", "width", "width-llm-pruner", "experts-reap",
                           "experts-frequency", "experts-ean", "experts-gate", "experts-random", "experts-merge",
                           "lowrank-feature", "lowrank-weight", "int8", "int4", "int8+head", "int4+head", "int8+emb",
                           "int4+emb", "int8-gptq", "int4-gptq"]
    for name, (family, choice) in found.items():
        made = family.build(name, choice.level.default if choice.level else None, "unstructured", Calibration())
        assert type(made) is family.step
        assert Recipe.from_json(Recipe((made,)).to_json()).steps == (made,)  # JSON and equality from the protocol
    assert found["wanda"][0].build("wanda", 50, "unstructured", Calibration()).sparsity == 0.5
    assert found["sparsegpt"][0].build("sparsegpt", 10, "2:4", Calibration()).sparsity == 0.5  # N:M implies its own
    assert found["lowrank-weight"][0].build("lowrank-weight", 70, "", Calibration()).param_ratio == 0.7
    assert found["experts-reap"][0].build("experts-reap", 25, "", Calibration()) == prune.ExpertPrune.of("reap", 0.25)
    assert found["width-llm-pruner"][0].build("width-llm-pruner", 80, "", Calibration()).criterion == "llm-pruner"
    assert found["int4+head"][0].build("int4+head", None, "", Calibration()) == Quantize.of(4, head=True)
    assert found["int8+emb"][0].build("int8+emb", None, "", Calibration()) == Quantize.of(8, embedding=True)
    wiki = Calibration(source="wikitext2", path="/data")
    assert found["int4-gptq"][0].build("int4-gptq", None, "", wiki) == Quantize.of(4, method="gptq", calibration=wiki)
    with pytest.raises(InvalidInput, match="pattern"):
        found["magnitude"][0].build("magnitude", 50, "3:3", Calibration())


def test_the_cli_parses_each_familys_options_and_builds_its_steps_in_stage_order():
    parser = build_parser()
    flags = {action.option_strings[0] for action in parser._actions if action.option_strings}
    assert {o.flag for f in FAMILIES.values() for o in f.options} <= flags
    args = parser.parse_args(["--full", "--heal", "lora", "--sparsify", "wanda", "--sparsity", "0.3",
                              "--decompose", "feature", "--param_ratio", "0.9", "--width", "0.8", "--patch", "lstsq",
                              "--quantize", "int4", "--quant_group", "64", "--quant_head", "--quant_method", "gptq",
                              "--quant_embedding"])
    made = extra_steps(args, Calibration())
    assert [s.kind for s in made] == ["patch", "width", "lowrank", "sparsify", "heal", "quantize"]  # the patch right
    assert made[-1] == Quantize.of(4, 64, head=True, method="gptq", calibration=Calibration(), embedding=True)  # last
    assert (made[0].calibration.n_samples, made[0].calibration.seq_len) == (64, 256)  # its own size, the source's text
    assert [f.name for f in step_families()] == ["patch", "width", "experts", "lowrank", "sparsity", "healing",
                                                 "quantize"]
    Recipe(tuple([prune.DepthCut.of(6, [1])] + made))  # accepted: no step refuses the one before it
    kd = parser.parse_args(["--full", "--heal", "lora", "--heal_teacher", "reverse_kl", "--kd_ratio", "0.5"])
    assert extra_steps(kd, Calibration())[0].option.items() >= {"teacher": "reverse_kl", "kd_ratio": 0.5,
                                                                     "temperature": 1.0}.items()
    none = parser.parse_args(["--full"])
    assert extra_steps(none, Calibration()) == [] and not adds_step(none)


@pytest.mark.parametrize("argv, message", [
    (["--full", "--sparsity", "0.5"], "--sparsity and --pattern go with --sparsify METHOD."),
    (["--full", "--param_ratio", "0.5"], "--decompose feature|weight and --param_ratio R go together."),
    (["--full", "--heal_steps", "3"],
     "--heal_steps, --heal_budget_s and --heal_teacher go with --heal lora|last_layers."),
    (["--full", "--heal", "lora", "--kd_ratio", "0.5"],
     "--kd_ratio and --kd_temperature go with --heal_teacher forward_kl|reverse_kl."),
    (["--sweep", "2", "--width", "0.8"],
     "--patch, --sparsify, --width, --prune_experts, --decompose, --heal and --quantize add a step to a compared "
     "model"),
    (["--full", "--patch", "lstsq"], "--patch repairs a depth cut: not with --full or --drop."),
    (["--full", "--quant_group", "64"], "--quant_group goes with --quantize int4."),
    (["--full", "--expert_fraction", "0.5"], "--expert_fraction goes with --prune_experts METHOD."),
    (["--full", "--quant_head"], "--quant_head, --quant_embedding and --quant_method go with --quantize."),
    (["--full", "--quant_embedding"], "--quant_head, --quant_embedding and --quant_method go with --quantize."),
    (["--full", "--quant_method", "gptq"], "--quant_head, --quant_embedding and --quant_method go with --quantize."),
])
def test_options_that_go_with_a_familys_flag_are_refused_without_it(argv, message):
    with pytest.raises(InvalidInput) as err:
        check_mode(build_parser().parse_args(argv))
    assert str(err.value).startswith(message)


def test_a_step_after_the_kind_it_refuses_is_refused_by_the_recipe():
    sparse, low = prune.Sparsify.of("magnitude", 0.5), prune.Decompose.of("weight", param_ratio=0.8)
    with pytest.raises(InvalidInput, match="decompose first, then sparsify"):
        Recipe((sparse, low))
    with pytest.raises(InvalidInput, match="prune the width before decomposing"):
        Recipe((low, prune.WidthPrune.of(0.8)))
    assert Recipe((low, sparse)).steps == (low, sparse)


def test_the_options_argparse_gets_are_the_declared_ones():
    parser = argparse.ArgumentParser()
    for family in FAMILIES.values():
        for option in family.options:
            parser.add_argument(option.flag, **option.keywords)
    assert parser.parse_args([]).pattern == "unstructured" and parser.parse_args(["--drop", "mlp"]).drop == "mlp"


NEW_FAMILY = '''
from dataclasses import dataclass
from typing import ClassVar
import copy
import prune
from prune.core.calibration import Calibration
from prune.core.family import Choice, Family, Level, Option, register_family
from prune.core.step import Step, step

@step("scale")
@dataclass(frozen=True, eq=False)
class Scale(Step):
    kind: ClassVar[str]
    card_tag: ClassVar[str] = "scaled"
    factor: float = 1.0
    def apply(self, model, tokenizer=None, progress=None):
        return copy.deepcopy(model)
    def describe(self):
        return f"scaled by {self.factor:g}"
    def short(self):
        return f"x{self.factor:g}"
    def card_line(self, model, factored=False):
        return f"- Scaled: by {self.factor:g}"

register_family(Family(
    name="scale", label="Scale", step=Scale, paper="nobody 2026", link="https://example.org", about="a test family",
    choices=(Choice("scale", "Scale the weights", "a test", Level("Factor (%)", 1, 200, 100)),),
    build=lambda name, level, pattern, cal: Scale(level / 100),
    options=(Option("--scale", dict(type=float, default=None, help="then scale by this factor")),),
    from_args=lambda args, cal, data_dir=None: None if args.scale is None else Scale(args.scale), stage=9))

from ui import catalog
from evaluation.cli import build_parser
from evaluation.cli.steps import extra_steps
from evaluation.exports import texts
from prune.core.recipe import Recipe
assert ("Scale · Scale the weights", "scale") in catalog.method_choices()
assert catalog.level_slider("scale") == dict(label="Factor (%)", minimum=1, maximum=200, value=100, visible=True)
made = catalog.step_for("scale", 50, "unstructured", Calibration())
assert made == Scale(0.5) and Recipe.from_json(Recipe((made,)).to_json()).steps == (made,)
args = build_parser().parse_args(["--full", "--width", "0.9", "--scale", "2"])
assert [s.kind for s in extra_steps(args, Calibration())] == ["width", "scale"]
assert "--scale" in build_parser().format_help()
assert [s.card_tag for s in texts._last_of_each_family(Recipe((made,)))] == ["scaled"]  # the model card's tag
print("family ok")
'''


def test_a_new_family_is_one_declaration_the_picker_the_cli_and_recipes_read(tmp_path):
    """A family written in one file (here: a script) reaches the picker, its level, the CLI, recipe JSON and the
    card."""
    script = tmp_path / "family.py"
    script.write_text(NEW_FAMILY)
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.strip() == "family ok", done.stderr[-2000:]
