"""Communication and protocol overhead, measured from a real run (trainer logs) through the node.

* bytes sent per trainer per round (F safetensors payloads) versus a data-parallel ring all-reduce
  of the same H inner steps (each step moves 2(N-1)/N x the gradient bytes per worker);
* protocol overhead: serialize (outer gradient + safetensors) + sign + submit time as a share of the
  inner-loop time.

    $(scripts/venv.sh)/bin/python bench/communication.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import common
from tenzro_trainer import models
from tenzro_trainer.experiment import Experiment, follow, start, trainer_stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    bins = common.build_bins()
    e = None
    with common.node(bins) as (url, _, _):
        e = Experiment(rpc=url, workdir=Path(tempfile.mkdtemp(prefix="bench-comm-")), rounds=a.rounds, bins=bins,
                       quiet=True)  # fmt: skip
        c, task, procs, _ = start(e)
        follow(e, c, task, procs)
    st = trainer_stats(e)
    params = sum(p.numel() for p in models.build(e.family, e.metadata).parameters())
    per_round = statistics.mean(s["bytes"] for s in st)
    ring = e.h * 2 * (e.m - 1) / e.m * params * 4
    inner = statistics.mean(s["inner_s"] for s in st)
    ser = statistics.mean(s["serialize_s"] for s in st)
    sub = statistics.mean(s["submit_s"] for s in st)
    common.write(
        "communication",
        "Communication per trainer per round, and protocol overhead",
        ["quantity", "value"],
        [
            ["model parameters (f32)", f"{params:,}"],
            ["DiLoCo: payload bytes sent per trainer per round (F=4 safetensors)", f"{per_round:,.0f}"],
            [f"ring all-reduce of the same H={e.h} steps, per worker", f"{ring:,.0f}"],
            ["reduction", f"**{ring / per_round:.1f}x** fewer bytes"],
            ["inner loop (H=24 AdamW steps) s/round, mean", f"{inner:.3f}"],
            ["serialize θ_before−θ_after to safetensors s/round", f"{ser:.4f}"],
            ["sign + submit (4 RPCs) s/round", f"{sub:.4f}"],
            ["protocol overhead / inner loop", f"**{(ser + sub) / inner * 100:.1f}%**"],
        ],
        [f"{len(st)} trainer-rounds, M=8 processes sharing this machine's cores with the node, tiny "
         "TimesFM-class model. Payload bytes per round do not depend on H while inner time grows with H, so the "
         "overhead share falls as 1/H (the DiLoCo paper uses H=500); see overhead.md for larger models. "
         "Command: `$(scripts/venv.sh)/bin/python bench/communication.py`."],
        {"stats": st, "params": params},
    )  # fmt: skip


if __name__ == "__main__":
    main()
