"""Exports as a visitor's job: a variant saved as a normal Hugging Face folder (see :mod:`evaluation.exports.folder`),
and, for the page, that folder zipped and offered for download, with what it holds and why a hand-off is missing.

A part of :class:`~evaluation.serving.backend.Backend`. The page never reads an export folder's layout: it gets an
:class:`Exported`, whose paths are the server's and are only ever handed to Gradio to serve, never shown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prune.core.calibration import Calibration
from prune.core.errors import InvalidInput
from prune.core.recipe import Recipe

from evaluation.core.jobs import Progress, building
from evaluation.core.pool import ModelSpec
from evaluation.exports import folder, scale_out
from evaluation.exports.texts import LLAMA_FILE, MERGEKIT_FILE, default_export_name
from evaluation.measure.measurement import Measurement
from evaluation.serving.downloads import Downloads
from evaluation.serving.models import Models


@dataclass(frozen=True)
class Exported:
    """A finished export as the page offers it."""

    archive: Path  # the folder as one zip (the server's path: handed to Gradio, never shown)
    size: int  # the zip's bytes
    gguf: Path | None  # the GGUF file in the folder, when one was asked for and written
    mergekit: bool  # mergekit's config is in it (a depth cut of layers only)
    llama_prune: bool  # llama.cpp's --prune-layers argument is in it
    llama_refused: str | None  # why the GGUF or llama.cpp's hand-off could not be written
    scale_out: str  # the commands that evaluate it on many GPUs (name the folder as unzipped, never the server's)
    offered: bool  # whether this server offers it for download (else it is too large here)


class Exports:
    """Saving a variant, and offering it for download."""

    def __init__(self, models: Models):
        self.models = models

    def write(self, spec: ModelSpec, recipe: Recipe, target: Path, *, scores: list[Measurement] | None = None,
              progress: Progress | None = None, owner: str | None = None, factored: bool = False,
              gguf: str | None = None, calibration: Calibration | None = None) -> Path:
        """Save what ``recipe`` derives as a normal Hugging Face folder with a model card at ``target``;
        ``factored`` keeps low-rank factors as they are (smaller; LayerCut loads them); ``gguf``: a GGUF type, to
        write the model as a GGUF file in the folder too (llama.cpp's types with an importance matrix from
        ``calibration``, default the server's)."""
        if recipe.is_original:
            raise InvalidInput("Choose a cut before exporting: there is no compressed model yet.")
        with self.models.jobs.run("the export", progress, owner=owner) as job:
            base = self.models.base(spec, job)
            job.update(0.0, "Saving the checkpoint…")
            model = self.models.variants.get(base, recipe, building(job, "the export"))
            return folder.export(model, base.tokenizer, recipe, base_name=base.info.name,
                                 num_layers=base.info.num_layers, target=target, scores=scores, factored=factored,
                                 gguf=gguf, tokenizer_gguf=getattr(base.model, "layercut_gguf", None),
                                 gguf_calibration=calibration or self.models.default_calibration,
                                 progress=job.update)

    def offer(self, spec: ModelSpec, recipe: Recipe, name: str, downloads: Downloads, *,
              scores: list[Measurement] | None = None, gguf: str | None = None, progress: Progress | None = None,
              owner: str | None = None) -> Exported:
        """Export ``recipe``'s model as ``name`` (empty: a name from the model and the recipe) into ``owner``'s
        downloads folder and zip it; older exports are tidied away. On a shared server an export too large to
        offer is removed and refused in one line."""
        name = folder.check_export_name(name.strip() or default_export_name(self.models.base(spec).info.name, recipe))
        path = self.write(spec, recipe, downloads.folder(owner) / name, scores=scores, progress=progress,
                          owner=owner, gguf=gguf)
        archive = folder.zipped(path)
        downloads.tidy(keep=path)
        size = archive.stat().st_size
        if not downloads.offered(size) and downloads.shared:  # nobody could ever fetch it
            folder.remove_export(path)
            raise InvalidInput(f"This export takes {size / 2**30:.2f} GiB: more than this server offers for "
                               "download. Export a smaller model, or run LayerCut on your own machine.")
        return Exported(archive, size, next(path.glob("*.gguf"), None), (path / MERGEKIT_FILE).exists(),
                        (path / LLAMA_FILE).exists(),
                        json.loads((path / folder.MARKER).read_text()).get("llama_cpp_refused"),
                        (path / scale_out.FILE).read_text(), downloads.offered(size))
