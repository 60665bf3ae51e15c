"""Honest false failures of the two pay tests (issue 23; docs/protocol/scoring.md §8): a `make demo`-size scored
run (8 honest reference trainers, M=8 K=6 F=4 H=24, the DEMO TimesFM-class model, the statsmodels corpus as CSV
published with `tenzro dataset add`, stride 2, 8 shards, rate 1, the default batch of 16 windows) through one
tenzro-node --dev; from the commits' recorded losses, how many honest scored inputs pass `own_improves`
(s_own > 0) and how many pass Templar's `own_beats_control` (s_own > 0 and s_own > s_ctl). Both tests are
functions of the same four losses, so one run measures both.

    $(scripts/venv.sh)/bin/python bench/scoring_shards.py [--rounds 3] [--runs 1] [--label contiguous]

Writes ``bench/results/scoring-shards-<label>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import common
from tenzro_trainer.experiment import Experiment, follow, start


def tally(transcript: list[dict]) -> dict:
    """Per scored input: s_own, s_ctl, and the two verdicts."""
    rows = []
    for rc in transcript:
        for fc in rc.get("fragments") or []:
            for inp in fc.get("inputs") or []:
                s = inp.get("score")
                if not s or s.get("failed"):
                    continue
                f = {k: _f64(s[k]) for k in ("own_before", "own_after", "ctl_before", "ctl_after")}
                own, ctl = f["own_before"] - f["own_after"], f["ctl_before"] - f["ctl_after"]
                rows.append({"round": rc["round"], "fragment": fc["fragment"], "trainer": inp["trainer_did"],
                             "s_own": own, "s_ctl": ctl, "own_improves": own > 0,
                             "own_beats_control": own > 0 and own > ctl})  # fmt: skip
    return {"scored": len(rows), "own_improves": sum(r["own_improves"] for r in rows),
            "own_beats_control": sum(r["own_beats_control"] for r in rows), "inputs": rows}  # fmt: skip


def _f64(hexbits: str) -> float:
    import struct

    return struct.unpack(">d", bytes.fromhex(hexbits))[0]


def one_run(bins: Path, rounds: int, i: int, shard_split: str = "") -> dict:
    with common.node(bins) as (url, _d, _p):
        e = Experiment(rpc=url, workdir=Path(tempfile.mkdtemp(prefix="bench-scoring-shards-")), rounds=rounds,
                       bins=bins, quiet=True, dataset="ipfs", scoring=True,
                       task_id=f"scoring-shards-{i}-{int(time.time())}",
                       spec_extra={"shard_split": shard_split} if shard_split else {})  # fmt: skip
        t0 = time.monotonic()
        c, task, procs, _keys = start(e)
        rows = follow(e, c, task, procs)
        run = c.get_run(task)
        tr = c.call("tenzro_training_getTranscript", {"task_id": task}) or []
        out = tally(tr)
        first, last = (rows[0].eval_loss, rows[-1].eval_loss) if rows else (float("nan"), float("nan"))
        out.update(task=task, status=run["status"], wall_s=round(time.monotonic() - t0, 1), heldout_first=first,
                   heldout_last=last)  # fmt: skip
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--label", default="contiguous")
    p.add_argument("--shard-split", default="", choices=["", "series"], help="the spec's shard_split (scoring.md §3)")
    a = p.parse_args()
    bins = common.build_bins()
    runs = [one_run(bins, a.rounds, i, a.shard_split) for i in range(a.runs)]
    rows = []
    for r in runs:
        n = max(1, r["scored"])
        mse = f"{r['heldout_first']:.4f} → {r['heldout_last']:.4f}"
        rows.append([r["task"], r["status"], r["scored"], f"{r['own_improves']} ({r['own_improves'] / n:.0%})",
                     f"{r['own_beats_control']} ({r['own_beats_control'] / n:.0%})", mse, r["wall_s"]])  # fmt: skip
        print(json.dumps({k: v for k, v in r.items() if k != "inputs"}))
    common.write(
        f"scoring-shards-{a.label}",
        f"Honest scored inputs passing each pay test ({a.label} shards)",
        ["task", "status", "honest scored inputs", "pass own_improves", "pass own_beats_control", "held-out MSE",
         "wall s"],
        rows,
        [f"`bench/scoring_shards.py --rounds {a.rounds} --runs {a.runs} --label {a.label}"
         + (f" --shard-split {a.shard_split}" if a.shard_split else "") + "`: a `make demo`-size run "
         "(8 honest trainers, M=8 K=6 F=4 H=24, DEMO model, statsmodels corpus as CSV via ipfs, stride 2, "
         "8 shards, rate 1, batch 16" + (f", shard_split {a.shard_split}" if a.shard_split else "")
         + "); both tests evaluated on the same recorded losses."],
        {"runs": runs},
    )  # fmt: skip


if __name__ == "__main__":
    main()
