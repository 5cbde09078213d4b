"""A comparison to share: the model, A's and B's recipes and the results shown saved as a small JSON file, and such
a file opened again (its model loaded where this server allows it, the slots and the results as they were saved).
The file format is :mod:`evaluation.exports.comparison_file`; a token or trust in a model's code never travels with
it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from evaluation.serving import Comparison
from prune.core.errors import InvalidCut, InvalidInput, ModelNotFound
from prune.core.paths import write_atomic

from ui import inputs, slot_text, text
from ui.handlers import Context, need_model, owner, reporter, user_errors
from ui.page.events import DEVICE, LIGHT, by_name, gpu
from ui.session import SLOTS, Session

FILE_NAME = "layercut-comparison.json"


@dataclass
class ShareBox:
    save_btn: gr.Button
    saved: gr.File  # the JSON file to download
    upload: gr.File  # a saved comparison to open
    status: gr.Markdown

    @classmethod
    def layout(cls) -> ShareBox:
        with gr.Accordion("Share: save this comparison as a file, or open a saved one", open=False,
                          elem_id="share-box"):
            gr.Markdown(slot_text.SHARE_HELP)
            with gr.Row(equal_height=True):
                with gr.Column():
                    save_btn = gr.Button("Save this comparison (.json)", elem_id="share-save")
                    saved = gr.File(label="Saved comparison", elem_id="share-file", interactive=False)
                upload = gr.File(label="Open a saved comparison", file_types=[".json"], type="filepath",
                                 elem_id="share-open")
            status = gr.Markdown(elem_id="share-status")
        return cls(save_btn, saved, upload, status)


class ShareHandlers:
    """Save the visitor's comparison to a file; open one (the model loaded first when it is another)."""

    def __init__(self, context: Context, page, pick):
        self.context, self.pick = context, pick
        self.box, self.view, self.header, self.results = page.cut.share, page.view, page.header, page.benchmarks.results

    @user_errors
    def save(self, session: Session, request: gr.Request = None):
        """The comparison as a JSON file in the visitor's own downloads folder (named by its name only)."""
        need_model(session)
        if not session.variants():
            raise InvalidInput("Nothing to save yet: put a compressed model in A or B first.")
        comparison = Comparison(session.spec.name, session.spec.dtype, dict(zip(SLOTS, session.cuts)),
                                session.editing, session.results)
        saved = comparison.to_json()
        try:  # what cannot be opened again is not saved
            Comparison.from_json(saved, SLOTS)
        except InvalidInput as err:
            raise InvalidInput(f"This comparison cannot be saved to open again: {err}") from None
        path = self.context.downloads.folder(owner(request)) / FILE_NAME
        write_atomic(path, saved)
        return {self.box.saved: str(path), self.box.status: slot_text.comparison_saved(comparison)}

    @user_errors
    def open(self, session: Session, upload, token: str, trust_remote_code: bool, request: gr.Request = None,
             progress=gr.Progress()):
        """The saved comparison's model (loaded unless it is this one), slots and results; nothing changes when
        the file or its model cannot be used."""
        comparison = inputs.saved_comparison(upload)
        policy = self.context.policy
        spec = inputs.model_spec(comparison.model, token, trust_remote_code, comparison.dtype, policy)
        if session.spec == spec and session.info is not None and not session.loading:
            info, base = session.info, session  # the same model: its analysis stays
        else:
            try:
                info = self.context.backend.models.load(spec, progress=reporter(progress), owner=owner(request))
            except ModelNotFound:
                if policy.shared:  # the same words, folder or not
                    raise inputs.shared_not_found(spec.name) from None
                raise
            base = Session().for_model(spec, info)
        for slot, recipe in comparison.recipes.items():
            if recipe is not None and recipe.num_layers not in (None, info.num_layers):
                raise InvalidCut(f"{slot}'s recipe was made for a {recipe.num_layers}-layer model; {info.name} has "
                                 f"{info.num_layers} layers.")
            if recipe is not None:
                inputs.calibrated_steps(recipe, f"{slot}'s recipe", policy, self.context.default_calibration)
        opened = replace(base, cuts=tuple(comparison.recipes[slot] for slot in SLOTS), editing=comparison.editing,
                         results=comparison.results)
        return {**self.pick.model_shown(info, opened), self.header.model: gr.update(value=spec.name),
                self.header.analysis_md: text.analysis_status(opened.result) if opened.result else "",
                self.box.status: slot_text.comparison_opened(comparison), **self.results.show(opened)}


def wire(page, handlers) -> dict:
    box, header, cut = page.cut.share, page.header, page.cut
    share, durations = handlers.share, handlers.durations
    save = box.save_btn.click(share.save, [page.session], [box.saved, box.status], api_name="save_comparison",
                              **LIGHT)
    opened = box.upload.upload(
        gpu(share.open, durations.load), [page.session, box.upload, header.token, header.trust],
        [*page.view.outputs(), header.model, header.model_md, cut.block_size, cut.convention, header.analysis_md,
         box.status, *page.benchmarks.results.outputs(), page.generate.kind_note, page.generate.body],
        api_name="open_comparison", show_progress_on=[box.status],
        **DEVICE)
    return by_name(save, opened)
