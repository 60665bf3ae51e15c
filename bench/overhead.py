"""Protocol overhead: serialize (θ_before − θ_after → safetensors) + sign + submit, as a share of the
inner-loop time, for one trainer alone on the machine (M=1, K=1, so nothing else competes for the
cores) at three model sizes. Every submission goes through the real node.

    $(scripts/venv.sh)/bin/python bench/overhead.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import common
from tenzro_trainer import models
from tenzro_trainer.experiment import Experiment, follow, start, trainer_stats

SIZES = {
    "tiny (demo)": dict(models.DEMO.metadata(), stride=4),
    "small": dict(context_len=128, horizon=32, patch_len=16, d_model=256, n_layers=4, n_heads=8, d_ff=1024, stride=4),
    "medium": dict(context_len=256, horizon=64, patch_len=32, d_model=512, n_layers=6, n_heads=8, d_ff=2048, stride=8),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--sizes", default=",".join(SIZES))
    a = ap.parse_args()
    bins = common.build_bins()
    rows, raw = [], {}
    with common.node(bins) as (url, _, _):
        for name in a.sizes.split(","):
            md = SIZES[name]
            e = Experiment(rpc=url, workdir=Path(tempfile.mkdtemp(prefix="bench-ovh-")), rounds=a.rounds, m=1, k=1,
                           f=4, h=24, metadata=md, batch=32, bins=bins, quiet=True)  # fmt: skip
            c, task, procs, _ = start(e)
            follow(e, c, task, procs)
            st = trainer_stats(e)[1:] or trainer_stats(e)  # the first round includes warm-up
            params = sum(p.numel() for p in models.build("timesfm", md).parameters())
            inner = statistics.mean(s["inner_s"] for s in st)
            ser = statistics.mean(s["serialize_s"] for s in st)
            sub = statistics.mean(s["submit_s"] for s in st)
            byts = statistics.mean(s["bytes"] for s in st)
            raw[name] = {"params": params, "stats": st}
            rows.append([name, f"{params:,}", f"{byts / 1e6:.2f}", f"{inner:.3f}", f"{ser:.4f}", f"{sub:.4f}",
                         f"**{(ser + sub) / inner * 100:.1f}%**"])  # fmt: skip
            print(rows[-1], flush=True)
    common.write(
        "overhead",
        "Protocol overhead per round: serialize + sign + submit vs the inner loop (one trainer, CPU)",
        ["model", "params", "MB sent/round", "inner loop s (H=24, batch 32)", "serialize s", "sign + submit s",
         "overhead"],
        rows,
        [f"M=1, K=1, F=4, H=24, {a.rounds} rounds (first round dropped as warm-up), torch on CPU. `sign + submit` "
         "includes the node's own checks, storage and, for the submission that completes the round, the aggregation "
         "and outer step. Command: `$(scripts/venv.sh)/bin/python bench/overhead.py`."],
        raw,
    )  # fmt: skip


if __name__ == "__main__":
    main()
