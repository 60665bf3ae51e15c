"""Reference vectors for the TimesFM-class evaluator (plugins/builtin/src/timesfmscore.c, ABI.md §4.2).

Each case is a random TimesFM-class model, a random outer gradient for one fragment and batches of raw
series windows; PyTorch computes the loss of every batch before and after the gradient is applied as the
outer step's first step (Nesterov, empty momentum: θ − lr·(1 + β)·g), with the trainer's own model
(models/timesfm.py) and data normalization (data._normalize), in float64 and in float32. The Go test
``TestScoreMatchesPyTorch`` (plugins/score_test.go) runs the Wasm evaluator on the same files and
compares; ``test_score_reference.py`` checks that these files are what this PyTorch computes.

Regenerate: ``PYTHONPATH=trainer/src $V/bin/python trainer/tests/score_vectors.py`` (writes
plugins/testdata/score/).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from safetensors.torch import save as st_save

from tenzro_trainer import data
from tenzro_trainer.models.timesfm import TimesFMClass, TimesFMConfig

OUT = Path(__file__).resolve().parents[2] / "plugins" / "testdata" / "score"

# name, config, dtype, the fragment (a name prefix: a contiguous run of the sorted tensors), seed
CASES = [
    # odd sizes: every linear layer has a ragged tail (5, 10 and 12 inputs are not all multiples of 4)
    ("odd", TimesFMConfig(context_len=20, horizon=3, patch_len=5, d_model=12, n_layers=2, n_heads=3, d_ff=10), "F32",
     "layers.1.", 1),
    ("tiny", TimesFMConfig(), "F32", "embed.", 2),  # the trainer's TINY config
    ("tiny_bf16", TimesFMConfig(), "BF16", "head.", 3),
]  # fmt: skip
LR, BETA, BATCHES, BATCH_SIZE = 0.7, 0.9, 2, 4


def _windows(rng: np.random.Generator, cfg: TimesFMConfig, n: int) -> np.ndarray:
    """Raw series windows (f32): a level, a trend, a seasonal term and noise, so normalization matters."""
    w = cfg.context_len + cfg.horizon
    t = np.arange(w, dtype=np.float64)
    out = np.empty((n, w), np.float32)
    for i in range(n):
        level, trend = rng.uniform(-50, 300), rng.uniform(-0.5, 0.5)
        amp, period = rng.uniform(0.5, 20), rng.uniform(4, 24)
        out[i] = (level + trend * t + amp * np.sin(2 * np.pi * t / period) + rng.normal(0, 1, w)).astype(np.float32)
    return out


def _losses(model: TimesFMClass, raw: np.ndarray, dtype: torch.dtype) -> list[float]:
    c = model.cfg.context_len
    x, y = data._normalize(raw[:, :c].astype(np.float64), raw[:, c:].astype(np.float64))
    out = []
    with torch.no_grad():
        for b in range(BATCHES):
            sl = slice(b * BATCH_SIZE, (b + 1) * BATCH_SIZE)
            xb = torch.from_numpy(x[sl]).to(dtype)
            yb = torch.from_numpy(y[sl]).to(dtype)
            out.append(float(model.loss(xb, yb)))
    return out


def build(name: str, cfg: TimesFMConfig, dtype: str, prefix: str, seed: int) -> dict:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = TimesFMClass(cfg).eval()
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
    raw = _windows(rng, cfg, BATCHES * BATCH_SIZE)
    res: dict = {"name": name, "config": cfg.metadata(), "dtype": dtype, "fragment": frag, "lr": LR, "beta": BETA,
                 "nesterov": True, "batches": BATCHES, "batch_size": BATCH_SIZE}  # fmt: skip
    for label, tdt in (("f64", torch.float64), ("f32", torch.float32)):
        m = TimesFMClass(cfg).eval().to(tdt)
        with torch.no_grad():
            for n, p in m.named_parameters():
                p.copy_(weights[n].to(tdt))
        before = _losses(m, raw, tdt)
        with torch.no_grad():
            params = dict(m.named_parameters())
            for n in frag:
                # the outer step's first step: buf = g; d = g + β·g; w = w − lr·d (BF16 weights round to BF16)
                g = grad[n].to(torch.float64)
                w = weights[n].to(torch.float64) - LR * (g + BETA * g)
                params[n].copy_(w.to(st).to(tdt))
        res[f"torch_{label}"] = {"before": before, "after": _losses(m, raw, tdt)}
    files = {
        "model.safetensors": st_save(weights),
        "grad.safetensors": st_save(grad),
        "windows.f32": raw.astype("<f4").tobytes(),
    }
    return {"case": res, "files": files}


# window enumeration: series lengths around the edges (shorter than a window, exactly one, holdout cuts)
WINDOW_LENS = [0, 5, 79, 80, 99, 100, 101, 104, 105, 250, 1000, 3]
WINDOW_LEN, STRIDE = 80, 2


def windows_vector() -> dict:
    """Which (series, start) every training window of data.make_windows is, for the Go WindowIndex: the
    loader runs with normalization off, on series whose values encode (series, position)."""
    series = [data.Series(f"s{i}", np.arange(n, dtype=np.float64) + 10_000.0 * i) for i, n in enumerate(WINDOW_LENS)]
    with mock.patch.object(data, "_normalize", lambda c, t: (c, t)):
        tr, _ = data.make_windows(series, WINDOW_LEN - 16, 16, stride=STRIDE)
    starts = [[int(x0 // 10_000), int(x0 % 10_000)] for x0 in tr.x[:, 0]]
    return {"lengths": WINDOW_LENS, "window_len": WINDOW_LEN, "stride": STRIDE, "windows": starts}


# the shard rule (scoring.md §3): a trainer with SHARDS of SHARD_COUNT trains on the same windows the evaluator's own
# pool holds (contiguous blocks with shard_gap windows between them); the synth corpus (unbounded) interleaves
# its window stream (window i in shard i mod SHARD_COUNT)
SHARD_COUNT, SHARDS, SHARD_ROUNDS, SHARD_STEPS, SHARD_BATCH = 5, [1, 3], 3, 4, 6
SYNTH_REF = "synth://kernelsynth/v1?seed=23"
SHARD_RANGE_CASES = [
    (0, 2, 0),
    (7, 3, 1),
    (10, 4, 5),
    (3419, 8, 39),
    (3419, 12, 39),
    (1000, 6, 3),
    (2**40 + 3, 7, 1023),
]


# the series-balanced split (spec "shard_split": "series"): long series cut into a time block per shard, short
# ones dealt whole; a corpus with both, and data.series_shard_blocks over more window counts (Go:
# syncer.SeriesShardBlocks)
SERIES_LENS = [2000, 5, 300, 1000, 120, 3000, 0, 250, 81]
SERIES_BLOCK_CASES = [
    ([], 3, 39),
    ([10], 1, 0),
    ([7, 0, 3, 3], 2, 0),
    ([761, 81, 361, 9, 1161, 61], 5, 39),
    ([1748, 168, 506, 1] + [83] * 12, 7, 79),
    ([400, 399, 1, 1, 1], 4, 50),
]


def series_vector() -> dict:
    """The trainer's windows and batches with shard_split "series" over the SERIES_LENS corpus."""
    w = data.SeriesWindows([np.zeros(n) for n in SERIES_LENS], 64, WINDOW_LEN - 64, STRIDE, 0.2, "train")
    counts = w.series_counts
    gap = w.shard_gap
    blocks = data.series_shard_blocks(counts, SHARD_COUNT, gap)
    pool = sorted(i for s in SHARDS for lo, hi in blocks[s] for i in range(lo, hi))
    batches = [
        [int(i) for i in b]
        for r in range(SHARD_ROUNDS)
        for b in data.round_batches(w.n, SHARDS, SHARD_COUNT, "t-series", r, SHARD_STEPS, SHARD_BATCH, gap, counts)
    ]
    return {
        "lengths": SERIES_LENS, "series_counts": counts, "shard_gap": gap,
        "blocks": [[list(b) for b in bs] for bs in blocks], "trainer_windows": pool, "round_batches": batches,
        "cases": [
            {"counts": c, "shard_count": s_, "gap": g_,
             "blocks": [[list(b) for b in bs] for bs in data.series_shard_blocks(c, s_, g_)]}
            for c, s_, g_ in SERIES_BLOCK_CASES
        ],
    }  # fmt: skip


def shards_vector() -> dict:
    """The trainer's side of the evaluator's pools: the windows a trainer with SHARDS trains on (the loader's
    data.shard_indices over the windows.json corpus, whose order WindowIndex reproduces) and the batches its
    inner loop draws (data.round_batches) for a finite corpus and for a synth:// corpus."""
    n = len(windows_vector()["windows"])
    gap = data.shard_gap(WINDOW_LEN, STRIDE)
    pool = sorted(int(i) for s in SHARDS for i in data.shard_indices(n, s, SHARD_COUNT, gap))
    task = "t-shards"

    def batches(n_: int | None) -> list[list[int]]:
        out = []
        for r in range(SHARD_ROUNDS):
            for b in data.round_batches(n_, SHARDS, SHARD_COUNT, task, r, SHARD_STEPS, SHARD_BATCH, gap if n_ else 0):
                out.append([int(i) for i in b])
        return out

    return {
        "lengths": WINDOW_LENS, "window_len": WINDOW_LEN, "stride": STRIDE, "shard_count": SHARD_COUNT, "shard_gap": gap,
        "shards": SHARDS, "trainer_windows": pool, "round_batches": batches(n),
        "synth": {"ref": SYNTH_REF, "round_batches": batches(None)},
        "series": series_vector(),
        # data.shard_range over more corpus sizes, shard counts and gaps (Go: syncer.ShardRange)
        "ranges": [
            {"n": n_, "shard_count": s_, "gap": g_, "ranges": [list(data.shard_range(n_, i, s_, g_)) for i in range(s_)]}
            for n_, s_, g_ in SHARD_RANGE_CASES
        ],
    }  # fmt: skip


def main() -> None:
    (OUT / "windows.json").write_text(json.dumps(windows_vector()) + "\n")
    (OUT / "shards.json").write_text(json.dumps(shards_vector()) + "\n")
    for name, cfg, dtype, prefix, seed in CASES:
        d = OUT / name
        d.mkdir(parents=True, exist_ok=True)
        b = build(name, cfg, dtype, prefix, seed)
        for fn, blob in b["files"].items():
            (d / fn).write_bytes(blob)
        (d / "case.json").write_text(json.dumps(b["case"], indent=1, sort_keys=True) + "\n")
        t = b["case"]["torch_f64"]
        print(
            name,
            "before",
            t["before"],
            "after",
            t["after"],
            "Δ",
            [a - c for a, c in zip(t["before"], t["after"], strict=True)],
        )
        assert all(math.isfinite(v) for v in t["before"] + t["after"])


if __name__ == "__main__":
    main()
