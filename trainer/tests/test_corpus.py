"""The corpus that does not run out (synth://) and streamed real corpora (CSV, Parquet, Arrow)."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tenzro_trainer import data, synth
from tenzro_trainer.evaluate import task_data

REPO = Path(__file__).resolve().parents[2]
VECTORS = json.loads((REPO / "dataset" / "testdata" / "synth_vectors.json").read_text())
REF = "synth://kernelsynth/v1?seed=7&eval=8"


def test_synth_vectors_match_go():
    """dataset/testdata/synth_vectors.json: the Go node (dataset/synth) checks the same hashes."""
    for g in VECTORS["good"]:
        r = synth.parse_ref(g["ref"])
        assert synth.parse_ref(g["canonical"]) == r
        assert r.canonical() == g["canonical"]
        assert r.hash().hex() == g["dataset_hash"]
        assert data.dataset_hash(g["ref"]).hex() == g["dataset_hash"]
    for b in VECTORS["bad"]:
        with pytest.raises(synth.SynthError):
            synth.parse_ref(b)


def test_windows_are_a_pure_function_of_their_index():
    r = synth.parse_ref(REF)
    a = synth.series(r, "train", 12345, 80)
    assert np.array_equal(a, synth.series(r, "train", 12345, 80))
    assert not np.array_equal(a, synth.series(r, "train", 12346, 80))
    assert not np.array_equal(a, synth.series(r, "eval", 12345 % 8, 80))
    assert not np.array_equal(a, synth.series(synth.parse_ref("synth://kernelsynth/v1?seed=8"), "train", 12345, 80))
    assert np.isfinite(a).all() and a.std() > 0
    # The generator is pinned: a coarse fingerprint (rounded to 3 decimals, so BLAS builds agree) of the first
    # windows changes only when the generator does (then bump the version).
    fp = hashlib.sha256(
        np.concatenate([synth.series(r, "train", i, 80) for i in range(4)]).round(3).astype("<f8").tobytes()
    ).hexdigest()
    assert fp == FINGERPRINT, fp
    with pytest.raises(synth.SynthError, match="out of range"):
        synth.series(r, "eval", 8, 80)
    with pytest.raises(synth.SynthError, match="out of range"):
        synth.series(r, "train", -1, 80)


FINGERPRINT = "c9a68478595f073a30f1855a2deed65f0119489a80d8aea9866a6102c2473071"


def test_unbounded_batches_never_repeat_and_stay_in_their_shards():
    seen: set[int] = set()
    for shards in ([0], [1, 5], [7]):
        for r in range(3):
            for idx in data.round_batches(None, shards, 8, "t", r, 4, 6):
                assert len(idx) == 6
                assert set((idx % 8).tolist()) <= set(shards)
                assert not seen & set(idx.tolist())
                seen |= set(idx.tolist())
    assert len(seen) == 3 * 3 * 4 * 6
    with pytest.raises(data.DatasetError):
        data.round_batches(None, [8], 8, "t", 0, 1, 1)


def test_synth_task_data_and_batch_by_index():
    import tenzro_trainer.synth as s

    spec = {"dataset_ref": REF, "dataset_hash": s.parse_ref(REF).hash().hex(),
            "architecture": {"metadata": {"context_len": 32, "horizon": 8}}}  # fmt: skip
    tr, ev = task_data(spec)
    assert tr.n is None and ev.n == 8
    x, y = data.batch(tr, [2], 4, "task", 3, 1, 2, 5)
    assert x.shape == (5, 32) and y.shape == (5, 8) and x.dtype == np.float32
    x2, y2 = tr.get(data.round_batches(None, [2], 4, "task", 3, 2, 5)[1])
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    # normalized by the context
    assert np.allclose(x.mean(axis=1), 0, atol=1e-4)
    spec["dataset_hash"] = "00" * 32
    with pytest.raises(data.DatasetError, match="mismatch"):
        task_data(spec)


def _write_csv(p: Path, cols: dict[str, list[float]]) -> None:
    n = max(len(v) for v in cols.values())
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(list(cols))
        for i in range(n):
            w.writerow([repr(v[i]) if i < len(v) else "" for v in cols.values()])


def _cols() -> dict[str, list[float]]:
    rng = np.random.default_rng(0)
    return {"a": rng.standard_normal(300).tolist(), "b": (rng.standard_normal(211) * 5 + 1).tolist(), "c": [1.5, 2.5]}


@pytest.mark.parametrize("fmt", ["csv", "parquet", "arrow", "arrow-stream"])
def test_streamed_corpus_hashes_like_the_parsed_one(tmp_path, fmt, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setattr(data, "SPILL_CELLS", 50)  # many flushes
    cols = _cols()
    csvp = tmp_path / "c.csv"
    _write_csv(csvp, cols)
    want = data.corpus_hash(data.load_corpus(f"file://{csvp}"))
    if fmt == "csv":
        p = csvp
    else:
        n = max(len(v) for v in cols.values())
        t = pa.table({k: pa.array(v + [None] * (n - len(v)), pa.float64()) for k, v in cols.items()})
        p = tmp_path / f"c.{fmt}"
        if fmt == "parquet":
            pq.write_table(t, p, row_group_size=64)
        elif fmt == "arrow":
            with pa.ipc.new_file(p, t.schema) as w:
                for b in t.to_batches(max_chunksize=70):
                    w.write_batch(b)
        else:
            with pa.ipc.new_stream(p, t.schema) as w:
                for b in t.to_batches(max_chunksize=70):
                    w.write_batch(b)
    sc = data.open_corpus(f"file://{p}")
    assert sc.names == ["a", "b", "c"]
    assert sc.hash() == want == data.dataset_hash(f"file://{p}")
    assert all(isinstance(s, np.memmap) for s in sc.series)
    # lazy windows equal the materialized ones
    tr, ev = data.make_windows(data.load_corpus(f"file://{csvp}"), 16, 4, stride=3)
    spec = {"dataset_ref": f"file://{p}", "dataset_hash": want.hex(),
            "architecture": {"metadata": {"context_len": 16, "horizon": 4, "stride": 3}}}  # fmt: skip
    ltr, lev = task_data(spec)
    assert ltr.n == len(tr) and lev.n == len(ev)
    idx = np.arange(ltr.n)
    assert np.array_equal(ltr.get(idx)[0], tr.x) and np.array_equal(ltr.get(idx)[1], tr.y)
    assert np.array_equal(lev.get(np.arange(lev.n))[0], ev.x)


def test_streamed_corpus_refusals(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "s.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0], "name": ["x", "y"]}), p)
    with pytest.raises(data.DatasetError, match="column 'name' has type string"):
        data.open_corpus(f"file://{p}")
    pq.write_table(pa.table({"a": [1.0, float("nan")]}), p)
    with pytest.raises(data.DatasetError, match="non-finite"):
        data.open_corpus(f"file://{p}")
    c = tmp_path / "bad.csv"
    c.write_text("a,b\n1,2\n3,x\n")
    with pytest.raises(data.DatasetError, match=r"bad.csv:3: column 'b': 'x' is not a number"):
        data.open_corpus(f"file://{c}")
    t = tmp_path / "trunc.parquet"
    t.write_bytes(b"PAR1" + b"\0" * 20)
    with pytest.raises(data.DatasetError, match="not a readable parquet file"):
        data.open_corpus(f"file://{t}")
    with pytest.raises(data.DatasetError, match="no such file"):
        data.open_corpus(f"file://{tmp_path}/missing.csv")
