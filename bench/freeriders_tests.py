"""Pay tests replayed offline on a free-rider run's recorded losses (issue 23, item "wrong data").

Every scored input of ``bench/results/freeriders-<label>.json`` (saved since label ``selfcopy-obc-b32``) carries the
four losses the evaluator recorded (own and control batch, before and after the step, f64 bits). Those decide any
pay test that is a function of them, so one run answers, for the same inputs and the same batches, what each test
would have paid: per rule and trainer, the checks passed out of those scored.

    $(scripts/venv.sh)/bin/python bench/freeriders_tests.py selfcopy-obc-b32
    $(scripts/venv.sh)/bin/python bench/freeriders_tests.py --run-level   # every recorded run at once

``--run-level`` asks a different question of the same losses: not "did this check pass" but "over the run, how much
did this trainer's inputs lower its own batches' loss, relative to their level" — the mean over a trainer's scored
checks of (own_before − own_after) / own_before, per run, rule and trainer, summarized by kind of trainer.

Tests: ``own_improves`` (s_own > 0, the default), ``own_beats_control`` (also s_own > s_ctl, Templar's) and
``relative`` (s_own > 0 and s_own/own_before > s_ctl/ctl_before: the improvement relative to each batch's level).
"""

from __future__ import annotations

import glob
import json
import statistics
import struct
import sys
from pathlib import Path

import common


def f64(h: str) -> float:
    return struct.unpack(">d", bytes.fromhex(h))[0]


def losses(score: dict) -> tuple[float, float, float, float]:
    return tuple(f64(score[k]) for k in ("own_before", "own_after", "ctl_before", "ctl_after"))  # type: ignore[return-value]


TESTS = {
    "own_improves": lambda ob, oa, cb, ca: ob - oa > 0,
    "own_beats_control": lambda ob, oa, cb, ca: ob - oa > 0 and ob - oa > cb - ca,
    "relative": lambda ob, oa, cb, ca: ob - oa > 0 and (ob - oa) / ob > (cb - ca) / cb,
    # not a spec test: own_improves with a 1 % relative margin (noise at the honest norm moves the loss by ~0.1 %)
    "margin_1pct": lambda ob, oa, cb, ca: ob - oa > 0.01 * ob,
}


def main(label: str) -> None:
    raw = json.loads((common.RESULTS / f"freeriders-{label}.json").read_text())
    print(f"# Pay tests on the recorded losses of `{label}`\n")
    print("| rule | trainer | scored | " + " | ".join(f"{t} passed" for t in TESTS) + " | s_own − s_ctl (min … max) |")
    print("|---|---|---|" + "---|" * len(TESTS) + "---|")
    for r in raw["rules"]:
        by: dict[str, list[tuple[float, float, float, float]]] = {}
        for inp in r.get("inputs") or []:
            sc = inp.get("score")
            if sc and not sc.get("failed"):
                by.setdefault(inp["trainer"], []).append(losses(sc))
        for name, ls in by.items():
            diffs = [(ob - oa) - (cb - ca) for ob, oa, cb, ca in ls]
            cells = [str(sum(TESTS[t](*x) for x in ls)) for t in TESTS]
            print(
                f"| {r['name']} | {name} | {len(ls)} | "
                + " | ".join(cells)
                + f" | {min(diffs):+.4f} … {max(diffs):+.4f} |"
            )


def run_level() -> None:
    """Per (run, rule, trainer): the mean relative own gain over its scored checks; per kind of trainer and shard
    split and shard holders (series-balanced runs are labelled strata-rN): how many trainer-runs, the lowest and highest means."""
    kinds: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
    for path in sorted(glob.glob(str(common.RESULTS / "freeriders-*.json"))):
        raw = json.loads(Path(path).read_text())
        if "rules" not in raw:
            continue
        series = (raw.get("args") or {}).get("shard_split") == "series" or raw.get("label", "").startswith("strata-r")
        split = "series" if series else "contiguous"
        if (raw.get("args") or {}).get("shard_holders"):  # scoring.md §3.1: every shard dealt to two trainers
            split += f", {raw['args']['shard_holders']} holders"
        for r in raw["rules"]:
            per: dict[str, list[float]] = {}
            for inp in r.get("inputs") or []:
                sc = inp.get("score")
                if sc and not sc.get("failed") and "own_before" in sc:
                    ob, oa, _, _ = losses(sc)
                    per.setdefault(inp["trainer"], []).append((ob - oa) / ob)
            for t, gains in per.items():
                kind = "honest" if t.startswith("honest") else t
                kinds.setdefault((split, kind), []).append((statistics.mean(gains), raw["label"], r["name"]))
    print("| shards | trainer | trainer-runs | lowest mean relative own gain (run, rule) | highest |")
    print("|---|---|---|---|---|")
    for (split, kind), v in sorted(kinds.items()):
        v.sort()
        lo, hi = v[0], v[-1]
        print(f"| {split} | {kind} | {len(v)} | {lo[0]:+.4f} ({lo[1]}, {lo[2]}) | {hi[0]:+.4f} ({hi[1]}, {hi[2]}) |")


if __name__ == "__main__":
    if sys.argv[1] == "--run-level":
        run_level()
    else:
        main(sys.argv[1])
