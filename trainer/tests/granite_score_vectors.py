"""Reference vectors for the Granite-TTM evaluator (plugins/builtin/src/granitettmscore.c, scoring.md §2b).

The same discipline as score_vectors.py (the TimesFM-class evaluator's): each case is a randomly initialized
Granite TinyTimeMixer built by the trainer's own adapter (models/granite_ttm.py, granite-tsfm's
TinyTimeMixerForPrediction), a random outer gradient for one fragment and batches of raw series windows;
PyTorch computes the training loss (``GraniteTTM.loss``: the model's MSE after its own std scaling) of every
batch before and after the gradient is applied as the outer step's first step, in float64 and in float32,
on windows normalized by the trainer's loader (data._normalize). ``TestGraniteScoreMatchesPyTorch``
(plugins/score_granite_test.go) runs the Wasm evaluator on the same files; ``test_granite_score_reference.py``
checks that the files are what this PyTorch computes.

The case builder and writer are score_vector_lib.py's.

Regenerate: ``PYTHONPATH=trainer/src $V/bin/python trainer/tests/granite_score_vectors.py [OUT]`` (writes
plugins/testdata/score/granite_*, or OUT/granite_*).
"""

from __future__ import annotations

import score_vector_lib as lib
from tenzro_trainer.models.granite_ttm import TINY, GraniteTTM

EVALUATOR = "GraniteTTMScore"

# name, metadata (over granite_ttm.TINY), dtype, the fragment (a name prefix: a contiguous run of the sorted
# tensors), seed
CASES = [
    # the trainer's TINY config: T = 8 patches, d_model 16, decoder_d_model 8 (an adapter)
    ("granite_tiny", {}, "F32", "net.backbone.encoder.mlp_mixer_encoder.mixers.1.", 4),
    # ragged: context 23 = 3 dropped values + 5 patches of 4 (T = 5, 2T = 10), d_model 10 (fc1 10 → 20),
    # decoder_d_model 8, two decoder layers
    ("granite_odd", {"context_len": 23, "horizon": 5, "patch_len": 4, "d_model": 10, "num_layers": 2,
                     "decoder_num_layers": 2}, "F32", "net.decoder.", 5),
    # one patch (no patch mixer), d_model 8 = decoder_d_model (no adapter), 14 leading values dropped
    ("granite_flat", {"context_len": 30, "horizon": 7, "patch_len": 16, "d_model": 8, "num_layers": 1,
                      "decoder_num_layers": 1}, "F32", "net.backbone.", 6),
    ("granite_tiny_bf16", {}, "BF16", "net.head.", 7),
    # d_model 6 < decoder_d_model 8: the adapter widens; T = 5 patches of 3 with 1 value dropped
    ("granite_narrow", {"context_len": 16, "horizon": 2, "patch_len": 3, "d_model": 6, "num_layers": 1,
                        "decoder_num_layers": 1}, "F32", "net.decoder.adapter.", 8),
]  # fmt: skip


def build(name: str, md: dict, dtype: str, prefix: str, seed: int) -> dict:
    cfg = {**TINY, **md}
    return lib.build_case(name, lambda: GraniteTTM(cfg), cfg, EVALUATOR, dtype, prefix, seed)


def main() -> None:
    out = lib.out_dir()
    for case in CASES:
        lib.write_case(out, build(*case))


if __name__ == "__main__":
    main()
