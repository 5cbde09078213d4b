"""--recipe FILE: an export's recorded recipe evaluated again from the shell gives the export's scores exactly."""

import json

import pytest

from evaluation import cli as benchmark
from prune.core.calibration import Calibration
from prune.core.recipe import Recipe
from prune.sparsity.step import Sparsify

# lambada_openai's perplexity is a continuous score: two different models do not share it by chance
TASKS = ("--task", "arc_easy,lambada_openai", "--limit", 5, "--batch_size", 4)


def _run(capsys, *args):
    code = benchmark.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _exported(capsys, tmp_path, tiny_folder, data_dir, *how):
    """Run ``how`` with --export_dir: (its results folder, the export folder)."""
    run_dir, folder = tmp_path / "export_run", tmp_path / "cut"
    code, _, err = _run(capsys, *how, "--model", tiny_folder, *TASKS, "--data_dir", data_dir, "--output_folder",
                        run_dir, "--export_dir", folder)
    assert code == 0, err
    return run_dir, folder


def _card_scores(folder) -> str:
    """The export's model card table of measured scores (the export run's own, original and pruned)."""
    return (folder / "README.md").read_text().split("## Measured scores\n\n")[1].split("\n## ")[0].strip()


def test_recipe_from_the_folder_its_marker_or_its_config_reproduces_the_exported_scores_exactly(
        tiny_folder, tmp_path, capsys, data_dir):
    run_dir, folder = _exported(capsys, tmp_path, tiny_folder, data_dir,
                                "--personalized", "--start_block", 1, "--end_block", 2)
    exported = json.loads((run_dir / "results_personalized.json").read_text())
    original = json.loads((run_dir / "results_full.json").read_text())
    marker = json.loads((folder / "layercut.json").read_text())
    # config.json names no base model: --model says which; the other two name the tiny folder
    for index, (given, model) in enumerate([(folder, ()), (folder / "layercut.json", ()),
                                            (folder / "config.json", ("--model", tiny_folder))]):
        again_dir = tmp_path / f"again_{index}"
        code, out, err = _run(capsys, "--recipe", given, *model, *TASKS, "--data_dir", data_dir,
                              "--output_folder", again_dir, "--no_cache")  # evaluated anew, not read back
        assert code == 0, err
        assert (f"--recipe: on {tiny_folder}, the model layercut.json names" in err) == (not model)
        again = json.loads((again_dir / "results_recipe.json").read_text())
        assert Recipe.from_json(again["config"]["recipe"]).key == Recipe.from_json(marker["recipe"]).key
        assert again["config"]["model"] == tiny_folder and again["config"]["removed_layers"] == [1, 2]
        assert again["results"] == exported["results"]  # every metric, to the last digit
        assert json.loads((again_dir / "results_full.json").read_text())["results"] == original["results"]
        assert _card_scores(folder) in out  # the table the export's model card records, printed again


@pytest.mark.parametrize("step, mode", [(("--sparsify", "wanda", "--sparsity", 0.3), "personalized_wanda_30"),
                                        (("--width", 0.9), "personalized_width_90")])
def test_recipe_of_a_cut_then_a_calibrated_step_reproduces_the_exported_scores_exactly(
        tiny_folder, tmp_path, capsys, data_dir, step, mode):
    run_dir, folder = _exported(capsys, tmp_path, tiny_folder, data_dir,
                                "--personalized", "--start_block", 1, "--end_block", 1, *step)
    exported = json.loads((run_dir / f"results_{mode}.json").read_text())
    code, out, err = _run(capsys, "--recipe", folder, *TASKS, "--data_dir", data_dir, "--output_folder",
                          tmp_path / "again", "--no_cache")
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "results_recipe.json").read_text())
    assert Recipe.from_json(again["config"]["recipe"]) == Recipe.from_json(exported["config"]["recipe"])
    assert len(again["config"]["recipe"]["steps"]) == 2
    assert again["results"] == exported["results"]
    assert again["config"]["params_removed_pct"] == exported["config"]["params_removed_pct"]
    assert _card_scores(folder) in out


def _file(name, data):
    """A maker of one bad input in a test's folder: text as is, anything else as JSON."""
    def make(folder):
        path = folder / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path
    return make


def _inline_text_recipe():
    step = Sparsify.of("wanda", 0.5, calibration=Calibration(source="text", text="Words typed into the app. " * 40))
    return {"base_model": "somewhere", "recipe": Recipe((step,)).to_json()}


@pytest.mark.parametrize("make, reason", [
    pytest.param(lambda folder: folder / "nowhere" / "layercut.json", "does not exist", id="missing file"),
    pytest.param(lambda folder: folder, "holds neither layercut.json nor config.json", id="folder without a recipe"),
    pytest.param(_file("layercut.json", "steps: [cut 1, 2]"), "is not JSON", id="not JSON"),
    pytest.param(_file("config.json", {"model_type": "llama", "num_hidden_layers": 4}), "holds no LayerCut recipe",
                 id="no recipe"),
    pytest.param(_file("config.json", {"layercut": {"steps": []}}), "the empty recipe", id="empty recipe"),
    pytest.param(_file("layercut.json", {"recipe": {"steps": [{"kind": "prune_everything"}]}}),
                 "Unknown recipe step 'prune_everything'. Known steps: cut, ", id="unknown step kind"),
    pytest.param(_file("layercut.json", {"recipe": {"steps": [{"kind": "cut", "layers": [1]}]}}),
                 "The recorded cut step is malformed", id="malformed step"),
    pytest.param(_file("layercut.json", {"recipe": {"steps": [{"kind": "cut", "layers": [9], "num_layers": 4}]}}),
                 "Layers [9] do not exist: the model has layers 0…3", id="layers out of range"),
    pytest.param(_file("layercut.json", {"recipe": {"steps": [{"kind": "drop", "mlp": ["x"], "num_layers": 4}]}}),
                 "The recorded drop step is malformed", id="drop of a layer not a number"),
    pytest.param(_file("layercut.json", _inline_text_recipe()),
                 "step 1 (wanda 50%) was recorded with an inline calibration text kept only as its digest",
                 id="inline calibration text"),
    pytest.param(_file("layercut.json", {"recipe": Recipe.block(6, 1, 3).to_json()}),
                 "holds a recipe made for a 6-layer model; this model has 4 layers", id="another layer count"),
])
def test_a_bad_recipe_file_exits_with_a_one_line_reason(tiny_folder, tmp_path, capsys, make, reason):
    given = make(tmp_path)
    code, _, err = _run(capsys, "--recipe", given, "--model", tiny_folder, "--task", "arc_easy", "--limit", 2,
                        "--output_folder", tmp_path / "out")
    assert code == 2 and "Traceback" not in err
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert len(error_lines) == 1 and reason in error_lines[0], err
    assert not list((tmp_path / "out").glob("results_*.json"))
