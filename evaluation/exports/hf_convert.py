"""llama.cpp's own converter (``convert_hf_to_gguf.py``) for the architectures LayerCut's GGUF writer does not write:
mixtures of experts (expert tensors as llama.cpp's ``ffn_*_exps``), hybrids, vision-language checkpoints' text
decoders — every architecture the llama.cpp that LayerCut's engine runs knows.

The converter is the one vendored in the installed llama-cpp-python's source release (the same llama.cpp as the
binding and its quantizer): ``setup.sh`` unpacks ``convert_hf_to_gguf.py``, its ``conversion/`` package and the
``gguf-py`` it reads (newer than the ``gguf`` wheel of the same number) into
``<venv>/share/layercut/llama-convert/<version>/``. A model is saved as a float
transformers folder (a quantized column dequantized: the converter reads float checkpoints) beside the target and
converted in a child process to F16, BF16 or Q8_0 (the types the converter writes; llama.cpp's quantizer makes the
others from its F16). Where the converter cannot convert a model (a tokenizer whose pre-tokenizer it does not know, a
layout its class asserts against) its last error line is the one line shown.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from prune.core.errors import InvalidInput, MissingDependency
from prune.core.storage import dense, is_quantized

from evaluation.core.jobs import Progress

CONVERTER_TYPES = {"F16": "f16", "BF16": "bf16", "Q8_0": "q8_0"}  # the GGUF types the converter writes itself
# Layer kinds this converter reads in the words of transformers 4's configs, which transformers 5 renamed: by type,
# transformers 5's name → the converter's (Granite 4 hybrids: otherwise every layer is taken for a state space)
CONVERTER_LAYER_TYPES = {"granitemoehybrid": {"linear_attention": "mamba", "full_attention": "attention"}}
TIMEOUT_S = 3600
_PATH = re.compile(r"/[^\s'\":,()]+")


def home() -> Path | None:
    """Where ``setup.sh`` put the installed llama-cpp-python's converter, or None (no binding, or not unpacked)."""
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        return None
    found = Path(sys.prefix) / "share" / "layercut" / "llama-convert" / version
    return found if (found / "convert_hf_to_gguf.py").is_file() else None


def why_not() -> str | None:
    """None where the converter is here, else one line on how to get it."""
    if home() is None:
        return ("llama.cpp's converter (convert_hf_to_gguf.py) is not installed here: `bash setup.sh` unpacks it from "
                "llama-cpp-python's source.")
    return None


def refusal(model) -> str | None:
    """Why the converter cannot take ``model`` as it is held (one line), or None: it reads a checkpoint from memory."""
    if any(p.device.type == "meta" for p in model.parameters()):
        return ("This model is read from disk layer by layer (over the memory budget): export the folder and run "
                "llama.cpp's convert_hf_to_gguf.py on it.")
    if any(type(module).__name__ in ("DroppedBlock", "Factored") for module in model.modules()):
        return "llama.cpp's converter reads standard layers: dropped blocks and low-rank factors have no GGUF form."
    return why_not()


def convert(model, tokenizer, path: Path, file_type: str, progress: Progress | None = None) -> Path:
    """``model`` (with ``tokenizer``) as the GGUF ``path`` of ``file_type`` (one of :data:`CONVERTER_TYPES`), written by
    llama.cpp's converter in a child process; a one-line error where it cannot."""
    if file_type not in CONVERTER_TYPES:
        raise InvalidInput(f"llama.cpp's converter writes {', '.join(CONVERTER_TYPES)}, not {file_type}.")
    if (why := refusal(model)) is not None:
        raise (MissingDependency if why == why_not() else InvalidInput)(why)
    path = Path(path)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as folder:
        if progress is not None:
            progress(0.0, "Saving the model for llama.cpp's converter…")
        _float_folder(model, tokenizer, Path(folder))
        if progress is not None:
            progress(0.3, f"llama.cpp's converter: writing {file_type}…")
        tmp, log = Path(folder) / "model.gguf", Path(folder) / "converter.log"
        code = _run([sys.executable, str(home() / "convert_hf_to_gguf.py"), folder, "--outfile", str(tmp),
                     "--outtype", CONVERTER_TYPES[file_type]], log, progress, file_type)
        if code != 0 or not tmp.is_file():
            raise InvalidInput(f"llama.cpp's converter cannot convert this model: {_last_line(log.read_text())}")
        tmp.replace(path)
    return path


def _run(command: list[str], log: Path, progress: Progress | None, file_type: str) -> int:
    """The converter's exit code; its log in ``log``. ``progress`` is heard every second while it runs, and may
    raise (a Stop): the child is then killed."""
    with open(log, "w") as sink:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink, cwd=home())
        try:
            for waited in range(TIMEOUT_S):
                try:
                    return child.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    if progress is not None:
                        progress(min(0.95, 0.3 + waited / 600), f"llama.cpp's converter: writing {file_type}…")
            raise InvalidInput(f"llama.cpp's converter took more than {TIMEOUT_S // 60} minutes: stopped.")
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()


def _float_folder(model, tokenizer, folder: Path) -> None:
    """``model`` saved as a float transformers checkpoint (quantized weights dequantized, no quantization config),
    with ``tokenizer``; its config.json in the words this converter reads."""
    state = {name: dense(t).detach() if is_quantized(t) else t for name, t in model.state_dict().items()}
    quantizer, model.hf_quantizer = getattr(model, "hf_quantizer", None), None
    try:
        model.save_pretrained(folder, state_dict=state)
    finally:
        model.hf_quantizer = quantizer
    tokenizer.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    for field in ("quantization_config", "layercut_quantized"):
        config.pop(field, None)
    if (names := CONVERTER_LAYER_TYPES.get(config.get("model_type"))) and config.get("layer_types"):
        config["layer_types"] = [names.get(kind, kind) for kind in config["layer_types"]]
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def _last_line(stderr: str) -> str:
    """The converter's last error line (a Python exception's, or its own message), a path in it cut to its last part
    (a shared server's visitors learn no server path)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip().strip("^~")]  # no caret markers
    found = lines[-1] if lines else "it stopped without a message"
    if found == "AssertionError" and len(lines) > 1:  # a bare assertion: the statement says what it checked
        found = f"{found} ({lines[-2]})"
    return _PATH.sub(lambda path: Path(path[0]).name, found)[:300]
