"""Data pipeline and catalog models (CPU, tiny configs)."""

from __future__ import annotations

import csv
import stat

import numpy as np
import pytest
import torch
from safetensors.torch import load as st_load

from tenzro_trainer import cli, data, models, weights
from tenzro_trainer.identity import Key

REF = "statsmodels://co2,sunspots,elnino,nile,macrodata"


@pytest.fixture(scope="module")
def corpus():
    return data.load_corpus(REF)


def test_corpus_is_real_and_hash_is_stable(corpus):
    names = [s.name for s in corpus]
    assert names[:4] == ["co2", "sunspots", "elnino", "nile"] and len(names) == 16
    assert all(np.isfinite(s.values).all() for s in corpus)
    assert data.corpus_hash(corpus) == data.corpus_hash(data.load_corpus(REF))
    data.check_hash(corpus, "0x" + data.corpus_hash(corpus).hex())
    with pytest.raises(data.DatasetError, match="mismatch"):
        data.check_hash(corpus, "00" * 32)


def test_file_ref_hashes_like_the_same_series(corpus, tmp_path):
    p = tmp_path / "c.csv"
    longest = max(len(s.values) for s in corpus)
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([s.name for s in corpus])
        for i in range(longest):
            w.writerow([repr(float(s.values[i])) if i < len(s.values) else "" for s in corpus])
    assert data.corpus_hash(data.load_corpus(f"file://{p}")) == data.corpus_hash(corpus)


def test_windows_shards_and_batches(corpus):
    tr, ev = data.make_windows(corpus, 64, 16)
    assert tr.x.shape[1:] == (64,) and tr.y.shape[1:] == (16,) and len(ev) > 0
    parts = [data.shard_indices(len(tr), s, 8) for s in range(8)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(len(tr)))  # gap 0: a partition
    assert all((np.diff(p) == 1).all() for p in parts)  # contiguous blocks
    gap = data.shard_gap(80, 1)
    assert gap == 79 and data.shard_gap(80, 2) == 39 and data.shard_gap(80, 80) == 0 and data.shard_gap(81, 80) == 1
    lo3, hi3 = data.shard_range(len(tr), 3, 8, gap)
    a = data.round_batches(len(tr), [3], 8, "t", 5, 4, 16, gap)
    b = data.round_batches(len(tr), [3], 8, "t", 5, 4, 16, gap)
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    assert all(((i >= lo3) & (i < hi3)).all() for i in a)
    assert lo3 == 3 * len(tr) // 8 + gap and hi3 == 4 * len(tr) // 8
    _, hi2 = data.shard_range(len(tr), 2, 8, gap)
    assert lo3 - (hi2 - 1) > gap  # no window of shard 3 shares a point with one of shard 2
    assert not (a[0] == data.round_batches(len(tr), [3], 8, "t", 6, 4, 16, gap)[0]).all()
    assert data.shard_range(10, 1, 4, 5) == (3, 5)  # a gap that would empty a block is capped at n // S - 1
    assert [data.shard_range(3, s, 4, 5) for s in range(4)] == [(0, 0), (0, 1), (1, 2), (2, 3)]  # n < S
    with pytest.raises(data.DatasetError):
        data.shard_range(10, 4, 4)


@pytest.mark.parametrize("family", models.FAMILIES)
def test_catalog_model_runs_one_inner_round(family, corpus):
    """Each catalog model's tiny config: pull-like load, H AdamW steps, outer gradient per fragment."""
    md = models.tiny_metadata(family)
    m = models.build(family, md, seed=0)
    tr, ev = data.make_windows(corpus, md["context_len"], md["horizon"], stride=4)
    init = st_load(weights.model_to_safetensors(m))
    layout = [{"name": n, "dtype": "F32", "shape": list(t.shape)} for n, t in init.items()]
    weights.assign(m, init)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    losses = []
    for idx in data.round_batches(len(tr), [0], 4, "t", 0, 3, 8):
        loss = m.loss(torch.from_numpy(tr.x[idx]), torch.from_numpy(tr.y[idx]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(np.isfinite(losses))
    after = {n: p.detach() for n, p in m.named_parameters()}
    g = st_load(weights.outer_gradient(init, after, layout))
    weights.check_layout(g, layout, "outer gradient")
    assert any(float(t.abs().sum()) > 0 for t in g.values())
    n = next(iter(init))
    assert torch.equal(g[n], init[n] - after[n])
    f = m.forecast(torch.from_numpy(ev.x[:4]))
    assert f.shape == (4, md["horizon"])


def test_models_are_deterministic_and_reference_is_200m():
    a = weights.model_to_safetensors(models.build("timesfm", models.tiny_metadata("timesfm"), seed=7))
    b = weights.model_to_safetensors(models.build("timesfm", models.tiny_metadata("timesfm"), seed=7))
    assert a == b
    with torch.device("meta"):
        ref = models.timesfm.TimesFMClass(models.REFERENCE_200M)
    assert 190e6 < sum(p.numel() for p in ref.parameters()) < 215e6


def test_fragment_layout_is_checked():
    t = {"w": torch.zeros(2, 3)}
    with pytest.raises(weights.FragmentError, match="fragment says"):
        weights.check_layout(t, [{"name": "w", "dtype": "F32", "shape": [3, 2]}], "x")
    with pytest.raises(weights.FragmentError, match="missing"):
        weights.check_layout(t, [{"name": "v", "dtype": "F32", "shape": [2, 3]}], "x")


def test_cli_keygen_and_version(tmp_path, capsys):
    out = tmp_path / "k.json"
    assert cli.main(["keygen", "--out", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert Key.load(out).did == capsys.readouterr().out.strip()
    assert cli.main(["keygen", "--out", str(out)]) == 1
    with pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code == 0
