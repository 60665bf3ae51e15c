"""The evaluator's reference vectors (plugins/testdata/score) are what this PyTorch computes with the
trainer's own model and data loader; the Go test TestScoreMatchesPyTorch holds the Wasm evaluator to them."""

from __future__ import annotations

import json
import math

import pytest

import score_vectors as sv


@pytest.mark.parametrize("case", sv.CASES, ids=[c[0] for c in sv.CASES])
def test_vectors_match_pytorch(case: tuple) -> None:
    name = case[0]
    d = sv.OUT / name
    fresh = sv.build(*case)
    stored = json.loads((d / "case.json").read_text())
    for fn, blob in fresh["files"].items():
        assert (d / fn).read_bytes() == blob, f"{name}/{fn} differs from what score_vectors.py builds"
    for label in ("torch_f64", "torch_f32"):
        for k in ("before", "after"):
            for a, b in zip(stored[label][k], fresh["case"][label][k], strict=True):
                assert math.isclose(a, b, rel_tol=1e-12 if label == "torch_f64" else 1e-6), (name, label, k, a, b)


def test_window_enumeration_vector() -> None:
    assert json.loads((sv.OUT / "windows.json").read_text()) == sv.windows_vector()


def test_holdout_cut_is_integer() -> None:
    """The Go WindowIndex cuts a series of n points at n*4//5; the loader at int(n * (1.0 - 0.2))."""
    for n in list(range(0, 200_000)) + [2**31 - 1, 2**40 + 3, 10**12 + 7]:
        assert int(n * (1.0 - 0.2)) == n * 4 // 5, n
