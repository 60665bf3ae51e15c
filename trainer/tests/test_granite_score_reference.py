"""The Granite-TTM evaluator's reference vectors (plugins/testdata/score/granite_*) are what this PyTorch computes
with the trainer's own adapter (models/granite_ttm.py) and data loader; TestScoreMatchesPyTorch holds the Wasm
evaluator GraniteTTMScore to them."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("tsfm_public")

import granite_score_vectors as gv  # noqa: E402
import score_vectors as sv  # noqa: E402


@pytest.mark.parametrize("case", gv.CASES, ids=[c[0] for c in gv.CASES])
def test_granite_vectors_match_pytorch(case: tuple) -> None:
    name = case[0]
    d = sv.OUT / name
    fresh = gv.build(*case)
    stored = json.loads((d / "case.json").read_text())
    assert stored["evaluator"] == "GraniteTTMScore" and stored["config"] == fresh["case"]["config"]
    for fn, blob in fresh["files"].items():
        assert (d / fn).read_bytes() == blob, f"{name}/{fn} differs from what granite_score_vectors.py builds"
    for label in ("torch_f64", "torch_f32"):
        for k in ("before", "after"):
            for a, b in zip(stored[label][k], fresh["case"][label][k], strict=True):
                assert math.isclose(a, b, rel_tol=1e-12 if label == "torch_f64" else 1e-6), (name, label, k, a, b)


def test_granite_vectors_cover_the_shapes() -> None:
    """The cases reach every branch of the evaluator: an adapter (d_model != decoder_d_model) narrowing, widening
    and none, a patch mixer (T > 1) and none, leading context values dropped by the patching, ragged linear
    layers."""
    shapes = []
    for _, md, *_ in gv.CASES:
        cfg = {**gv.TINY, **md}
        t = cfg["context_len"] // cfg["patch_len"]
        dd = max(8, cfg["d_model"] // 2)
        shapes.append(
            (cfg["d_model"] > dd, t > 1, cfg["context_len"] % cfg["patch_len"] != 0, t % 4 != 0, cfg["d_model"] < dd)
        )
    for i in range(5):
        assert {s[i] for s in shapes} == {True, False}, i
