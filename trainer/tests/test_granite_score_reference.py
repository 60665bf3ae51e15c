"""The Granite-TTM evaluator's reference vectors (plugins/testdata/score/granite_*) are what this PyTorch computes
with the trainer's own adapter (models/granite_ttm.py) and data loader; TestScoreMatchesPyTorch holds the Wasm
evaluator GraniteTTMScore to them."""

from __future__ import annotations

import pytest

pytest.importorskip("tsfm_public")

import granite_score_vectors as gv  # noqa: E402
import score_vector_lib as lib  # noqa: E402


@pytest.mark.parametrize("case", gv.CASES, ids=[c[0] for c in gv.CASES])
def test_granite_vectors_match_pytorch(case: tuple) -> None:
    lib.check_stored(gv.build(*case), "granite_score_vectors.py", "GraniteTTMScore")


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
