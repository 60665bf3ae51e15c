"""The Chronos-Bolt evaluator's reference vectors (plugins/testdata/score/chronos_*) are what this PyTorch computes
with the trainer's own adapter (models/chronos_bolt.py) and data loader; TestScoreMatchesPyTorch holds the Wasm
evaluator ChronosBoltScore to them."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("chronos")

import torch  # noqa: E402
from transformers.models.t5.modeling_t5 import T5Attention  # noqa: E402

import chronos_score_vectors as cv  # noqa: E402
import score_vectors as sv  # noqa: E402


@pytest.mark.parametrize("case", cv.CASES, ids=[c[0] for c in cv.CASES])
def test_chronos_vectors_match_pytorch(case: tuple) -> None:
    name = case[0]
    d = sv.OUT / name
    fresh = cv.build(*case)
    stored = json.loads((d / "case.json").read_text())
    assert stored["evaluator"] == "ChronosBoltScore" and stored["config"] == fresh["case"]["config"]
    for fn, blob in fresh["files"].items():
        assert (d / fn).read_bytes() == blob, f"{name}/{fn} differs from what chronos_score_vectors.py builds"
    for label in ("torch_f64", "torch_f32"):
        for k in ("before", "after"):
            for a, b in zip(stored[label][k], fresh["case"][label][k], strict=True):
                assert math.isclose(a, b, rel_tol=1e-12 if label == "torch_f64" else 1e-6), (name, label, k, a, b)


def test_chronos_vectors_cover_the_shapes() -> None:
    """The cases reach every branch of the evaluator: a left-padded first patch and none, more than one encoder and
    decoder block, an attention width num_heads·d_kv unlike d_model, ragged linear layers, relative distances in
    the logarithmic buckets (≥ 8), a BF16 model."""
    shapes = []
    for _, md, dtype, *_ in cv.CASES:
        cfg = {**cv.TINY, **md}
        t = -(-cfg["context_len"] // cfg["patch_len"])
        shapes.append(
            (
                cfg["context_len"] % cfg["patch_len"] != 0,
                cfg["num_layers"] > 1 and cfg["num_decoder_layers"] > 1,
                cfg["num_heads"] * cfg["d_kv"] != cfg["d_model"],
                cfg["d_model"] % 4 != 0,
                t >= 8,
                dtype == "BF16",
            )
        )
    for i in range(len(shapes[0])):
        assert {s[i] for s in shapes} == {True, False}, i


def _bucket(rel: int) -> int:
    """chronosboltscore.c's bucket(): the logarithmic part on integers, ⌊log2(|rel|²/64)⌋."""
    base = 16 if rel > 0 else 0
    n = abs(rel)
    if n < 8:
        return base + n
    return base + min(15, 8 + (n * n).bit_length() - 1 - 6)


def test_relative_position_buckets_match_t5() -> None:
    """The evaluator's integer form of T5's relative-position bucket (32 buckets, max distance 128,
    bidirectional) equals the float32 formula of transformers for every distance up to 70000 patches — the
    edges 16, 32 and 64, where the real logarithm is an integer, included."""
    rel = torch.arange(-70000, 70001)
    want = T5Attention._relative_position_bucket(rel, bidirectional=True, num_buckets=32, max_distance=128)
    assert [_bucket(int(r)) for r in rel] == want.tolist()
    # the decoder's one query step: key − query = 0, unidirectional
    assert int(T5Attention._relative_position_bucket(torch.tensor([0]), bidirectional=False)[0]) == 0
