"""Judged answers (MT-Bench) in the Benchmarks tab: every compared model answers a few of FastChat's questions, a judge
grades them (by default the original itself: self-judged), a table per category, and a viewer of one question with
each column's answer and the judge's verdicts side by side (see :mod:`evaluation.serving.mt_bench`)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from evaluation.serving import check_mt_bench, MT_BENCH, MtBenchRun, ORIGINAL, urls_allowed
from prune.core.errors import InvalidInput

from ui import inputs, judge_text as words
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.number_input import NumberInput
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.page.stale import Measured
from ui.session import SLOTS, Session
from ui.tables import mt_bench_table
from ui.text import model_names

COLUMNS = (ORIGINAL, *SLOTS)
QUESTIONS = 2  # the page's default: the first two questions, quick on a CPU (the command line takes one per category)
MAX_QUESTIONS = 80  # MT-Bench's


@dataclass
class Column:
    """One model's answer to the question on show, and the judge's verdicts on it."""

    answer: gr.Textbox
    verdict: gr.Textbox


@dataclass(frozen=True)
class Judged:
    """A finished run and its columns' titles: what the viewer shows, written by the run's own job only."""

    run: MtBenchRun
    titles: dict[str, str]  # label → the column's title ("A: cut 13–15")


@dataclass
class MtBenchBox:
    limit: NumberInput
    turns: gr.Radio
    answer_tokens: NumberInput
    judge_tokens: NumberInput
    judge: gr.Textbox
    remote_model: gr.Textbox  # the model an endpoint serves
    button: gr.Button
    estimate: gr.Markdown
    summary: gr.Markdown
    measured: Measured  # which models the answers are from, or that they are out of date
    table: gr.Dataframe
    question: gr.Dropdown  # the questions answered
    asked: gr.Markdown  # the question's turns
    columns: dict[str, Column]  # "original", "A", "B"
    shown: gr.State  # the Judged run on show

    def settings(self) -> list:
        return [self.limit, self.turns, self.judge, self.remote_model, self.answer_tokens, self.judge_tokens]

    def viewer(self) -> list:
        return [self.asked, *(part for column in self.columns.values() for part in (column.answer, column.verdict))]

    def outputs(self) -> list:
        return [self.table, self.summary, self.question, *self.viewer(), self.shown, *self.measured.outputs()]

    @classmethod
    def layout(cls, context: Context) -> MtBenchBox:
        endpoints = urls_allowed(context.policy.shared)
        with gr.Accordion("Judged answers (MT-Bench)", open=False, elem_id="mt-bench-box"):
            gr.Markdown(words.MT_BENCH_HELP)
            with gr.Row(equal_height=True):
                settings = dict(
                    limit=NumberInput(QUESTIONS, label="Questions (the first N; 0 = the first of each category)",
                                      minimum=0, elem_id="mt-limit"),
                    turns=gr.Radio([1, 2], value=MT_BENCH.turns, label="Turns", elem_id="mt-turns"),
                    answer_tokens=NumberInput(MT_BENCH.answer_tokens, label="Answer tokens (at most)", minimum=1,
                                              elem_id="mt-answer-tokens"),
                    judge_tokens=NumberInput(MT_BENCH.judge_tokens, label="Verdict tokens (a model judging)",
                                             minimum=1, elem_id="mt-judge-tokens"))
            with gr.Row(equal_height=True):
                judge = gr.Textbox("", label=words.judge_label(endpoints), placeholder=words.SELF_JUDGED_PLACEHOLDER,
                                   scale=3, elem_id="mt-judge")
                remote_model = gr.Textbox(MT_BENCH.remote_model, label="The model an endpoint serves", scale=1,
                                          visible=endpoints, elem_id="mt-remote-model")
                button = gr.Button("Run MT-Bench", variant="primary", scale=1, elem_id="mt-btn")
            estimate = gr.Markdown(elem_id="mt-estimate")
            summary = gr.Markdown(elem_id="mt-summary")
            measured = Measured.layout("mt-measured")
            table = gr.Dataframe(headers=list(words.MT_BENCH_HEADERS), label="Per category, turn and overall",
                                 interactive=False, wrap=True, elem_id="mt-table")
            question = gr.Dropdown([], label="Question", elem_id="mt-question")
            asked = gr.Markdown(elem_id="mt-asked")
            with gr.Row():  # each column's answer, then the judge's verdicts under it, at the same heights
                columns = {label: _column(label) for label in COLUMNS}
        return cls(**settings, judge=judge, remote_model=remote_model, button=button, estimate=estimate,
                   summary=summary, measured=measured, table=table, question=question, asked=asked, columns=columns,
                   shown=gr.State(None))


def _column(label: str) -> Column:
    with gr.Column(min_width=220):
        title = "Original model" if label == ORIGINAL else f"{label}: cut"
        return Column(gr.Textbox(label=title, lines=6, max_lines=16, interactive=False, visible=label == ORIGINAL,
                                 elem_id=f"mt-answer-{label}"),
                      gr.Textbox(label="The judge", lines=6, max_lines=16, interactive=False,
                                 visible=label == ORIGINAL, elem_id=f"mt-verdict-{label}"))


def check(context: Context, limit, turns, judge, remote_model, answer_tokens, judge_tokens):
    """The run's request from the settings as typed, each checked once here (no server folder in a message)."""
    data_dir = context.backend.models.data_dir
    count = inputs.whole_number(limit if limit not in (None, "") else 0, "Questions", minimum=0,
                                maximum=MAX_QUESTIONS)
    choice = inputs.judge(judge, remote_model, context.policy)
    try:
        return check_mt_bench(data_dir, limit=count or None, judge=choice,
                              turns=inputs.whole_number(turns, "Turns", minimum=1, maximum=2),
                              answer_tokens=inputs.whole_number(answer_tokens, "Answer tokens", minimum=1,
                                                                maximum=4096),
                              judge_tokens=inputs.whole_number(judge_tokens, "Verdict tokens", minimum=1,
                                                               maximum=4096))
    except InvalidInput as err:
        raise InvalidInput(inputs.without_folder(str(err), data_dir)) from None


class MtBenchHandlers:
    """The run, and the viewer of one question."""

    def __init__(self, context: Context, page):
        self.context, self.box = context, page.benchmarks.mt_bench

    @user_errors
    def run(self, session: Session, limit, turns, judge, remote_model, answer_tokens, judge_tokens,
            request: gr.Request = None, progress=gr.Progress()):
        """Every compared model answers, the judge grades; the table, the summary and the first question shown."""
        need_model(session)
        mt_request = check(self.context, limit, turns, judge, remote_model, answer_tokens, judge_tokens)
        variants = session.variants()
        found = self.context.backend.mt_bench.run(session.spec, variants, mt_request, progress=reporter(progress),
                                                  owner=owner(request))
        judged = Judged(found, model_names(variants))
        first = mt_request.questions[0].id
        box = self.box
        return {box.table: mt_bench_table(found.tally(), judged.titles), box.summary: words.mt_bench_summary(found),
                box.question: gr.update(choices=question_choices(found), value=first),
                **self.view(judged, first), box.shown: judged, **box.measured.fresh(session)}

    def view(self, judged: Judged | None, question) -> dict:
        """The question's turns, each column's answers and the judge's verdicts on them (unfilled columns hidden)."""
        box = self.box
        if judged is None:
            return {box.asked: "Run MT-Bench to see each column's answers and the judge's verdicts."}
        run = judged.run
        found = next((q for q in run.request.questions if q.id == _whole(question)), None)
        if found is None:
            return {box.asked: "Choose one of the questions answered."}
        shown = {box.asked: words.mt_bench_question(found, run.request.turns)}
        for label, column in box.columns.items():
            filled = label in run.answers
            shown[column.answer] = gr.update(
                value=words.mt_bench_answers(run.answers[label][found.id]) if filled else "",
                label=judged.titles.get(label, label), visible=filled)
            shown[column.verdict] = gr.update(value=words.mt_bench_verdicts(run, label, found.id) if filled else "",
                                              visible=filled)
        return shown

    @user_errors
    def question(self, judged: Judged | None, question):
        return self.view(judged, question)


def _whole(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def question_choices(run: MtBenchRun) -> list[tuple[str, int]]:
    """The questions answered: "81 · writing · Compose an engaging travel blog post…"."""
    return [(words.mt_bench_question_title(q), q.id) for q in run.request.questions]


def wire(page, handlers) -> dict:
    box = page.benchmarks.mt_bench
    run = box.button.click(gpu(handlers.mt_bench.run, handlers.durations.mt_bench), [page.session, *box.settings()],
                           box.outputs(), api_name="mt_bench", show_progress_on=[box.summary], **DEVICE)
    view = box.question.input(handlers.mt_bench.question, [box.shown, box.question], box.viewer(),
                              api_name="mt_bench_question", **LIGHT)
    return by_name(run, view)

