"""Several labelled free-rider runs side by side, per rule, against issue 23's goals, with every pay test replayed on
each run's recorded losses (the decision record for a default pay test: brief `relpay`).

    $(scripts/venv.sh)/bin/python bench/freeriders_runs.py OUT LABEL [LABEL ...]

Reads ``bench/results/freeriders-<LABEL>.json`` (written by ``bench/freeriders.py --label``) and writes
``bench/results/freeriders-<OUT>.{md,json}``. Per run and rule: the worst free rider's payout ÷ the median honest
payout (goal ≤ 0.05) and which, the honest spread (goal ≤ 0.10), honest trainers slashed, and, on the same
recorded losses, the honest checks and Gaussian windows' checks each pay test passes (``freeriders_tests.TESTS``:
the node's own verdicts are the spec's test; the others are what that test would have said of the same inputs).
"""

from __future__ import annotations

import json
import sys

import freeriders_tests as ft

import common

GOAL_FR, GOAL_SPREAD = 0.05, 0.10


def summarize(label: str) -> list[dict]:
    d = json.loads((common.RESULTS / f"freeriders-{label}.json").read_text())
    test = (d.get("args") or {}).get("score_test") or "own_improves"
    holders = (d.get("args") or {}).get("shard_holders") or 1
    out = []
    for r in d["rules"]:
        fr = [t for t in r["trainers"] if not t["honest"]]
        worst = max(fr, key=lambda t: t["vs_median_honest"])
        replay: dict[str, dict[str, list[int]]] = {k: {"honest": [0, 0], "gaussian": [0, 0]} for k in ft.TESTS}
        for inp in r.get("inputs") or []:
            sc = inp.get("score")
            if not sc or sc.get("failed"):
                continue
            who = (
                "honest"
                if inp["trainer"].startswith("honest")
                else "gaussian"
                if inp["trainer"] == "Gaussian windows"
                else ""
            )
            if not who:
                continue
            ls = ft.losses(sc)
            for k, f in ft.TESTS.items():
                replay[k][who][0] += bool(f(*ls))
                replay[k][who][1] += 1
        # under shard_holders 2 (scoring.md §3.1): per round, how many honest trainers held a shard of the rider's too
        gw = next((t for t in r["trainers"] if t["trainer"] == "Gaussian windows"), {})
        gw_honest = {
            k: sum(c.startswith("honest") for c in v) for k, v in (gw.get("co_holders_by_round") or {}).items()
        }
        co = [x["cosine"] for x in r.get("honest_cosines") or [] if x["shared_shards"]]
        ok = worst["vs_median_honest"] <= GOAL_FR and r["honest_spread"] <= GOAL_SPREAD and r["honest_slashed"] == 0
        out.append({
            "label": label, "test": test, "holders": holders, "rule": r["name"],
            "gaussian_honest_coholders": gw_honest, "coholder_cosine_max": max(co) if co else None, "worst_free_rider_vs_median": worst["vs_median_honest"],
            "worst_free_rider": worst["trainer"], "honest_spread": r["honest_spread"], "honest_slashed": r["honest_slashed"],
            "meets_goals": ok, "replayed_tests": replay, "command": d.get("command", ""),
        })  # fmt: skip
    return out


def main(out: str, labels: list[str]) -> None:
    rows_raw = [s for lab in labels for s in summarize(lab)]
    header = ["run", "rule", "pay test (node)", "holders", "worst free rider ÷ median honest (which)", "honest spread",
              "honest slashed", "goals met", "Gaussian windows' honest co-holders by round",
              "honest co-holders' cosine, max"] + [f"{k}: honest / Gaussian windows passed" for k in ft.TESTS]  # fmt: skip
    rows = []
    for s in rows_raw:
        rows.append([f"`{s['label']}`", s["rule"], s["test"], s["holders"],
                     f"{s['worst_free_rider_vs_median']:.3f} ({s['worst_free_rider']})", f"{s['honest_spread']:.3f}",
                     s["honest_slashed"], "**yes**" if s["meets_goals"] else "**no**",
                     " / ".join(f"r{k}: {v}" for k, v in s["gaussian_honest_coholders"].items()) or "–",
                     "–" if s["coholder_cosine_max"] is None else f"{s['coholder_cosine_max']:.4f}"]
                    + [f"{v['honest'][0]}/{v['honest'][1]} / {v['gaussian'][0]}/{v['gaussian'][1]}"
                       for v in s["replayed_tests"].values()])  # fmt: skip
    met = sum(s["meets_goals"] for s in rows_raw)
    notes = [
        f"{met} of {len(rows_raw)} rule-runs meet all three goals (worst free rider ≤ {GOAL_FR} × the median honest "
        f"payout, honest spread ≤ {GOAL_SPREAD}, no honest trainer slashed).",
        "The replayed columns apply each pay test to the losses the node recorded for the same inputs (own and "
        "control batch, before and after the step): `own_improves` s_own > 0 (the default), `own_beats_control` "
        "also s_own > s_ctl, `relative` s_own > 0 and s_own/own_before > s_ctl/ctl_before (the node's "
        "`own_gains_relative`).",
        "Commands: " + "; ".join(f"`{lab}`: `{c}`" for lab, c in {s["label"]: s["command"] for s in rows_raw}.items()),
        f"Produced by `$(scripts/venv.sh)/bin/python bench/freeriders_runs.py {out} {' '.join(labels)}`.",
    ]
    common.write(f"freeriders-{out}", "Free riders: " + ", ".join(labels), header, rows, notes,
                 {"runs": rows_raw, "labels": labels})  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
