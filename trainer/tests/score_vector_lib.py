"""The shared part of the score evaluators' reference vector scripts (score_vectors.py: TimesFM-class,
granite_score_vectors.py: Granite-TTM, chronos_score_vectors.py: Chronos-Bolt).

One case is a randomly initialized model built by the trainer's own code, a random outer gradient for one
fragment (1% of each tensor's RMS, random directions) and batches of raw series windows; PyTorch computes the
model's training loss (``model.loss``) of every batch before and after the gradient is applied as the outer
step's first step (Nesterov, empty momentum: w − lr·(g + β·g); BF16 weights round to BF16), in float64 and in
float32, on windows normalized by the trainer's loader (data._normalize). A case directory of OUT holds
model.safetensors, grad.safetensors, windows.f32 and case.json; plugins/score_test.go runs the Wasm evaluators
on them, and the test_*score_reference.py tests check that the files are what this PyTorch computes.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save as st_save

from tenzro_trainer import data

OUT = Path(__file__).resolve().parents[2] / "plugins" / "testdata" / "score"
LR, BETA, BATCHES, BATCH_SIZE = 0.7, 0.9, 2, 4


def windows(rng: np.random.Generator, context_len: int, horizon: int, n: int) -> np.ndarray:
    """Raw series windows (f32): a level, a trend, a seasonal term and noise, so normalization matters."""
    w = context_len + horizon
    t = np.arange(w, dtype=np.float64)
    out = np.empty((n, w), np.float32)
    for i in range(n):
        level, trend = rng.uniform(-50, 300), rng.uniform(-0.5, 0.5)
        amp, period = rng.uniform(0.5, 20), rng.uniform(4, 24)
        out[i] = (level + trend * t + amp * np.sin(2 * np.pi * t / period) + rng.normal(0, 1, w)).astype(np.float32)
    return out


def batch_losses(model: Any, context_len: int, raw: np.ndarray, dtype: torch.dtype) -> list[float]:
    """model.loss of every batch of the raw windows, normalized as the trainer's loader does."""
    c = context_len
    x, y = data._normalize(raw[:, :c].astype(np.float64), raw[:, c:].astype(np.float64))
    out = []
    with torch.no_grad():
        for b in range(BATCHES):
            sl = slice(b * BATCH_SIZE, (b + 1) * BATCH_SIZE)
            out.append(float(model.loss(torch.from_numpy(x[sl]).to(dtype), torch.from_numpy(y[sl]).to(dtype))))
    return out


def build_case(
    name: str,
    make_model: Callable[[], torch.nn.Module],
    config: dict,
    evaluator: str | None,
    dtype: str,
    prefix: str,
    seed: int,
) -> dict:
    """One case: {"case": case.json's object, "files": {file name: bytes}}. make_model builds a fresh model of
    the case's configuration (config: the case's "config", with context_len and horizon); evaluator None leaves
    "evaluator" out of case.json (TimesFMScore, the default); the fragment is the sorted tensors whose name
    starts with prefix."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = make_model().eval()
    st = torch.bfloat16 if dtype == "BF16" else torch.float32
    weights = {n: p.detach().to(st).contiguous() for n, p in sorted(model.named_parameters())}
    frag = [n for n in weights if n.startswith(prefix)]
    # a gradient the size of a real outer gradient: 1% of each tensor's RMS, as random directions
    grad = {}
    for n in frag:
        w = weights[n].float()
        rms = float(w.pow(2).mean().sqrt()) or 1.0
        grad[n] = (
            torch.randn(w.shape, generator=torch.Generator().manual_seed(seed * 1000 + len(grad))) * 0.01 * rms
        ).to(st)
    context_len = config["context_len"]
    raw = windows(rng, context_len, config["horizon"], BATCHES * BATCH_SIZE)
    res: dict = {"name": name, "config": config, "dtype": dtype, "fragment": frag, "lr": LR, "beta": BETA,
                 "nesterov": True, "batches": BATCHES, "batch_size": BATCH_SIZE}  # fmt: skip
    if evaluator is not None:
        res["evaluator"] = evaluator
    for label, tdt in (("f64", torch.float64), ("f32", torch.float32)):
        m = make_model().eval().to(tdt)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(weights[n].to(tdt))
        before = batch_losses(m, context_len, raw, tdt)
        with torch.no_grad():
            params = dict(m.named_parameters())
            for n in frag:
                # the outer step's first step: buf = g; d = g + β·g; w = w − lr·d (BF16 weights round to BF16)
                g = grad[n].to(torch.float64)
                params[n].copy_((weights[n].to(torch.float64) - LR * (g + BETA * g)).to(st).to(tdt))
        res[f"torch_{label}"] = {"before": before, "after": batch_losses(m, context_len, raw, tdt)}
    files = {
        "model.safetensors": st_save(weights),
        "grad.safetensors": st_save(grad),
        "windows.f32": raw.astype("<f4").tobytes(),
    }
    return {"case": res, "files": files}


def out_dir() -> Path:
    """Where a script writes: its first argument, else OUT (plugins/testdata/score)."""
    return Path(sys.argv[1]) if len(sys.argv) > 1 else OUT


def write_case(out: Path, built: dict) -> None:
    """Writes one build_case result into out/<name>/ and prints its float64 losses."""
    name = built["case"]["name"]
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    for fn, blob in built["files"].items():
        (d / fn).write_bytes(blob)
    (d / "case.json").write_text(json.dumps(built["case"], indent=1, sort_keys=True) + "\n")
    t = built["case"]["torch_f64"]
    print(name, "before", t["before"], "after", t["after"],
          "Δ", [a - c for a, c in zip(t["before"], t["after"], strict=True)])  # fmt: skip
    assert all(math.isfinite(v) for v in t["before"] + t["after"])


def check_stored(fresh: dict, script: str, evaluator: str | None) -> None:
    """Asserts that OUT's case of fresh's name (a build_case result) is what fresh holds: every file byte for
    byte, the evaluator (None: absent, TimesFMScore) and config equal, the losses within 1e-12 (float64) and
    1e-6 (float32) relative (PyTorch's own run-to-run latitude). script names the builder in the message."""
    name = fresh["case"]["name"]
    d = OUT / name
    stored = json.loads((d / "case.json").read_text())
    assert stored.get("evaluator") == evaluator and stored["config"] == fresh["case"]["config"]
    for fn, blob in fresh["files"].items():
        assert (d / fn).read_bytes() == blob, f"{name}/{fn} differs from what {script} builds"
    for label in ("torch_f64", "torch_f32"):
        for k in ("before", "after"):
            for a, b in zip(stored[label][k], fresh["case"][label][k], strict=True):
                assert math.isclose(a, b, rel_tol=1e-12 if label == "torch_f64" else 1e-6), (name, label, k, a, b)
