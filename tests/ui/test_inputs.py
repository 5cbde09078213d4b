"""What visitors type: checked once where it enters, with a one-line message; the shared-server policy."""

from __future__ import annotations

from pathlib import Path

import pytest

import prune
from conftest import handlers_on, tiny_model
from evaluation.serving.backend import Backend
from evaluation.core.pool import ModelSpec
from prune.core.errors import InvalidInput, LayerCutError, ModelNotFound, quoted
from prune.core.recipe import Recipe
from ui import inputs
from ui.session import Session

SHARED = inputs.Policy(shared=True)
PERSONAL = inputs.Policy(shared=False)
DEFAULT = prune.Calibration()


@pytest.mark.parametrize("value, message", [(2.5, "whole number, not 2.5"), ("abc", "whole number, not 'abc'"),
                                            (None, "whole number"), (float("nan"), "whole number"),
                                            (0, "must be 1…29, not 0"), (30, "must be 1…29, not 30")])
def test_numbers_are_whole_and_in_range_or_refused(value, message):
    with pytest.raises(InvalidInput, match=message):
        inputs.whole_number(value, "The block size", minimum=1, maximum=29)


def test_whole_numbers_pass_through_as_ints():
    assert inputs.whole_number(6.0, "n", minimum=1) == 6 and isinstance(inputs.whole_number("7", "n"), int)
    assert inputs.optional_limit(0, "limit") is None and inputs.optional_limit("", "limit") is None
    assert inputs.optional_limit(200, "limit") == 200
    with pytest.raises(InvalidInput, match="whole number, not 2.5"):
        inputs.optional_limit(2.5, "Questions per task")


@pytest.mark.parametrize("value, message", [
    (2**63, "must be 0…1,000,000,000, not 9223372036854775808"), (10**400, "whole number, not 1000000000"),
    ("1e400", "whole number, not '1e400'"), (float("inf"), "whole number, not inf")])
def test_whole_numbers_past_any_sane_count_are_refused_by_default(value, message):
    with pytest.raises(InvalidInput, match=message):
        inputs.whole_number(value, "The count", minimum=0)
    assert inputs.whole_number(10**9, "The count", minimum=0) == 10**9


def test_limits_and_seeds_have_stated_caps():
    assert inputs.optional_limit(100_000, "Windows") == 100_000
    with pytest.raises(InvalidInput, match="Windows must be 0…100,000, not 100001"):
        inputs.optional_limit(100_001, "Windows")
    with pytest.raises(InvalidInput, match="The seed must be 0…4,294,967,295"):
        inputs.whole_number(2**32, "The seed", minimum=0, maximum=inputs.LARGEST_SEED)


def test_a_message_quotes_at_most_60_characters_of_a_value():
    with pytest.raises(InvalidInput) as refused:
        inputs.whole_number("x" * 100_000, "The count")
    assert str(refused.value) == f"The count must be a whole number, not '{'x' * 60}…'."
    assert quoted("short") == "'short'" and quoted(2.5) == "2.5" and quoted([1] * 100).endswith("…")


@pytest.mark.parametrize("policy", [SHARED, PERSONAL])
def test_over_long_or_control_character_model_names_are_refused_first(policy):
    with pytest.raises(InvalidInput, match=r"too long \(300 characters\).*at most 255 characters between slashes"):
        inputs.model_spec("a" * 300, None, False, "auto", policy)
    with pytest.raises(InvalidInput, match="no control characters"):
        inputs.model_spec("org/mo\0del", None, False, "auto", policy)
    long_id = "org/" + "m" * 255
    assert inputs.model_spec(long_id, None, False, "auto", policy).name == long_id  # refused later, if at all


def test_prompts_over_the_limit_are_refused():
    policy = inputs.Policy(max_prompt_chars=100)
    assert inputs.prompt("x" * 100, policy) == "x" * 100
    with pytest.raises(InvalidInput, match="101 characters; this server takes at most 100"):
        inputs.prompt("x" * 101, policy)
    with pytest.raises(InvalidInput, match="empty"):
        inputs.prompt("  ", policy)


def test_a_shared_server_reads_no_server_files(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("server-side secret")
    for path in ("/etc/passwd", "/proc/self/environ", str(secret)):
        with pytest.raises(InvalidInput, match="upload a text file instead"):
            inputs.calibration("file", path, None, 16, 128, SHARED, DEFAULT)
    with pytest.raises(InvalidInput, match="own data folder"):
        inputs.calibration("wikitext2", str(tmp_path), None, 16, 128, SHARED, DEFAULT)
    uploaded = inputs.calibration("upload", None, str(secret), 16, 128, SHARED, DEFAULT)
    assert (uploaded.source, uploaded.text) == ("text", "server-side secret")  # an upload is the visitor's own file


def test_a_personal_machine_reads_files_and_says_what_is_wrong(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    assert inputs.calibration("file", str(tmp_path / "notes.txt"), None, 4, 8, PERSONAL, DEFAULT).path
    with pytest.raises(InvalidInput, match="is a folder, not a text file"):
        inputs.calibration("file", str(tmp_path), None, 4, 8, PERSONAL, DEFAULT)
    with pytest.raises(InvalidInput, match="does not exist"):
        inputs.calibration("file", str(tmp_path / "nope.txt"), None, 4, 8, PERSONAL, DEFAULT)
    with pytest.raises(InvalidInput, match="whole number"):
        inputs.calibration("builtin", None, None, 2.5, 8, PERSONAL, DEFAULT)


def test_hub_calibration_offline_fails_at_once(monkeypatch):
    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: False)
    with pytest.raises(InvalidInput, match="cannot be reached"):
        inputs.calibration("hub", "wikitext:wikitext-2-raw-v1:validation:text", None, 4, 8, PERSONAL, DEFAULT)


def test_a_shared_server_loads_local_folders_only_from_its_model_root(tiny_folder, tmp_path):
    messages = []
    for name in (tiny_folder, "/etc", "/no/such/folder"):  # existing or not: the same words
        with pytest.raises(ModelNotFound) as refused:
            inputs.model_spec(name, None, False, "auto", SHARED)
        messages.append(str(refused.value).replace(name, "NAME"))
    assert len(set(messages)) == 1 and "can load" in messages[0]
    root = inputs.Policy(shared=True, model_root=tmp_path.parent.parent.resolve())
    assert inputs.model_spec(tiny_folder, "tok", False, "auto", root) == ModelSpec(tiny_folder)
    assert inputs.model_spec("org/model", None, False, "bfloat16", SHARED).dtype == "bfloat16"
    assert inputs.model_spec(tiny_folder, None, False, "auto", PERSONAL).name == tiny_folder
    with pytest.raises(InvalidInput, match="Unknown precision"):
        inputs.model_spec("org/model", None, False, "float8", SHARED)


def test_a_hub_model_is_keyed_by_its_token_which_is_never_shown(tiny_folder):
    spec = inputs.model_spec("org/model", " hf_secret ", False, "auto", PERSONAL)
    assert spec.token == "hf_secret" and "hf_secret" not in repr(spec) and "hf_secret" not in str(spec.access)
    assert spec == inputs.model_spec("org/model", "hf_secret", False, "auto", PERSONAL)
    assert spec != ModelSpec("org/model") and spec != ModelSpec("org/model", token="hf_other")
    assert ModelSpec(tiny_folder, token="hf_secret") == ModelSpec(tiny_folder)  # a folder needs no token: shared
    assert ModelSpec(token="hf_secret") == ModelSpec()  # so does the embedded model


def test_a_failed_load_keeps_every_loaded_model(tiny_folder, tmp_path):
    backend = Backend(device="cpu")
    good = ModelSpec(tiny_folder)
    backend.models.load(good)
    broken = tmp_path / "only-config"
    broken.mkdir()
    tiny_model("llama", 2).config.save_pretrained(broken)  # a config.json and nothing else
    with pytest.raises(LayerCutError) as failed:
        backend.models.load(ModelSpec(str(broken)))
    assert "\n" not in str(failed.value)  # one line for the visitor
    assert backend.models.pool.loaded() == [good] and backend.models.load(good).num_layers == 4


def test_sessions_are_independent_values():
    first = Session()
    second = first.with_cut(prune.core.recipe.Recipe.block(4, 0, 1))
    assert first.cuts == (None, None) and second.cuts[0].depth_cut.layers == (0,)
    assert second.variants() == {"A": prune.core.recipe.Recipe.block(4, 0, 1)}


@pytest.mark.parametrize("reachable, words", [
    (True, "give a Hugging Face model id"),
    (False, "the Hugging Face Hub cannot be reached from this server (offline), so it loads only the embedded model")])
def test_a_shared_server_says_the_same_for_a_missing_hub_id_and_a_local_folder(tiny_folder, monkeypatch, reachable,
                                                                                words, page):
    monkeypatch.setattr("prune.core.loading.hub_reachable", lambda timeout_s=3.0: reachable)
    # no request for the id (on this offline machine ~20 s of retries): huggingface_hub fails it at once, as unknown
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.chdir(Path(tiny_folder).parent)
    picks = handlers_on(page, Backend(device="cpu"), SHARED).pick
    local = Path(tiny_folder).name  # a bare name that exists here as a folder
    said = []
    for name in (local, "no-such-org/no-such-model"):
        with pytest.raises(Exception) as refused:
            list(picks.load_model(Session(), name, "", False, "auto"))  # the updates it streams, then the error
        said.append(str(refused.value).replace(name, "NAME"))
    assert said[0] == said[1] and "can load" in said[0] and words in said[0]


def test_loading_a_12_layer_model_gives_an_index_example_it_has(tmp_path, tiny_tokenizer, page):
    folder = tmp_path / "twelve"
    tiny_model("llama", 12).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    *_loading, outputs = handlers_on(page, Backend(device="cpu")).pick.load_model(Session(), str(folder), "", False,
                                                                                   "auto")
    convention, status = outputs[page.cut.convention], outputs[page.header.analysis_md]
    assert convention.endswith("**[9, 11)** removes layers 9–10, two layers.") and status == "Analyzing…"


def _wanda(calibration: dict) -> str:
    """A recipe's JSON whose one step calibrates on ``calibration``, as a script would send it."""
    import json

    return json.dumps({"steps": [{"kind": "sparsify", "method": "wanda", "sparsity": 0.5, "pattern": "unstructured",
                                  "calibration": calibration}]})


def test_a_recipe_sent_as_json_is_checked_as_the_page_checks_its_parts(tmp_path):
    own = prune.Calibration(source="wikitext2", path=str(tmp_path))  # this server's own data folder
    cut = inputs.recipe('{"steps": [{"kind": "cut", "num_layers": 4, "layers": [1, 2]}]}', "A", 4, SHARED, own)
    assert cut == Recipe.block(4, 1, 3) and inputs.recipe(" ", "A", 4, SHARED, own) is None
    assert inputs.recipe(_wanda({"source": "wikitext2", "path": str(tmp_path)}), "A", 4, SHARED, own) is not None
    for calibration, message in (({"source": "file", "path": "/etc/passwd"}, "reads no files from its disk"),
                                 ({"source": "wikitext2", "path": "/etc"}, "WikiText-2 from its own data folder"),
                                 ({"source": "text", "text": None}, "kept by its digest only"),
                                 ({"source": "builtin", "n_samples": 10**6}, "Calibration samples must be 1…4,096"),
                                 ({"source": "nowhere"}, "unknown calibration source 'nowhere'")):
        with pytest.raises(InvalidInput, match=message):
            inputs.recipe(_wanda(calibration), "A", 4, SHARED, own)
    assert inputs.recipe(_wanda({"source": "wikitext2", "path": "/etc"}), "A", 4, PERSONAL, own) is not None
    with pytest.raises(LayerCutError, match="made for a 4-layer model; this model has 30"):
        inputs.recipe('{"steps": [{"kind": "cut", "num_layers": 4, "layers": [1]}]}', "A", 30, PERSONAL, own)
