"""MT-Bench's judges: a model LayerCut loads (by default the original itself: self-judged), or an
OpenAI-compatible chat endpoint.

FastChat asks GPT-4 at temperature 0 with ``max_tokens`` 2048; an endpoint is asked the same (the cap from
:data:`~evaluation.core.settings.MT_BENCH`), a local judge answers greedily up to its own cap. The endpoint's key is
read from the environment (``LAYERCUT_JUDGE_API_KEY``) at each request and sent as a Bearer token only: it is in no
cache key, result, message or log. A URL with a user, password or query is refused (the key goes in the
environment). A shared server calls no endpoint unless its operator allows it (``LAYERCUT_ALLOW_JUDGE_URL=1``).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from prune.core.errors import InvalidInput, quoted

from evaluation.quality import chat
from evaluation.core.settings import MT_BENCH

DEFAULT = "default"
SELF_JUDGED = "the original itself (self-judged)"
ENDPOINT_PATH = "/chat/completions"
_RETRIED = (429, 500, 502, 503, 504)  # statuses worth another try
TRIES = 3


@dataclass(frozen=True)
class JudgeChoice:
    """Who judges, as the user named it: a model to load, an endpoint, or (neither) the original itself."""

    model: str | None = None
    url: str | None = None  # the chat completions endpoint
    remote_model: str = MT_BENCH.remote_model

    @property
    def self_judged(self) -> bool:
        """The original judges (neither another model nor an endpoint named)."""
        return self.model is None and self.url is None

    def words(self) -> str:
        if self.url is not None:
            return f"{self.remote_model} at {self.url}"
        return SELF_JUDGED if self.model is None else self.model

    def to_json(self) -> dict:
        return {"judge": self.words(), "model": self.model, "url": self.url,
                "remote_model": self.remote_model if self.url else None}


def choose(text: str | None, *, remote_model: str = MT_BENCH.remote_model, shared: bool = False) -> JudgeChoice:
    """The judge ``text`` names (None or "default": the original), checked once here."""
    if not names_a_judge(text):
        return JudgeChoice()
    text = text.strip()
    if "://" not in text:
        return JudgeChoice(model=text)
    if not urls_allowed(shared):
        raise InvalidInput(f"This shared server calls no judge endpoint (its operator can allow it with "
                           f"{MT_BENCH.allow_url_env}=1): choose a model to judge.")
    if not remote_model.strip():
        raise InvalidInput("Name the model the judge endpoint serves (--judge_model).")
    return JudgeChoice(url=endpoint(text), remote_model=remote_model.strip())


def names_a_judge(text: str | None) -> bool:
    """Whether ``text`` names a judge other than the original (empty and "default" name none)."""
    return (text or "").strip() not in ("", DEFAULT)


def urls_allowed(shared: bool) -> bool:
    """Whether a judge endpoint may be called here: always on one's own machine, on a shared server when its
    operator allows it."""
    return not shared or os.environ.get(MT_BENCH.allow_url_env, "") not in ("", "0")


def endpoint(url: str) -> str:
    """``…/chat/completions`` of an OpenAI-compatible base URL (``http://host:8000/v1``) or that URL itself."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"A judge endpoint is an http(s) URL, not {quoted(url)}.")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise InvalidInput(f"Give the judge endpoint without a user, password or query; its key goes in "
                           f"{MT_BENCH.key_env}.")
    path = parts.path.rstrip("/")
    path = path if path.endswith(ENDPOINT_PATH) else path + ENDPOINT_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class LocalJudge:
    """A loaded model judging greedily through its chat template."""

    def __init__(self, model, tokenizer, identity: dict, max_new_tokens: int = MT_BENCH.judge_tokens,
                 check: Callable[[], object] | None = None):
        self.model, self.tokenizer, self.check = model, tokenizer, check
        self.max_new_tokens = max_new_tokens
        self.identity = {**identity, "max_new_tokens": max_new_tokens, "greedy": True}

    def __call__(self, messages: list[dict]) -> str:
        return chat.reply(self.model, self.tokenizer, messages, self.max_new_tokens, self.check)


class HttpJudge:
    """An OpenAI-compatible chat completions endpoint, asked as FastChat asks GPT-4."""

    def __init__(self, url: str, model: str, max_tokens: int = MT_BENCH.remote_tokens,
                 timeout_s: float = MT_BENCH.timeout_s, pause_s: float = 2.0):
        self.url, self.model, self.max_tokens = url, model, max_tokens
        self.timeout_s, self.pause_s = timeout_s, pause_s
        self.identity = {"url": url, "model": model, "temperature": 0, "max_tokens": max_tokens}  # never the key

    def __call__(self, messages: list[dict]) -> str:
        body = json.dumps({"model": self.model, "messages": messages, "n": 1, "temperature": 0,
                           "max_tokens": self.max_tokens}).encode()
        for attempt in range(TRIES):
            try:
                with urllib.request.urlopen(self._request(body), timeout=self.timeout_s) as response:
                    data = json.loads(response.read())
                return _content(data, self.url)
            except urllib.error.HTTPError as err:
                if err.code not in _RETRIED or attempt == TRIES - 1:
                    raise InvalidInput(f"The judge at {self.url} answered HTTP {err.code} ({err.reason}).") from None
            except (urllib.error.URLError, OSError, ValueError) as err:
                if attempt == TRIES - 1:
                    reason = getattr(err, "reason", None) or type(err).__name__
                    raise InvalidInput(f"The judge at {self.url} did not answer ({reason}).") from None
            time.sleep(self.pause_s * (attempt + 1))
        raise AssertionError("unreachable")

    def _request(self, body: bytes) -> urllib.request.Request:
        headers = {"Content-Type": "application/json"}
        if key := os.environ.get(MT_BENCH.key_env, "").strip():  # read now; kept nowhere
            headers["Authorization"] = f"Bearer {key}"
        return urllib.request.Request(self.url, data=body, headers=headers, method="POST")


def _content(data, url: str) -> str:
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise InvalidInput(f"The judge at {url} did not answer in the chat completions layout.") from None
    return content if isinstance(content, str) else ""
