"""Device, dtype and memory facts, so loading and measuring decide the same way."""

from __future__ import annotations

import psutil
import torch


def cpu_bfloat16_native() -> bool:
    """Whether oneDNN multiplies bfloat16 natively on this CPU (AVX512-BF16, AMX); a torch built without oneDNN: no."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> torch.dtype:
    """fp32 on CPU; bf16 on CUDA where supported, else fp16."""
    if str(device).startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def parse_dtype(name: str | torch.dtype | None, device: str) -> torch.dtype:
    """'auto'/None → the device default; else a torch dtype by name ('bfloat16', 'fp16', ...)."""
    if isinstance(name, torch.dtype):
        return name
    if name in (None, "", "auto"):
        return default_dtype(device)
    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16"}
    dtype = getattr(torch, aliases.get(name, name), None)
    if not isinstance(dtype, torch.dtype):
        from prune.core.errors import InvalidInput, quoted

        raise InvalidInput(f"Unknown dtype {quoted(name)}. Use auto, float32, bfloat16 or float16.")
    return dtype


def available_memory_bytes(device: str) -> int:
    """Memory a new model may use: free RAM on CPU; free RAM plus free VRAM on CUDA (offload)."""
    free = psutil.virtual_memory().available
    if str(device).startswith("cuda"):
        free += sum(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count()))
    return int(free)


def free_on(device: torch.device) -> int:
    """Bytes free for new tensors on ``device`` itself: its free VRAM on CUDA, the free RAM on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device.index or 0)[0])
    return int(psutil.virtual_memory().available)


def input_device(model) -> torch.device:
    """Where ``model`` takes its inputs: its parameters' device, or, for a model accelerate spread over devices or
    offloaded (``hf_device_map``), the first device it computes on (an offloaded tensor sits on ``meta``); for one
    with every weight offloaded (a variant read from its files), the device its hooks compute on."""
    places = list((getattr(model, "hf_device_map", None) or {}).values())
    if not places:
        return next(model.parameters()).device
    computing = [p for p in places if p not in ("cpu", "disk")]
    if computing:
        return torch.device(computing[0])
    for module in model.modules():  # all offloaded: where accelerate's hooks bring the weights to compute
        for one in accelerate_hooks(module):
            if getattr(one, "execution_device", None) is not None:
                return torch.device(one.execution_device)
    return torch.device("cpu")


def accelerate_hooks(module) -> tuple:
    """The hooks accelerate attached to ``module`` (each of a sequence of them); none if it has none."""
    hook = getattr(module, "_hf_hook", None)
    return () if hook is None else tuple(getattr(hook, "hooks", None) or (hook,))
