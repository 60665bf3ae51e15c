"""The evaluator's reference vectors (plugins/testdata/score) are what this PyTorch computes with the
trainer's own model and data loader; the Go test TestScoreMatchesPyTorch holds the Wasm evaluator to them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import score_vector_lib as lib
import score_vectors as sv


@pytest.mark.parametrize("case", sv.CASES, ids=[c[0] for c in sv.CASES])
def test_vectors_match_pytorch(case: tuple) -> None:
    lib.check_stored(sv.build(*case), "score_vectors.py", None)


def test_window_enumeration_vector() -> None:
    assert json.loads((sv.OUT / "windows.json").read_text()) == sv.windows_vector()


def test_shard_windows_vector() -> None:
    """plugins/testdata/score/shards.json is what the trainer's loader and inner loop use (the Go test
    TestTrainerShardsAreTheOwnPool holds the evaluator's pools to it)."""
    v = sv.shards_vector()
    assert json.loads((sv.OUT / "shards.json").read_text()) == v
    own = set(v["trainer_windows"])
    for b in v["round_batches"]:  # a finite corpus: every window trained on is in the own pool, none outside
        assert set(b) <= own
    for b in v["synth"]["round_batches"]:  # synth: window i belongs to shard i mod shard_count
        assert all(i % v["shard_count"] in v["shards"] for i in b)
    seen = [i for b in v["synth"]["round_batches"] for i in b]
    assert len(seen) == len(set(seen))  # each synth window is used once


def test_coholders_draw_their_own_batches() -> None:
    """shard_holders 2 (scoring.md §3.1): two trainers holding the same shards train only on those windows, and their
    per-trainer draws differ in every step (today's seed, without the DID, would give them the same batches)."""
    from tenzro_trainer import data

    v = sv.shards_vector()["coholders"]
    a, b, c = v["trainers"]
    assert a["shards"] == b["shards"]
    for t in (a, b, c):
        assert all(set(x) <= set(t["trainer_windows"]) for x in t["round_batches"])
    assert all(x != y for x, y in zip(a["round_batches"], b["round_batches"], strict=True))
    n = len(sv.windows_vector()["windows"])
    gap = data.shard_gap(sv.WINDOW_LEN, sv.STRIDE)
    shared = data.round_batches(n, a["shards"], sv.SHARD_COUNT, v["task"], 0, sv.SHARD_STEPS, sv.SHARD_BATCH, gap)
    # without a DID the seed is the shards' alone, so the two would be copies
    again = data.round_batches(n, b["shards"], sv.SHARD_COUNT, v["task"], 0, sv.SHARD_STEPS, sv.SHARD_BATCH, gap)
    assert all((x == y).all() for x, y in zip(shared, again, strict=True))
    with pytest.raises(data.DatasetError, match="finite corpus"):
        data.round_batches(None, [0], 4, "t", 0, 1, 4, 0, None, "did:x")


def test_series_split_shards() -> None:
    """shard_split "series" (scoring.md §3): the loader trains only on its shards' windows; every series long enough
    (⌊windows/S⌋ > gap) has one time block in every shard, no block of one shard within the gap of another's in the
    same series; a short series is whole in one shard; a mismatched count or shard is refused."""
    from tenzro_trainer import data

    v = sv.shards_vector()["series"]
    own = set(v["trainer_windows"])
    for b in v["round_batches"]:
        assert set(b) <= own
    counts, gap, shard_count = v["series_counts"], v["shard_gap"], sv.SHARD_COUNT
    owner = {i: s for s, bs in enumerate(v["blocks"]) for lo, hi in bs for i in range(lo, hi)}
    assert len(owner) == sum(hi - lo for bs in v["blocks"] for lo, hi in bs)  # disjoint
    base = 0
    for n in counts:
        shards_of = {owner[i] for i in range(base, base + n) if i in owner}
        if n // shard_count > gap:
            assert shards_of == set(range(shard_count))
            last: dict[int, int] = {}
            for i in range(base, base + n):
                if i in owner:
                    assert all(i - j > gap for s, j in last.items() if s != owner[i])
                    last[owner[i]] = i
        elif n:
            assert len(shards_of) == 1 and all(i in owner for i in range(base, base + n))
        base += n
    with pytest.raises(data.DatasetError, match="sum to"):
        data.round_batches(sum(counts) + 1, [0], shard_count, "t", 0, 1, 4, gap, counts)
    with pytest.raises(data.DatasetError, match="out of range"):
        data.round_batches(sum(counts), [shard_count], shard_count, "t", 0, 1, 4, gap, counts)
    with pytest.raises(data.DatasetError, match="shard_count"):
        data.series_shard_blocks(counts, 0, gap)


def test_synth_train_windows_are_the_generators_series() -> None:
    """A synth:// corpus's training window i is synth.series(ref, "train", i) cut into context and horizon and
    normalized by data._normalize: the enumeration an evaluator of synth corpora must reproduce."""
    from tenzro_trainer import data, synth

    ref = synth.parse_ref(sv.SYNTH_REF)
    w = data.SynthWindows(sv.SYNTH_REF, 64, 16, "train")
    idx = [1, 3, 6, 8, 11]
    x, y = w.get(idx)
    raw = [synth.series(ref, "train", i, 80) for i in idx]
    ex, ey = data._normalize(np.stack([r[:64] for r in raw]), np.stack([r[64:] for r in raw]))
    assert np.array_equal(x, ex) and np.array_equal(y, ey)


def test_holdout_cut_is_integer() -> None:
    """The Go WindowIndex cuts a series of n points at n*4//5; the loader at int(n * (1.0 - 0.2))."""
    for n in list(range(0, 200_000)) + [2**31 - 1, 2**40 + 3, 10**12 + 7]:
        assert int(n * (1.0 - 0.2)) == n * 4 // 5, n


def test_trainer_batches_follow_the_spec_split() -> None:
    """The inner loop's batches (Trainer._batches) come from the spec's shard_split: with "series" exactly
    data.round_batches over the loader's per-series counts (the evaluator's own pool, shards.json "series");
    without it the contiguous blocks, as before; a corpus without series counts is refused."""
    from types import SimpleNamespace

    from tenzro_trainer import data
    from tenzro_trainer.loop import Trainer

    v = sv.shards_vector()["series"]
    w = data.SeriesWindows([np.zeros(n) for n in sv.SERIES_LENS], 64, sv.WINDOW_LEN - 64, sv.STRIDE, 0.2, "train")
    tr = Trainer.__new__(Trainer)
    tr.train_w = w
    tr.cfg = SimpleNamespace(task_id="t-series", inner=SimpleNamespace(batch_size=sv.SHARD_BATCH))
    tr.spec = {"trainer_count": 9, "shard_count": sv.SHARD_COUNT, "shard_split": "series"}
    got = [[int(i) for i in b] for r in range(sv.SHARD_ROUNDS) for b in tr._batches(r, sv.SHARDS, sv.SHARD_STEPS)]
    assert got == v["round_batches"]
    tr.spec = {"trainer_count": 9, "shard_count": sv.SHARD_COUNT}
    plain = [int(i) for b in tr._batches(0, sv.SHARDS, sv.SHARD_STEPS) for i in b]
    contiguous = {int(i) for s in sv.SHARDS for i in data.shard_indices(w.n, s, sv.SHARD_COUNT, w.shard_gap)}
    assert set(plain) <= contiguous
    for bad in ("", "contiguous"):
        tr.spec = {"trainer_count": 9, "shard_count": sv.SHARD_COUNT, "shard_split": bad}
        with pytest.raises(data.DatasetError, match="shard_split"):
            tr._batches(0, sv.SHARDS, sv.SHARD_STEPS)
    tr.train_w = data.SynthWindows(sv.SYNTH_REF, 64, 16, "train")
    tr.spec = {"trainer_count": 9, "shard_count": sv.SHARD_COUNT, "shard_split": "series"}
    with pytest.raises(data.DatasetError, match="finite corpus"):
        tr._batches(0, sv.SHARDS, sv.SHARD_STEPS)
