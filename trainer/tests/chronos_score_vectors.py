"""Reference vectors for the Chronos-Bolt evaluator (plugins/builtin/src/chronosboltscore.c, scoring.md §2c).

The same discipline as score_vectors.py and granite_score_vectors.py: each case is a randomly initialized
Chronos-Bolt built by the trainer's own adapter (models/chronos_bolt.py, chronos-forecasting's
ChronosBoltModelForForecasting), a random outer gradient for one fragment and batches of raw series windows;
PyTorch computes the training loss (``ChronosBolt.loss``: the package's quantile loss in its instance-normalized
space) of every batch before and after the gradient is applied as the outer step's first step, in float64 and in
float32, on windows normalized by the trainer's loader (data._normalize). ``TestScoreMatchesPyTorch``
(plugins/score_test.go) runs the Wasm evaluator on the same files; ``test_chronos_score_reference.py`` checks
that the files are what this PyTorch computes.

Regenerate: ``PYTHONPATH=trainer/src $V/bin/python trainer/tests/chronos_score_vectors.py`` (writes
plugins/testdata/score/chronos_*).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import torch
from safetensors.torch import save as st_save

import score_vectors as sv
from tenzro_trainer import data
from tenzro_trainer.models.chronos_bolt import TINY, ChronosBolt

EVALUATOR = "ChronosBoltScore"

# name, metadata (over chronos_bolt.TINY), dtype, the fragment (a name prefix: a contiguous run of the sorted
# tensors), seed
CASES = [
    # the trainer's TINY config: 8 patches + REG, d_model 32, 2 heads of 16; the encoder's gradient (with its
    # relative position bias)
    ("chronos_tiny", {}, "F32", "net.encoder.", 11),
    # ragged: context 23 = 1 missing (left-padded) value + 6 patches of 4, d_model 10, d_ff 14, 3 heads of 5
    # (inner 15 != d_model), two encoder and two decoder blocks
    ("chronos_odd", {"context_len": 23, "horizon": 5, "patch_len": 4, "d_model": 10, "d_ff": 14, "num_layers": 2,
                     "num_decoder_layers": 2, "num_heads": 3, "d_kv": 5}, "F32", "net.decoder.", 12),
    # 17 patches + REG: relative distances 8 … 17 reach the logarithmic buckets (16 on a bucket edge); one head;
    # the gradient of the first encoder self-attention, its bias table included
    ("chronos_long", {"context_len": 136, "horizon": 3, "patch_len": 8, "d_model": 8, "d_ff": 16, "num_layers": 1,
                      "num_decoder_layers": 1, "num_heads": 1, "d_kv": 8}, "F32",
     "net.encoder.block.0.layer.0.SelfAttention.", 13),
    ("chronos_tiny_bf16", {}, "BF16", "net.output_patch_embedding.", 14),
]  # fmt: skip
LR, BETA, BATCHES, BATCH_SIZE = sv.LR, sv.BETA, sv.BATCHES, sv.BATCH_SIZE


def _losses(model: ChronosBolt, raw: np.ndarray, dtype: torch.dtype) -> list[float]:
    c = model.context_len
    x, y = data._normalize(raw[:, :c].astype(np.float64), raw[:, c:].astype(np.float64))
    out = []
    with torch.no_grad():
        for b in range(BATCHES):
            sl = slice(b * BATCH_SIZE, (b + 1) * BATCH_SIZE)
            out.append(float(model.loss(torch.from_numpy(x[sl]).to(dtype), torch.from_numpy(y[sl]).to(dtype))))
    return out


def build(name: str, md: dict, dtype: str, prefix: str, seed: int) -> dict:
    cfg = {**TINY, **md}
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = ChronosBolt(cfg).eval()
    st = torch.bfloat16 if dtype == "BF16" else torch.float32
    weights = {n: p.detach().to(st).contiguous() for n, p in sorted(model.named_parameters())}
    frag = [n for n in weights if n.startswith(prefix)]
    grad = {}
    for n in frag:  # 1% of each tensor's RMS, random directions (as score_vectors.py)
        w = weights[n].float()
        rms = float(w.pow(2).mean().sqrt()) or 1.0
        grad[n] = (
            torch.randn(w.shape, generator=torch.Generator().manual_seed(seed * 1000 + len(grad))) * 0.01 * rms
        ).to(st)
    raw = sv._windows(
        rng, SimpleNamespace(context_len=cfg["context_len"], horizon=cfg["horizon"]), BATCHES * BATCH_SIZE
    )
    res: dict = {"name": name, "evaluator": EVALUATOR, "config": cfg, "dtype": dtype, "fragment": frag, "lr": LR,
                 "beta": BETA, "nesterov": True, "batches": BATCHES, "batch_size": BATCH_SIZE}  # fmt: skip
    for label, tdt in (("f64", torch.float64), ("f32", torch.float32)):
        m = ChronosBolt(cfg).eval().to(tdt)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(weights[n].to(tdt))
        before = _losses(m, raw, tdt)
        with torch.no_grad():
            params = dict(m.named_parameters())
            for n in frag:  # the outer step's first step: w − lr·(g + β·g), BF16 weights round to BF16
                g = grad[n].to(torch.float64)
                params[n].copy_((weights[n].to(torch.float64) - LR * (g + BETA * g)).to(st).to(tdt))
        res[f"torch_{label}"] = {"before": before, "after": _losses(m, raw, tdt)}
    files = {
        "model.safetensors": st_save(weights),
        "grad.safetensors": st_save(grad),
        "windows.f32": raw.astype("<f4").tobytes(),
    }
    return {"case": res, "files": files}


def main() -> None:
    for name, md, dtype, prefix, seed in CASES:
        d = sv.OUT / name
        d.mkdir(parents=True, exist_ok=True)
        b = build(name, md, dtype, prefix, seed)
        for fn, blob in b["files"].items():
            (d / fn).write_bytes(blob)
        (d / "case.json").write_text(json.dumps(b["case"], indent=1, sort_keys=True) + "\n")
        t = b["case"]["torch_f64"]
        print(name, "before", t["before"], "after", t["after"],
              "Δ", [a - c for a, c in zip(t["before"], t["after"], strict=True)])  # fmt: skip
        assert all(math.isfinite(v) for v in t["before"] + t["after"])


if __name__ == "__main__":
    main()
