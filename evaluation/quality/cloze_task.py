"""The lm-eval task that asks cloze requests (the rule and the tasks: :mod:`evaluation.quality.cloze`)."""

from __future__ import annotations

from lm_eval.api.instance import Instance
from lm_eval.api.metrics import mean
from lm_eval.api.task import Task
from lm_eval.filters import build_filter_ensemble
from lm_eval.config.task import TaskConfig

from evaluation.quality.cloze_request import REQUEST, parts


class ClozeTask(Task):
    """One cloze task: a ``cloze`` request per option, right when the best-scored option is the answer."""

    VERSION = 0
    OUTPUT_TYPE = REQUEST

    def __init__(self, name: str, docs: list[dict]):  # Task.__init__'s state, questions given
        # Not Task.__init__: it downloads, and in lm-eval 0.4.13 wraps a config dict as TaskConfig's first field.
        self.dataset = {"test": docs}
        self._training_docs = self._fewshot_docs = self._instances = None
        self._config = TaskConfig(task=name, task_alias=name, num_fewshot=0, output_type=REQUEST)
        self._filters = [build_filter_ensemble("none", [["take_first", None]])]
        self.fewshot_rnd = None

    def has_training_docs(self) -> bool:
        return False

    def has_validation_docs(self) -> bool:
        return False

    def has_test_docs(self) -> bool:
        return True

    def test_docs(self) -> list[dict]:
        return self.dataset["test"]

    def doc_to_text(self, doc: dict) -> str:
        return parts(doc, "")[0]

    def doc_to_target(self, doc: dict) -> str:
        return doc["answer"]

    def construct_requests(self, doc: dict, ctx: str, **kwargs) -> list[Instance]:
        return [Instance(request_type=REQUEST, doc=doc, arguments=parts(doc, option), idx=i,
                         metadata=kwargs.get("metadata", (None, None, None)))
                for i, option in enumerate(doc["options"])]

    def process_results(self, doc: dict, results: list[float]) -> dict[str, float]:
        best = max(range(len(results)), key=results.__getitem__)  # the first of equals, as argmax
        return {"acc": float(doc["options"][best] == doc["answer"])}

    def aggregation(self) -> dict:
        return {"acc": mean}

    def higher_is_better(self) -> dict:
        return {"acc": True}
