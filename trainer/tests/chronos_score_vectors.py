"""Reference vectors for the Chronos-Bolt evaluator (plugins/builtin/src/chronosboltscore.c, scoring.md §2c).

The same discipline as score_vectors.py and granite_score_vectors.py: each case is a randomly initialized
Chronos-Bolt built by the trainer's own adapter (models/chronos_bolt.py, chronos-forecasting's
ChronosBoltModelForForecasting), a random outer gradient for one fragment and batches of raw series windows;
PyTorch computes the training loss (``ChronosBolt.loss``: the package's quantile loss in its instance-normalized
space) of every batch before and after the gradient is applied as the outer step's first step, in float64 and in
float32, on windows normalized by the trainer's loader (data._normalize). ``TestScoreMatchesPyTorch``
(plugins/score_test.go) runs the Wasm evaluator on the same files; ``test_chronos_score_reference.py`` checks
that the files are what this PyTorch computes.

The case builder and writer are score_vector_lib.py's.

Regenerate: ``PYTHONPATH=trainer/src $V/bin/python trainer/tests/chronos_score_vectors.py [OUT]`` (writes
plugins/testdata/score/chronos_*, or OUT/chronos_*).
"""

from __future__ import annotations

import score_vector_lib as lib
from tenzro_trainer.models.chronos_bolt import TINY, ChronosBolt

EVALUATOR = "ChronosBoltScore"

# name, metadata (over chronos_bolt.TINY), dtype, the fragment (a name prefix: a contiguous run of the sorted
# tensors), seed
CASES = [
    # the trainer's TINY config: 8 patches + REG, d_model 32, 2 heads of 16; the encoder's gradient (with its
    # relative position bias)
    ("chronos_tiny", {}, "F32", "net.encoder.", 11),
    # ragged: context 23 = 1 missing (left-padded) value + 6 patches of 4, d_model 10, d_ff 14, 3 heads of 5
    # (inner 15 != d_model), two encoder and two decoder blocks
    ("chronos_odd", {"context_len": 23, "horizon": 5, "patch_len": 4, "d_model": 10, "d_ff": 14, "num_layers": 2,
                     "num_decoder_layers": 2, "num_heads": 3, "d_kv": 5}, "F32", "net.decoder.", 12),
    # 17 patches + REG: relative distances 8 … 17 reach the logarithmic buckets (16 on a bucket edge); one head;
    # the gradient of the first encoder self-attention, its bias table included
    ("chronos_long", {"context_len": 136, "horizon": 3, "patch_len": 8, "d_model": 8, "d_ff": 16, "num_layers": 1,
                      "num_decoder_layers": 1, "num_heads": 1, "d_kv": 8}, "F32",
     "net.encoder.block.0.layer.0.SelfAttention.", 13),
    ("chronos_tiny_bf16", {}, "BF16", "net.output_patch_embedding.", 14),
]  # fmt: skip


def build(name: str, md: dict, dtype: str, prefix: str, seed: int) -> dict:
    cfg = {**TINY, **md}
    return lib.build_case(name, lambda: ChronosBolt(cfg), cfg, EVALUATOR, dtype, prefix, seed)


def main() -> None:
    out = lib.out_dir()
    for case in CASES:
        lib.write_case(out, build(*case))


if __name__ == "__main__":
    main()
