"""Byzantine robustness: 2 of 8 trainers send sign-flipped x10 or Gaussian-noise outer gradients.
Held-out MSE relative to the clean run for Mean, TrimmedMean, CoordinateMedian, Krum (goal: a robust
rule <= 1.10x clean while Mean degrades). Every run goes through the real node.

    $(scripts/venv.sh)/bin/python bench/byzantine.py [--rounds 12]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import common
from tenzro_trainer.experiment import Experiment, follow, start

RULES = ["Mean", "TrimmedMean{alpha_bps=2500}", "CoordinateMedian", "Krum{f=2}"]
ATTACKS = {
    "clean": {},
    "sign-flip x10": {0: {"kind": "sign_flip", "scale": 10}, 1: {"kind": "sign_flip", "scale": 10}},
    "gaussian σ=1": {0: {"kind": "gaussian", "sigma": 1.0}, 1: {"kind": "gaussian", "sigma": 1.0}},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--rules", default=",".join(RULES))
    a = ap.parse_args()
    bins = common.build_bins()
    res: dict[str, dict[str, float]] = {}
    with common.node(bins) as (url, _, _):
        for rule in a.rules.split(","):
            for name, att in ATTACKS.items():
                e = Experiment(rpc=url, workdir=Path(tempfile.mkdtemp(prefix="bench-byz-")), rounds=a.rounds, m=8,
                               k=7, f=4, h=24, aggregation=rule, attackers=att, bins=bins, quiet=True)  # fmt: skip
                c, task, procs, _ = start(e)
                rows = follow(e, c, task, procs)
                res.setdefault(rule, {})[name] = rows[-1].eval_loss
                print(f"{rule:32s} {name:14s} held-out MSE {rows[-1].eval_loss:.4f}", flush=True)
    clean_mean = res.get("Mean", {}).get("clean")
    rows = []
    for rule, r in res.items():
        cl = r["clean"]
        rows.append([rule, f"{cl:.4f}"] + [f"{r[n]:.4f} ({r[n] / cl:.2f}x)" for n in ATTACKS if n != "clean"]
                    + [f"{cl / clean_mean:.2f}x" if clean_mean else "-"])  # fmt: skip
    common.write(
        "byzantine",
        "Byzantine trainers (2 of 8) through tenzro-node",
        ["rule", "clean MSE"] + [f"{n}: MSE (x own clean)" for n in ATTACKS if n != "clean"] + ["clean vs Mean clean"],
        rows,
        [f"M=8, K=7, F=4, H=24, {a.rounds} rounds, tiny TimesFM-class. Attackers are trainers 0 and 1, "
         "whose configs carry `attack:` (a benchmark-only hook of the reference trainer). Goal: a robust rule "
         "<= 1.10x clean while Mean degrades. Command: `$(scripts/venv.sh)/bin/python bench/byzantine.py`."],
        res,
    )  # fmt: skip


if __name__ == "__main__":
    main()
