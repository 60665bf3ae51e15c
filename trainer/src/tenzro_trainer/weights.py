"""Model weights ⇄ node fragments (safetensors), and outer gradients θ_before − θ_after."""

from __future__ import annotations

import json
import struct

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

DTYPES = {
    "f32": torch.float32, "float32": torch.float32, "fp32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "f16": torch.float16, "float16": torch.float16, "fp16": torch.float16,
    "f64": torch.float64, "float64": torch.float64,
}  # fmt: skip
MAX_HEADER = 100 << 20

# Payload binding (docs/protocol/safetensors.md §6) lives in .binding (no torch); re-exported here.
from .binding import BINDING_KEYS, bind, binding_metadata, canonical_safetensors  # noqa: E402,F401


class FragmentError(Exception):
    pass


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name.lower()]
    except KeyError:
        raise FragmentError(f"dtype {name!r} unknown (have F32, BF16, F16, F64)") from None


def parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    return dict(model.named_parameters())


def model_to_safetensors(model: nn.Module, dtype: str = "f32") -> bytes:
    """All parameters as one safetensors file (what ``post-task --init-weights`` takes)."""
    dt = torch_dtype(dtype)
    return st_save({n: p.detach().to("cpu", dt).contiguous() for n, p in model.named_parameters()})


def header(payload: bytes) -> dict:
    if len(payload) < 8:
        raise FragmentError("safetensors: shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", payload[:8])
    if n > MAX_HEADER or 8 + n > len(payload):
        raise FragmentError(f"safetensors: header length {n} out of range")
    return json.loads(payload[8 : 8 + n])


def check_layout(tensors: dict[str, torch.Tensor], layout: list[dict], what: str) -> None:
    """``layout`` is RunView.fragments[i].tensors: [{name, dtype, shape}]."""
    want = {t["name"]: t for t in layout}
    if set(tensors) != set(want):
        missing, extra = sorted(set(want) - set(tensors)), sorted(set(tensors) - set(want))
        raise FragmentError(f"{what}: tensors differ from the fragment (missing {missing}, extra {extra})")
    for name, t in tensors.items():
        w = want[name]
        if t.dtype != torch_dtype(w["dtype"]) or list(t.shape) != list(w["shape"]):
            raise FragmentError(f"{what}: {name} is {t.dtype} {list(t.shape)}, fragment says {w['dtype']} {w['shape']}")


def load_fragment(payload: bytes, layout: list[dict], what: str = "weights") -> dict[str, torch.Tensor]:
    try:
        t = st_load(payload)
    except Exception as e:  # safetensors raises its own SafetensorError
        raise FragmentError(f"{what}: not a safetensors file: {e}") from e
    check_layout(t, layout, what)
    return t


def outer_gradient(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], layout: list[dict]) -> bytes:
    """θ_before − θ_after for one fragment, as safetensors with the fragment's exact names, dtype and
    shapes (the sign the syncer's Nesterov outer step expects: θ ← θ − lr·(g + μ·buf))."""
    return save_tensors(
        {t["name"]: before[t["name"]].to(torch.float32) - after[t["name"]].detach().to("cpu", torch.float32)
         for t in layout},
        layout,
    )  # fmt: skip


def save_tensors(values: dict[str, torch.Tensor], layout: list[dict]) -> bytes:
    """The f32 tensors of one fragment (an outer gradient) as safetensors in the fragment's names and dtypes."""
    return st_save({t["name"]: values[t["name"]].to(torch_dtype(t["dtype"])).contiguous() for t in layout})


def assign(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    params = parameters(model)
    unknown = sorted(set(tensors) - set(params))
    if unknown:
        raise FragmentError(f"weights name tensors the model lacks: {unknown[:5]}")
    with torch.no_grad():
        for name, t in tensors.items():
            p = params[name]
            if tuple(p.shape) != tuple(t.shape):
                raise FragmentError(f"{name}: model shape {tuple(p.shape)}, weights {tuple(t.shape)}")
            p.copy_(t.to(p.dtype))
