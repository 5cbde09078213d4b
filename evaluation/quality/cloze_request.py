"""A cloze question as scorer requests: the request kind, and a question's text split around its blank."""

from __future__ import annotations

from evaluation.quality import cbt_style

REQUEST = "cloze"  # the request kind, and the name of the scorer method that answers it


def parts(doc: dict, option: str) -> tuple[str, str, str]:
    """(left, candidate, right): the 20 sentences and the query around its blank, ``option`` in it."""
    before, _, after = doc["question"].partition(cbt_style.BLANK)
    return " ".join([*doc["sentences"], before]), option, after
