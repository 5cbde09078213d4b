"""MT-Bench's judges: who the user named, an endpoint asked as FastChat asks GPT-4, a chat template without a
system role."""

import pytest

from evaluation.quality import chat
from evaluation.quality.judge import SELF_JUDGED, HttpJudge, JudgeChoice, choose, endpoint
from prune.core.errors import InvalidInput
from own_tasks import chat_tokenizer, scripted_judge

MESSAGES = [{"role": "system", "content": "Judge well."}, {"role": "user", "content": "Rate this."}]


@pytest.mark.parametrize("text, choice", [
    (None, JudgeChoice()), ("default", JudgeChoice()), ("  ", JudgeChoice()),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", JudgeChoice(model="HuggingFaceTB/SmolLM2-360M-Instruct")),
    ("http://127.0.0.1:8000/v1", JudgeChoice(url="http://127.0.0.1:8000/v1/chat/completions")),
    ("https://api.example.com/v1/chat/completions/", JudgeChoice(url="https://api.example.com/v1/chat/completions")),
])
def test_the_judge_is_who_the_user_named(text, choice):
    assert choose(text) == choice


def test_the_default_is_said_plainly():
    assert JudgeChoice().words() == SELF_JUDGED == "the original itself (self-judged)"
    assert choose("http://h:1/v1", remote_model="llama-3-70b").words() == "llama-3-70b at http://h:1/v1/chat/completions"


@pytest.mark.parametrize("url, message", [
    ("ftp://host/v1", "an http\\(s\\) URL"), ("http:///v1", "an http\\(s\\) URL"),
    ("https://user:secret@host/v1", "without a user, password or query"),
    ("https://host/v1?api-key=secret", "without a user, password or query"),
])
def test_bad_endpoints_are_one_line_and_never_echo_a_secret(url, message):
    with pytest.raises(InvalidInput, match=message) as caught:
        endpoint(url)
    assert "secret" not in str(caught.value)


def test_a_shared_server_calls_no_endpoint_unless_its_operator_allows_it(monkeypatch):
    monkeypatch.delenv("LAYERCUT_ALLOW_JUDGE_URL", raising=False)
    with pytest.raises(InvalidInput, match="LAYERCUT_ALLOW_JUDGE_URL=1"):
        choose("http://127.0.0.1:8000/v1", shared=True)
    assert choose("some/model", shared=True) == JudgeChoice(model="some/model")
    monkeypatch.setenv("LAYERCUT_ALLOW_JUDGE_URL", "1")
    assert choose("http://127.0.0.1:8000/v1", shared=True).url == "http://127.0.0.1:8000/v1/chat/completions"


def test_an_endpoint_gets_fastchats_request_and_the_key_as_a_bearer_token(monkeypatch):
    monkeypatch.setenv("LAYERCUT_JUDGE_API_KEY", "sk-abc")
    with scripted_judge() as (url, state):
        judge = HttpJudge(endpoint(url), "gpt-4", pause_s=0)
        state.fail_first = [503, 429]  # retried
        reply = judge([MESSAGES[0], {"role": "user", "content": "[The Start of Assistant A's Answer]\nlong\n"
                                                                "[The End of Assistant A's Answer]\n[The Start of "
                                                                "Assistant B's Answer]\nno\n[The End of Assistant "
                                                                "B's Answer]"}])
    assert reply == "Compared. [[A]]" and state.calls == 3
    body = state.requests[-1]["body"]
    assert body == {"model": "gpt-4", "messages": body["messages"], "n": 1, "temperature": 0, "max_tokens": 2048}
    assert state.requests[-1]["headers"]["Authorization"] == "Bearer sk-abc"
    assert "sk-abc" not in str(judge.identity)


def test_no_key_sends_no_authorization(monkeypatch):
    monkeypatch.delenv("LAYERCUT_JUDGE_API_KEY", raising=False)
    with scripted_judge() as (url, state):
        HttpJudge(endpoint(url), "m")([MESSAGES[0], {"role": "user", "content": "x"}])
    assert "Authorization" not in state.requests[0]["headers"]


def test_a_refusing_or_absent_endpoint_is_one_line_without_the_key(monkeypatch):
    monkeypatch.setenv("LAYERCUT_JUDGE_API_KEY", "sk-never-shown")
    with scripted_judge() as (url, state):
        state.fail_first = [401]
        with pytest.raises(InvalidInput, match="answered HTTP 401") as caught:
            HttpJudge(endpoint(url), "gpt-4", pause_s=0)(MESSAGES)
    assert state.calls == 1 and "sk-never-shown" not in str(caught.value)
    with pytest.raises(InvalidInput, match="did not answer"):
        HttpJudge(endpoint(url), "gpt-4", timeout_s=2, pause_s=0)(MESSAGES)  # the server is gone


def test_a_template_without_a_system_role_gets_it_in_the_first_user_message():
    tokenizer = chat_tokenizer()
    tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                               "{{ raise_exception('System role not supported') }}{% endif %}"
                               "<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}<|assistant|>")
    merged = [{"role": "user", "content": "[Instruction]\nJudge well.\n\nRate this."}]
    assert chat.chat_ids(tokenizer, MESSAGES) == chat.chat_ids(tokenizer, merged)
    helpful = [{"role": "system", "content": chat.DEFAULT_SYSTEM}, MESSAGES[1]]
    assert chat.chat_ids(tokenizer, helpful) == chat.chat_ids(tokenizer, [MESSAGES[1]])  # FastChat drops this one
