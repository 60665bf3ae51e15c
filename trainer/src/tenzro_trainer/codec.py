"""Compressed outer gradients (docs/protocol/compression.md).

A run's spec may name a codec (``"compression": {"codec": "int4-block", "block": 64}``). The trainer
then sends, per fragment, the fragment's outer gradient — its tensors flattened and concatenated in
the fragment's tensor order, as f32 — encoded as a safetensors file with the codec's tensors. The
syncer decodes it with the codec's Wasm plugin; ``decode`` here is the reference decoder that the
cross-language vectors (``plugins/testdata/codec_vectors.json``) hold to the same bytes.

``topk`` and ``sign1`` keep an error-feedback residual per fragment (Karimireddy et al. 2019, "Error
Feedback Fixes SignSGD"): what the encoding dropped this round is added to the next round's outer
gradient. :class:`Compressor` persists the residuals next to the trainer's state file, so a restart
keeps them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

CODECS: dict[str, dict[str, float]] = {
    "int8-block": {"block": 64},
    "int4-block": {"block": 64},
    "topk": {"k": 0.01, "values": 0},
    "sign1": {"block": 64},
}
EF_CODECS = {"topk", "sign1"}
TOPK_VALUES = {0: torch.bfloat16, 1: torch.float16, 2: torch.int8}


class CodecError(ValueError):
    pass


@dataclass
class Codec:
    name: str
    params: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: dict) -> Codec | None:
        """The spec's ``compression`` field, with defaults filled; None when absent or "none"."""
        c = spec.get("compression")
        if not c:
            return None
        if not isinstance(c, dict) or not isinstance(c.get("codec"), str):
            raise CodecError(f"compression: want {{'codec': NAME, ...}}, got {c!r}")
        name = c["codec"]
        if name == "none":
            return None
        if name not in CODECS:
            raise CodecError(f"compression: codec {name!r} is not one this trainer encodes ({', '.join(CODECS)})")
        params = dict(CODECS[name])
        for k, v in c.items():
            if k == "codec":
                continue
            if k not in params or isinstance(v, bool) or not isinstance(v, int | float):
                raise CodecError(f"compression: {name} has no numeric parameter {k!r}")
            params[k] = v
        return cls(name, params)

    @property
    def error_feedback(self) -> bool:
        return self.name in EF_CODECS

    def topk_count(self, n: int) -> int:
        """k = max(1, min(N, floor(fraction·N))), the product in binary64 as the decoder computes it."""
        return max(1, min(n, math.floor(float(self.params["k"]) * n)))

    # ------------------------------------------------------------------ encoder (torch)
    def encode(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Encodes a 1-D f32 tensor. Rounding is round-to-nearest, ties to even (torch.round)."""
        x = x.detach().to("cpu", torch.float32).reshape(-1).contiguous()
        n = x.numel()
        if self.name in ("int8-block", "int4-block"):
            qmax = 127 if self.name == "int8-block" else 7
            xb, block = _blocks(x, int(self.params["block"]))
            scale = xb.abs().amax(dim=1) / qmax  # f32(absmax / qmax)
            safe = torch.where(scale > 0, scale, torch.ones_like(scale))
            q = torch.round(xb / safe[:, None]).clamp_(-qmax, qmax)
            q = torch.where((scale > 0)[:, None], q, torch.zeros_like(q)).reshape(-1)[:n].to(torch.int32)
            if self.name == "int8-block":
                return {"q": q.to(torch.int8).contiguous(), "scale": scale.contiguous()}
            nib = (q & 15).to(torch.uint8)
            if n % 2:
                nib = torch.cat([nib, torch.zeros(1, dtype=torch.uint8)])
            packed = nib[0::2] | (nib[1::2] << 4)
            return {"q": packed.contiguous(), "scale": scale.contiguous()}
        if self.name == "sign1":
            block = int(self.params["block"])
            nb = (n + block - 1) // block
            counts = torch.full((nb,), float(block))
            counts[-1] = n - (nb - 1) * block
            xb, _ = _blocks(x, block)
            scale = (xb.abs().sum(dim=1) / counts).to(torch.float32)  # mean |x| of the block
            neg = (x < 0).numpy().astype(np.uint8)
            bits = np.packbits(neg, bitorder="little")
            return {"bits": torch.from_numpy(bits.copy()), "scale": scale.contiguous()}
        if self.name == "topk":
            k = self.topk_count(n)
            idx = torch.topk(x.abs(), k, sorted=False).indices.sort().values
            vals = x[idx]
            vd = TOPK_VALUES[int(self.params["values"])]
            out = {"indices": idx.to(torch.int32).contiguous()}
            if vd == torch.int8:
                scale = vals.abs().amax() / 127
                safe = scale if scale > 0 else torch.tensor(1.0)
                q = torch.round(vals / safe).clamp_(-127, 127) if scale > 0 else torch.zeros_like(vals)
                out["values"] = q.to(torch.int8).contiguous()
                out["scale"] = scale.reshape(1).to(torch.float32).contiguous()
            else:
                if vd == torch.float16:
                    vals = vals.clamp(-65504.0, 65504.0)  # stay finite: the decoder refuses inf
                out["values"] = vals.to(vd).contiguous()
            return out
        raise CodecError(f"unknown codec {self.name}")

    # ------------------------------------------------------------------ reference decoder (numpy)
    def decode(self, n: int, tensors: dict[str, Any]) -> np.ndarray:
        """The reference decoder: N float32 values, bit-identical to the Wasm codec's output.
        Refuses what the Wasm codec refuses (CodecError)."""
        t = {k: _np(v) for k, v in tensors.items()}
        if self.name in ("int8-block", "int4-block", "sign1"):
            block = int(self.params["block"])
            nb = (n + block - 1) // block
            scale = _want(t, "scale", np.float32, nb)
            if np.signbit(scale).any() or not np.isfinite(scale).all():
                raise CodecError("a scale is NaN, infinite or negative")
            per = np.repeat(scale, block)[:n]
            if self.name == "int8-block":
                q = _want(t, "q", np.int8, n)
                if (q == -128).any():
                    raise CodecError("q holds -128")
                return q.astype(np.float32) * per
            if self.name == "int4-block":
                q = _want(t, "q", np.uint8, (n + 1) // 2)
                nib = np.stack([q & 15, q >> 4], axis=1).reshape(-1)
                if n % 2 and nib[n] != 0:
                    raise CodecError("the padding nibble is not 0")
                v = nib[:n].astype(np.int8)
                v = np.where(v >= 8, v - 16, v).astype(np.int8)
                if (v == -8).any():
                    raise CodecError("q holds -8")
                return v.astype(np.float32) * per
            bits = _want(t, "bits", np.uint8, (n + 7) // 8)
            sign = np.unpackbits(bits, bitorder="little")
            if sign[n:].any():
                raise CodecError("the padding bits are not 0")
            return np.where(sign[:n] == 1, -per, per).astype(np.float32)
        if self.name == "topk":
            k = self.topk_count(n)
            idx = _want(t, "indices", np.int32, k).astype(np.int64)
            if (idx < 0).any() or (idx >= n).any() or (np.diff(idx) <= 0).any():
                raise CodecError("indices out of range or not strictly increasing")
            vd = TOPK_VALUES[int(self.params["values"])]
            if vd == torch.int8:
                q = _want(t, "values", np.int8, k)
                s = _want(t, "scale", np.float32, 1)
                if np.signbit(s).any() or not np.isfinite(s).all() or (q == -128).any():
                    raise CodecError("bad int8 values or scale")
                v = q.astype(np.float32) * s[0]
            elif vd == torch.float16:
                v = _want(t, "values", np.float16, k).astype(np.float32)
            else:
                raw = _want(t, "values", "bf16", k)
                v = (raw.astype(np.uint32) << 16).view(np.float32)
            if not np.isfinite(v).all():
                raise CodecError("a value is NaN or infinite")
            out = np.zeros(n, dtype=np.float32)
            out[idx] = v
            return out
        raise CodecError(f"unknown codec {self.name}")


def _blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, int]:
    n = x.numel()
    nb = (n + block - 1) // block
    pad = nb * block - n
    if pad:
        x = torch.cat([x, torch.zeros(pad, dtype=x.dtype)])
    return x.view(nb, block), block


def _np(v: Any) -> tuple[str, np.ndarray]:
    if isinstance(v, torch.Tensor):
        if v.dtype == torch.bfloat16:
            return "bf16", v.view(torch.int16).numpy().view(np.uint16)
        return str(v.dtype), v.numpy()
    return str(v.dtype), np.asarray(v)


def _want(t: dict[str, tuple[str, np.ndarray]], name: str, dtype: Any, count: int) -> np.ndarray:
    if name not in t:
        raise CodecError(f"tensor {name} is missing")
    kind, a = t[name]
    if dtype == "bf16":
        if kind != "bf16":
            raise CodecError(f"tensor {name} is {kind}, want bf16")
    elif kind == "bf16" or a.dtype != np.dtype(dtype):
        raise CodecError(f"tensor {name} is {kind}, want {np.dtype(dtype)}")
    a = a.reshape(-1)
    if a.size != count:
        raise CodecError(f"tensor {name} has {a.size} values, want {count}")
    return a


def flatten(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], layout: list[dict]) -> torch.Tensor:
    """θ_before − θ_after of one fragment, f32, flattened and concatenated in the fragment's tensor
    order (the order of the run view's ``fragments[i].tensors``, which is the node's)."""
    parts = [
        (before[t["name"]].to(torch.float32) - after[t["name"]].detach().to("cpu", torch.float32)).reshape(-1)
        for t in layout
    ]
    return torch.cat(parts)


class Compressor:
    """Encodes a trainer's outer gradients with the run's codec, with error feedback for topk and
    sign1. ``path`` (a safetensors file) holds the residuals across restarts."""

    def __init__(self, codec: Codec, path: str | None = None) -> None:
        self.codec, self.path = codec, path
        self.residual: dict[int, torch.Tensor] = {}
        self.raw_bytes = 0
        self.sent_bytes = 0
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                saved = st_load(f.read())
            self.residual = {int(k.removeprefix("fragment")): v for k, v in saved.items()}

    def encode(self, index: int, x: torch.Tensor) -> bytes:
        x = x.to(torch.float32).reshape(-1)
        if self.codec.error_feedback:
            r = self.residual.get(index)
            if r is not None and r.numel() == x.numel():
                x = x + r
        enc = self.codec.encode(x)
        if self.codec.error_feedback:
            dec = torch.from_numpy(self.codec.decode(x.numel(), enc))
            self.residual[index] = (x - dec).contiguous()
        payload = st_save(enc)
        self.raw_bytes += 4 * x.numel()
        self.sent_bytes += len(payload)
        return payload

    def encode_fragment(self, index: int, before: dict, after: dict, layout: list[dict]) -> bytes:
        return self.encode(index, flatten(before, after, layout))

    def save(self) -> None:
        """Atomically writes the residuals (called before the round's payloads are submitted)."""
        if not self.path or not self.codec.error_feedback:
            return
        tmp = f"{self.path}.tmp"
        with open(tmp, "wb") as f:
            f.write(st_save({f"fragment{k}": v for k, v in sorted(self.residual.items())}))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


# ---------------------------------------------------------------------- cross-language vectors
VECTOR_CASES: list[tuple[str, dict[str, float], int, str]] = [
    ("int8-block", {"block": 64}, 300, "F32"),
    ("int4-block", {"block": 64}, 301, "F32"),
    ("int4-block", {"block": 7}, 130, "BF16"),
    ("sign1", {"block": 32}, 299, "F32"),
    ("topk", {"k": 0.05, "values": 0}, 400, "F32"),
    ("topk", {"k": 0.05, "values": 1}, 400, "F32"),
    ("topk", {"k": 0.1, "values": 2}, 257, "F32"),
]


def to_dtype_bytes(v: np.ndarray, dtype: str) -> bytes:
    """Decoded f32 values as the fragment's dtype: F32, or BF16 rounded to nearest even."""
    if dtype == "F32":
        return v.astype("<f4").tobytes()
    return torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def make_vectors() -> list[dict]:
    """Python encodings of seeded inputs (one block all zeros) with the reference decoding; the Go
    test plugins/codec_vectors_test.go decodes each payload with the Wasm codec and wants the same
    bytes. Regenerate with ``python -m tenzro_trainer.codec > plugins/testdata/codec_vectors.json``."""
    out = []
    for i, (name, params, n, dtype) in enumerate(VECTOR_CASES):
        x = np.random.default_rng(1000 + i).standard_normal(n).astype(np.float32) * np.float32(0.01)
        x[:7] = 0  # a zero scale in the first block of the small-block cases
        c = Codec(name, dict(CODECS[name], **params))
        enc = c.encode(torch.from_numpy(x))
        payload = st_save(enc)
        dec = c.decode(n, st_load(payload))
        out.append({"codec": name, "params": c.params, "dtype": dtype, "n": n, "payload": payload.hex(),
                    "decoded": to_dtype_bytes(dec, dtype).hex()})  # fmt: skip
    return out


if __name__ == "__main__":
    import json
    import sys

    json.dump({"comment": "tenzro_trainer.codec.make_vectors(); see docs/protocol/compression.md",
               "vectors": make_vectors()}, sys.stdout, indent=1)  # fmt: skip
    sys.stdout.write("\n")
