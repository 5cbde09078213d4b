"""A model's greedy reply to a conversation, through its chat template: MT-Bench's answers and a local judge's
verdicts.

As FastChat's ``gen_model_answer.py`` decodes: the new tokens without special tokens, stripped; it stops at the
model's end-of-turn tokens or after ``max_new_tokens``. FastChat samples some categories at a temperature; LayerCut
answers greedily, so an answer is a function of the model (and can be cached by its recipe).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prune.core.architectures import check_causal
from prune.core.errors import InvalidInput

from evaluation.measure.generation import TokenStream

DEFAULT_SYSTEM = "You are a helpful assistant."  # FastChat merges any other system prompt where none is taken


def chat_ids(tokenizer, messages: Sequence[dict]) -> list[int]:
    """The conversation's ids up to the assistant's turn; a template that takes no system message gets it inside
    the first user message, as FastChat gives it to a judge without one (``[Instruction]``)."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInput("MT-Bench talks to a chat model: this tokenizer has no chat template.")
    from jinja2.exceptions import TemplateError

    try:
        text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    except TemplateError:
        if not messages or messages[0]["role"] != "system":
            raise InvalidInput("This model's chat template refuses the conversation.") from None
        system, first, *rest = messages
        merged = first["content"] if system["content"] == DEFAULT_SYSTEM else \
            f"[Instruction]\n{system['content']}\n\n{first['content']}"
        return chat_ids(tokenizer, [{"role": first["role"], "content": merged}, *rest])
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def reply(model, tokenizer, messages: Sequence[dict], max_new_tokens: int,
          check: Callable[[], object] | None = None) -> str:
    """The greedy reply to ``messages``; ``check()`` between tokens (a job's safe point)."""
    check_causal(model, "MT-Bench")
    stream = TokenStream(model, tokenizer, chat_ids(tokenizer, messages), max_new_tokens=max_new_tokens,
                         temperature=0.0, top_p=1.0, seed=0)
    while not stream.done:
        if check is not None:
            check()
        stream.step()
    return stream.state()["text"].strip()


def conversation(turns: Sequence[str], answers: Sequence[str]) -> list[dict]:
    """The user's ``turns`` with the assistant's ``answers`` between them (one fewer answer: the next is asked)."""
    messages = []
    for i, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn})
        if i < len(answers):
            messages.append({"role": "assistant", "content": answers[i]})
    return messages
