"""Test helpers for the tasks beside lm-eval's: a scripted OpenAI-compatible judge on loopback (stdlib http.server
in a thread), a tiny chat model folder, and a C4-format shard.

The judge is consistent and reads only the answers in its prompt, so every verdict is known by hand:
- single grading: "Rating: [[n]]" with n = 1 + (characters of the graded answer) mod 10, but no rating at all
  when that length is a multiple of 3 (an unparsable verdict);
- pairwise: "[[A]]" when assistant A's answer is the longer, "[[B]]" when B's, "[[C]]" when they are as long.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

from conftest import CHAT_TEMPLATE, build_tiny_tokenizer, tiny_model

SINGLE = re.compile(r"\[The Start of Assistant's Answer\]\n(.*)\n\[The End of Assistant's Answer\]", re.S)
SINGLE_2 = re.compile(r"### Assistant A:\n(.*)\n\n<\|The End of Assistant A's Conversation", re.S)
PAIR = {side: re.compile(rf"\[The Start of Assistant {side}'s Answer\]\n(.*)\n\[The End of Assistant {side}'s Answer\]",
                         re.S) for side in "AB"}


def rating(answer: str) -> str:
    """The scripted single verdict on ``answer``."""
    return "No rating, sorry." if len(answer) % 3 == 0 else f"Fine. Rating: [[{1 + len(answer) % 10}]]"


def score(answer: str) -> float | None:
    return None if len(answer) % 3 == 0 else float(1 + len(answer) % 10)


def preferred(a: str, b: str) -> str:
    return "[[A]]" if len(a) > len(b) else "[[B]]" if len(b) > len(a) else "[[C]]"


def verdict(messages: list[dict]) -> str:
    user = messages[-1]["content"]
    if "[The Start of Assistant A's Answer]" in user:
        return "Compared. " + preferred(PAIR["A"].search(user).group(1), PAIR["B"].search(user).group(1))
    found = SINGLE.search(user) or SINGLE_2.search(user)
    return "What is asked?" if found is None else rating(found.group(1).split("### Assistant A:\n")[-1])


class Judge:
    """The server's state: the requests it saw (headers and bodies) and statuses to answer first."""

    def __init__(self):
        self.requests: list[dict] = []
        self.fail_first: list[int] = []  # HTTP statuses returned before any verdict, one per request

    @property
    def calls(self) -> int:
        return len(self.requests)


@contextmanager
def scripted_judge():
    """(the endpoint's base URL, its :class:`Judge` state) while the server runs on 127.0.0.1."""
    state = Judge()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            if state.fail_first:
                self.send_error(state.fail_first.pop(0))
                return
            reply = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant",
                                                                     "content": verdict(body["messages"])}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(reply.encode())

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", state
    finally:
        server.shutdown()
        server.server_close()


def chat_tokenizer():
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def chat_folder(path, layers: int = 4, seed: int = 0) -> str:
    """A tiny Llama with a chat template saved as a Hugging Face folder."""
    model, tokenizer = tiny_model("llama", layers, seed), chat_tokenizer()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def greedy_by_hand(model, tokenizer, messages: list[dict], max_new_tokens: int) -> str:
    """The reply by plain full forward passes (no cache): argmax until the end-of-text token or the cap."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    new = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            token = int(model(torch.tensor([ids + new])).logits[0, -1].argmax())
            if token == tokenizer.eos_token_id:
                break
            new.append(token)
    return tokenizer.decode(new, skip_special_tokens=True).strip()


def write_shard(path, texts):
    """A C4-format shard (gzipped JSON lines with ``text``, ``timestamp``, ``url``) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z", "url": f"https://x/{i}"}) + "\n")
    return path
