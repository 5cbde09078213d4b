"""Results that name the models they measured and say when those have changed since.

Each result area (speed, memory, generation) has a note and a ``gr.State`` of what it measured: the model and
the (A, B) recipes of the moment. Its job writes both; after every change of a slot or of the model the page
compares them with the session, and the note turns into an "out of date" warning that names what changed. The
states are written by their own job only, so a job finishing late never overwrites a newer cut.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ui import slot_text
from ui.session import Session


@dataclass
class Measured:
    """A result area's note and what its numbers are for."""

    note: gr.Markdown
    measured: gr.State  # (model name, (A, B) recipes) when last measured; None before

    @classmethod
    def layout(cls, elem_id: str) -> Measured:
        return cls(gr.Markdown(elem_id=elem_id, elem_classes=["lc-measured"]), gr.State(None))

    def outputs(self) -> list:
        return [self.note, self.measured]

    def fresh(self, session: Session) -> dict:
        """The note and state of numbers just measured on ``session``'s models."""
        what = slot_text.measured_what(session)
        return {self.note: slot_text.measured_note(what, what), self.measured: what}


def notes(session: Session, *measured) -> list[str]:
    """Each area's note against the session, from what it measured (None: nothing yet), in the areas' order."""
    now = slot_text.measured_what(session)
    return [slot_text.measured_note(then, now) if then else "" for then in measured]


def wire(events: list, session: gr.State, areas: list[Measured]) -> None:
    """After each of ``events`` (a change of a slot or of the model), every area's note rechecked."""
    inputs, outputs = [session, *(a.measured for a in areas)], [a.note for a in areas]
    for i, event in enumerate(events):
        event.success(notes, inputs, outputs, api_name=f"stale_check_{i}", queue=False, show_progress="hidden")
