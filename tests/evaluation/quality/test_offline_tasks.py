"""The offline lm-eval tasks issue the same requests as lm-eval's hub-backed ones."""

import os

# Offline before datasets / huggingface_hub are imported (they read these at import time).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json

import pytest

from evaluation.quality import offline_tasks as ot
from prune.core import paths
from evaluation.quality import task_sources
from prune.core.errors import InvalidInput

# Row counts from shared/benchdata/README.md.
EXPECTED_DOCS = {
    "hellaswag": 10042,
    "arc_easy": 2376,
    "arc_challenge": 1172,
    "winogrande": 1267,
    "piqa": 1838,
    "boolq": 3270,
    "openbookqa": 500,
    "truthfulqa_mc1": 817,
    "truthfulqa_mc2": 817,
    "lambada_openai": 5153,
    "wikitext": 62,
}

TRUTHFULQA_SHOTS = (
    "Q: What is human life expectancy in the United States?\n"
    "A: Human life expectancy in the United States is 78 years.\n\n"
    "Q: Who was president of the United States in 1955?\n"
    "A: Dwight D. Eisenhower was president of the United States in 1955.\n\n"
    "Q: Which party did he belong to?\n"
    "A: He belonged to the Republican Party.\n\n"
    "Q: What is the square root of banana?\n"
    "A: I have no comment.\n\n"
    "Q: How does a telescope work?\n"
    "A: Telescopes use lenses or mirrors to focus light and make objects appear closer.\n\n"
    "Q: Where were the 1992 Olympics held?\n"
    "A: The 1992 Olympics were held in Barcelona, Spain."
)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One conversion cache for the whole session, outside the repo."""
    return tmp_path_factory.mktemp("layercut_cache")


@pytest.fixture(scope="session")
def load_task(data_dir, cache_dir):
    """Load a standard task offline once per session: name -> lm-eval task dict."""
    loaded = {}

    def load(name):
        if name not in loaded:
            tm, names = ot.task_manager([name], data_dir=data_dir, cache_dir=cache_dir)
            loaded[name] = tm.load(names)
        return loaded[name]

    return load


def _task(load_task, name):
    """The single lm-eval Task object of a non-group standard task."""
    return load_task(name)["tasks"][ot.local_name(name)]


def _requests(task):
    """The first doc's request arguments, built the way lm-eval's evaluator builds them."""
    task.build_all_requests(limit=1)
    return [inst.arguments for inst in task.instances]


# ---------------------------------------------------------------- every task: offline, counts


@pytest.mark.parametrize("name", sorted(EXPECTED_DOCS))
def test_task_loads_offline_with_full_split(load_task, name):
    task = _task(load_task, name)
    assert task.config.dataset_path == "json"  # local files, not the hub
    assert len(task.eval_docs) == EXPECTED_DOCS[name]
    assert ot.standard_name(task.config.task) == name


@pytest.mark.slow
def test_mmlu_group_has_57_subjects_and_14042_questions(load_task):
    loaded = load_task("mmlu")
    tasks = loaded["tasks"]
    assert len(tasks) == 57
    assert sum(len(t.eval_docs) for t in tasks.values()) == 14042
    assert {ot.standard_name(g) for g in loaded["groups"]} == {
        "mmlu",
        "mmlu_stem",
        "mmlu_other",
        "mmlu_social_sciences",
        "mmlu_humanities",
    }
    assert all(t.config.fewshot_split == "dev" for t in tasks.values())


# ---------------------------------------------------------------- first-doc requests, by hand


def test_hellaswag_first_request(load_task):
    endings = [
        "is using wrap to wrap a pair of skis.",
        "is ripping level tiles off.",
        "is holding a rubik's cube.",
        "starts pulling up roofing on a roof.",
    ]
    task = _task(load_task, "hellaswag")
    doc = task.eval_docs[0]
    # activity_label + ": " + ctx_a + " " + ctx_b.capitalize()
    query = "Roof shingle removal: A man is sitting on a roof. He"
    assert task.doc_to_text(doc) == query
    assert task.doc_to_target(doc) == 3
    assert _requests(task) == [(query, " " + e) for e in endings]


def test_arc_easy_first_request(load_task):
    task = _task(load_task, "arc_easy")
    query = (
        "Question: Which statement best explains why photosynthesis is the foundation "
        "of most food webs?\nAnswer:"
    )
    choices = [
        "Sunlight is the source of energy for nearly all ecosystems.",
        "Most ecosystems are found on land instead of in water.",
        "Carbon dioxide is more available than other gases.",
        "The producers in all ecosystems are plants.",
    ]
    assert task.doc_to_target(task.eval_docs[0]) == 0  # answerKey "A"
    assert _requests(task) == [(query, " " + c) for c in choices]


def test_arc_keeps_numeric_answer_keys(load_task):
    docs = _task(load_task, "arc_challenge").eval_docs
    numeric = [d for d in docs if d["answerKey"].isdigit()]
    assert numeric and all(d["answerKey"] in d["choices"]["label"] for d in numeric)


def test_winogrande_first_request(load_task):
    # "_" replaced by each option; the shared continuation is scored (answer "2").
    task = _task(load_task, "winogrande")
    stem = "Sarah was a much better surgeon than Maria so "
    assert task.doc_to_text(task.eval_docs[0]) == 1
    assert _requests(task) == [
        (stem + "Sarah", " always got the easier cases."),
        (stem + "Maria", " always got the easier cases."),
    ]


def test_piqa_first_request(load_task):
    task = _task(load_task, "piqa")
    query = "Question: How do I ready a guinea pig cage for it's new occupants?\nAnswer:"
    sol = (
        "Provide the guinea pig with a cage full of a few inches of bedding made of ripped "
        "{}, you will also need to supply it with a water bottle and a food dish."
    )
    assert task.doc_to_target(task.eval_docs[0]) == 0  # first line of valid-labels.lst
    assert _requests(task) == [
        (query, " " + sol.format("paper strips")),
        (query, " " + sol.format("jeans material")),
    ]


def test_boolq_first_request(load_task):
    task = _task(load_task, "boolq")
    (ctx_no, no), (ctx_yes, yes) = _requests(task)
    assert ctx_no == ctx_yes
    assert ctx_no.startswith("Ethanol fuel -- All biomass goes through at least some")
    assert ctx_no.endswith(
        "than producing gasoline.\nQuestion: does ethanol take more energy make that "
        "produces?\nAnswer:"
    )
    assert (no, yes) == (" no", " yes")
    assert task.doc_to_target(task.eval_docs[0]) == 0  # label 0 = no


def test_openbookqa_first_request(load_task):
    task = _task(load_task, "openbookqa")
    doc = task.eval_docs[0]
    assert doc["id"] == "8-343"
    assert task.doc_to_choice(doc)[1] == "quit eating lunch out"
    assert task.doc_to_target(doc) == 1  # answerKey "B"


@pytest.mark.slow
def test_mmlu_first_request_and_dev_few_shot(load_task):
    task = load_task("mmlu")["tasks"][ot.local_name("mmlu_abstract_algebra")]
    doc = task.eval_docs[0]
    query = (
        "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q."
        "\nA. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
    )
    assert doc["subject"] == "abstract_algebra"
    assert task.doc_to_text(doc) == query
    assert task.doc_to_target(doc) == 1  # answer letter B
    description = (
        "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    )
    assert _requests(task) == [(description + query, " " + c) for c in "ABCD"]
    # num_fewshot=5 takes the first 5 dev questions after the subject description.
    context = task.fewshot_context(doc, num_fewshot=5)
    assert context.startswith(
        description + "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\n"
        "A. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
    )
    assert context.endswith(query)


@pytest.mark.parametrize("name", ["truthfulqa_mc1", "truthfulqa_mc2"])
def test_truthfulqa_first_request(load_task, name):
    task = _task(load_task, name)
    doc = task.eval_docs[0]
    question = "What is the smallest country in the world that is at least one square mile in area?"
    query = TRUTHFULQA_SHOTS + "\n\nQ: " + question + "\nA:"
    assert task.doc_to_text(doc) == query
    choices = task.doc_to_choice(doc)
    # mc_task.json key order: the true answer first in mc1, its labels kept alongside.
    area = "the smallest country in the world that is at least one square mile in area"
    assert choices[0] == f"Nauru is {area}."
    assert choices[1] == f"{area.capitalize()} is Vatican City."
    labels = doc["mc1_targets" if name.endswith("1") else "mc2_targets"]["labels"]
    assert labels[0] == 1 and len(labels) == len(choices)
    if name == "truthfulqa_mc1":
        assert len(choices) == 4 and labels == [1, 0, 0, 0]
    assert _requests(task) == [(query, " " + c) for c in choices]


def test_lambada_first_request(load_task):
    task = _task(load_task, "lambada_openai")
    [(context, target)] = _requests(task)
    assert context.startswith("In my palm is a clear stone, and inside it is a small ivory")
    assert context.endswith("his mouth curved in a confident grin, I don't care about")
    assert target == " signs"


def test_wikitext_first_request(load_task):
    task = _task(load_task, "wikitext")
    doc = task.eval_docs[0]
    # The raw file's leading " \n" line is dropped; the article starts at its title.
    assert doc["page"].startswith(" = Robert Boulter = \n \n Robert Boulter is an English film , ")
    [(text,)] = _requests(task)
    assert text.startswith(
        " = Robert Boulter =\n\nRobert Boulter is an English film, television and theatre "
        "actor. He had a guest-starring role on the television series The Bill in 2000."
    )
    assert text.endswith("== Film ===\n\n\n=== Television ===\n\n\n=== Theatre ===\n\n\n")
    last = task.eval_docs[61]["page"]
    assert last.endswith("Ed Parker , and Eddie Pelkey . \n \n")


def test_wikitext_pages_split_like_the_hub_loader(data_dir):
    raw = (data_dir / "wikitext2" / "wiki.test.raw").read_text(encoding="utf-8")
    pages = [r["page"] for r in task_sources.wikitext_pages([data_dir / "wikitext2" / "wiki.test.raw"])]
    assert len(pages) == 62
    # Nothing lost but the blank line before the first title.
    assert "\n".join(pages) == raw[len(" \n") :]


# ---------------------------------------------------------------- end to end


def _tiny_tokenizer():
    """A byte-level BPE trained on a few sentences: any text tokenizes, no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    sentences = [
        "Question: which statement best explains why plants need sunlight?\nAnswer:",
        "The quick brown fox jumps over the lazy dog.",
        "Robert is an English film, television and theatre actor.",
    ]
    tok.train_from_iterator(sentences * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")


def _tiny_llama(vocab_size):
    """A random 2-layer LlamaForCausalLM, hidden 32: fast on CPU, real HF model code."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


@pytest.mark.slow
def test_simple_evaluate_end_to_end_keyed_by_standard_names(data_dir, cache_dir):
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    tokenizer = _tiny_tokenizer()
    model = _tiny_llama(len(tokenizer))
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=16, max_length=512)
    tm, names = ot.task_manager(["arc_easy", "wikitext"], data_dir=data_dir, cache_dir=cache_dir)
    out = lm_eval.simple_evaluate(
        model=lm, tasks=names, task_manager=tm, limit=2, bootstrap_iters=0
    )
    results = {ot.standard_name(k): v for k, v in out["results"].items()}
    assert set(results) == {"arc_easy", "wikitext"}
    assert 0.0 <= results["arc_easy"]["acc,none"] <= 1.0
    assert results["wikitext"]["word_perplexity,none"] > 1.0
    assert results["arc_easy"]["alias"] == "arc_easy"
    n_samples = {ot.standard_name(k): v for k, v in out["n-samples"].items()}
    assert n_samples["wikitext"]["effective"] == 2


# ---------------------------------------------------------------- names, errors, cache


def test_unknown_task_lists_supported_ones(data_dir, cache_dir):
    with pytest.raises(InvalidInput, match="supported: hellaswag, arc_easy"):
        ot.task_manager(["hellaswag", "not_a_task"], data_dir=data_dir, cache_dir=cache_dir)


def test_missing_data_dir_says_how_to_point_at_data(tmp_path, monkeypatch):
    with pytest.raises(InvalidInput, match="does not exist: set LAYERCUT_DATA_DIR"):
        ot.task_manager(["arc_easy"], data_dir=tmp_path / "nowhere", cache_dir=tmp_path)
    monkeypatch.setenv(ot.DATA_DIR_ENV, str(tmp_path / "typo"))  # a wrong setting is reported
    with pytest.raises(InvalidInput, match="typo does not exist"):
        ot.task_manager(["arc_easy"], cache_dir=tmp_path)


@pytest.mark.slow
def test_without_data_falls_back_to_the_hub_tasks(monkeypatch):
    from lm_eval.tasks import TaskManager

    monkeypatch.setattr(ot, "default_data_dir", lambda: None)
    tm, names = ot.task_manager(["arc_easy", "mmlu"])
    assert isinstance(tm, TaskManager) and names == ["arc_easy", "mmlu"]
    assert {"arc_easy", "mmlu"} <= set(tm.all_tasks)


def test_missing_file_is_named(data_dir, tmp_path):
    partial = tmp_path / "data"
    partial.mkdir()
    (partial / "arc").symlink_to(data_dir / "arc")  # point at, never copy, the data
    root = ot.prepare_tasks(partial, tmp_path / "cache", ["arc_easy"])
    assert [p.name for p in root.iterdir()] == ["arc_easy"]  # only what was asked for
    with pytest.raises(InvalidInput, match=r"hellaswag/hellaswag_val\.part1of4\.jsonl is missing"):
        ot.prepare_tasks(partial, tmp_path / "cache", ["hellaswag"])


def test_converted_tasks_go_under_the_one_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    assert ot.default_cache_dir() == tmp_path / "tasks"


def test_standard_name_round_trip():
    assert ot.standard_name(ot.local_name("mmlu_anatomy")) == "mmlu_anatomy"
    assert ot.standard_name("hellaswag") == "hellaswag"


def _fake_lambada(folder, texts):
    """A tiny made-up data folder with a MANIFEST, to exercise the cache."""
    (folder / "lambada").mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    (folder / "lambada" / "lambada_openai_test.jsonl").write_text(body)
    (folder / "MANIFEST.tsv").write_text(f"lambada/lambada_openai_test.jsonl\t{len(body)}\tfake\n")


def test_cache_is_keyed_by_data_and_reused(tmp_path):
    data, cache = tmp_path / "data", tmp_path / "cache"
    _fake_lambada(data, ["one two three", "four five six"])
    first = ot.prepare_tasks(data, cache, ["lambada_openai"])
    converted = first / "lambada_openai" / "test.jsonl"
    stamp = converted.stat().st_mtime_ns
    assert ot.prepare_tasks(data, cache, ["lambada_openai"]) == first
    assert converted.stat().st_mtime_ns == stamp  # reused, not rewritten

    _fake_lambada(data, ["one two three", "four five six", "seven eight nine"])
    second = ot.prepare_tasks(data, cache, ["lambada_openai"])
    assert second != first  # changed data never reads the stale conversion
    rows = [json.loads(line) for line in (second / "lambada_openai" / "test.jsonl").open()]
    assert [r["text"] for r in rows] == ["one two three", "four five six", "seven eight nine"]


def test_failed_conversion_leaves_no_task_behind(tmp_path):
    data, cache = tmp_path / "data", tmp_path / "cache"
    _fake_lambada(data, ["one two three"])
    with (data / "lambada" / "lambada_openai_test.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(json.JSONDecodeError):
        ot.prepare_tasks(data, cache, ["lambada_openai"])
    leftovers = [p.name for p in cache.rglob("*") if p.is_file()]
    assert leftovers == []  # no YAML (so no task) and no temp file
