"""What Build, Heal, the rank search and the patch will write, said on their buttons before they run: the slot each
writes and what that slot holds now. Redrawn after every change of the slots (and of Build's "after the cut" box)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from ui import slot_text
from ui.session import Session


@dataclass
class SlotTargets:
    """The buttons that write a slot (laid out in their own parts), labelled with the slot they write."""

    build: gr.Button
    heal: gr.Button
    search: gr.Button
    patch: gr.Button

    def outputs(self) -> list:
        return [self.build, self.heal, self.search, self.patch]

    def show(self, session: Session, stack: bool = False) -> dict:
        """Each button's label for ``session``; ``stack``: Build adds its step after the edited slot's model."""
        return {self.build: gr.update(value=slot_text.build_label(session, stack)),
                self.heal: gr.update(value=slot_text.heal_label(session)),
                self.search: gr.update(value=slot_text.search_label(session)),
                self.patch: gr.update(value=slot_text.patch_label(session))}
