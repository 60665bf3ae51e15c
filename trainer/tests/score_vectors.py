"""Reference vectors for the TimesFM-class evaluator (plugins/builtin/src/timesfmscore.c, ABI.md §4.2).

Each case is a random TimesFM-class model, a random outer gradient for one fragment and batches of raw
series windows; PyTorch computes the loss of every batch before and after the gradient is applied as the
outer step's first step (Nesterov, empty momentum: θ − lr·(1 + β)·g), with the trainer's own model
(models/timesfm.py) and data normalization (data._normalize), in float64 and in float32. The Go test
``TestScoreMatchesPyTorch`` (plugins/score_test.go) runs the Wasm evaluator on the same files and
compares; ``test_score_reference.py`` checks that these files are what this PyTorch computes.

The case builder and writer are score_vector_lib.py's (shared with the other families' scripts).

Regenerate: ``PYTHONPATH=trainer/src $V/bin/python trainer/tests/score_vectors.py [OUT]`` (writes
plugins/testdata/score/, or OUT).
"""

from __future__ import annotations

import json
from unittest import mock

import numpy as np

import score_vector_lib as lib
from score_vector_lib import OUT  # noqa: F401 (the reference tests read sv.OUT)
from tenzro_trainer import data
from tenzro_trainer.models.timesfm import TimesFMClass, TimesFMConfig

# name, config, dtype, the fragment (a name prefix: a contiguous run of the sorted tensors), seed
CASES = [
    # odd sizes: every linear layer has a ragged tail (5, 10 and 12 inputs are not all multiples of 4)
    ("odd", TimesFMConfig(context_len=20, horizon=3, patch_len=5, d_model=12, n_layers=2, n_heads=3, d_ff=10), "F32",
     "layers.1.", 1),
    ("tiny", TimesFMConfig(), "F32", "embed.", 2),  # the trainer's TINY config
    ("tiny_bf16", TimesFMConfig(), "BF16", "head.", 3),
]  # fmt: skip


def build(name: str, cfg: TimesFMConfig, dtype: str, prefix: str, seed: int) -> dict:
    return lib.build_case(name, lambda: TimesFMClass(cfg), cfg.metadata(), None, dtype, prefix, seed)


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


# shard_holders 2 (scoring.md §3.1): trainers holding the same shards draw their batches with their DID in the seed;
# the first two hold exactly SHARDS (what today's seed would make copies), the third shares one shard with them
COHOLDERS = [("did:key:z6MkHolderA", SHARDS), ("did:key:z6MkHolderB", SHARDS), ("did:key:z6MkHolderC", [3, 4])]


def coholders_vector(n: int, gap: int) -> dict:
    """Each co-holder's windows and its per-trainer batches (data.round_batches with ``trainer``) over the
    windows.json corpus: all inside its own shards, and different from every other holder's."""
    task = "t-holders"
    return {
        "task": task,
        "trainers": [
            {"did": d, "shards": sh,
             "trainer_windows": sorted(int(i) for s in sh for i in data.shard_indices(n, s, SHARD_COUNT, gap)),
             "round_batches": [[int(i) for i in b] for r in range(SHARD_ROUNDS)
                               for b in data.round_batches(n, sh, SHARD_COUNT, task, r, SHARD_STEPS, SHARD_BATCH, gap,
                                                           None, d)]}
            for d, sh in COHOLDERS
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
        "coholders": coholders_vector(n, gap),
        # data.shard_range over more corpus sizes, shard counts and gaps (Go: syncer.ShardRange)
        "ranges": [
            {"n": n_, "shard_count": s_, "gap": g_, "ranges": [list(data.shard_range(n_, i, s_, g_)) for i in range(s_)]}
            for n_, s_, g_ in SHARD_RANGE_CASES
        ],
    }  # fmt: skip


def main() -> None:
    out = lib.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / "windows.json").write_text(json.dumps(windows_vector()) + "\n")
    (out / "shards.json").write_text(json.dumps(shards_vector()) + "\n")
    for case in CASES:
        lib.write_case(out, build(*case))


if __name__ == "__main__":
    main()
