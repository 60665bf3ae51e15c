"""Summaries of ``bench/freeriders_peers.py --own-batch both`` runs (issue 23, wrong data; freeriders-peers.md).

Reads ``bench/results/freeriders-peers-<label>.json`` for each label given and prints three markdown tables:

1. per rule and own batch (shard pool vs the round's trained windows): checks passed per verdict, honest · wrong
   data · noise at the honest norm, and the run-level gaps (honest lowest − each free rider's highest run mean) of
   A = mean rel_own and B = mean (rel_own − rel_ctl);
2. pay per trainer-run under a combined run-level verdict, A ≥ ``--min-gain`` and P > 0, where P is the mean over
   the trainer's rounds of (s_own − the median of the round's other inputs' gains on the same own batch) ÷ own_before
   (own batch "shard");
3. the same with the round's aggregate's gain in place of the peer median;

and for ``--pairs`` runs (shards held by two trainers) a table of the co-holder comparison.

    $(scripts/venv.sh)/bin/python bench/freeriders_peers_summary.py trained-contiguous trained-series …
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from collections.abc import Callable

import common

TESTS = ("own_improves", "own_beats_control", "relative", "rel_margin")
KINDS = ("honest", "wrong_data", "noise_norm")


def kind(trainer: str) -> str:
    return "honest" if trainer.startswith("honest") else trainer


def run_means(rows: list[dict], f: Callable[[dict], float]) -> dict[str, list[float]]:
    """Per kind of trainer: the mean of f over each (seed, trainer)'s rounds."""
    g: dict[tuple[int, str], list[float]] = {}
    for x in rows:
        g.setdefault((x["seed"], x["trainer"]), []).append(f(x))
    out: dict[str, list[float]] = {}
    for (_, t), v in g.items():
        out.setdefault(kind(t), []).append(statistics.fmean(v))
    return out


def verdicts(label: str, raw: dict) -> list[str]:
    rows, margin = raw["rows"], raw["args"]["margin"]
    out = []
    for rule in raw["args"]["rules"].split(","):
        for mode in ("shard", "trained"):
            xs = [x for x in rows if x["rule"] == rule and x["own_batch"] == mode]
            for x in xs:
                x["rel_margin"] = x["s_own"] > 0 and x["rel_own"] - x["rel_ctl"] > margin
            cells = []
            for t in TESTS:
                part = []
                for k in KINDS:
                    ks = [x for x in xs if kind(x["trainer"]) == k]
                    part.append(f"{sum(x[t] for x in ks)}/{len(ks)}")
                cells.append(" · ".join(part))
            gaps = []
            for f in (lambda x: x["rel_own"], lambda x: x["rel_own"] - x["rel_ctl"]):
                m = run_means(xs, f)
                gs = [min(m["honest"]) - max(m[k]) for k in ("wrong_data", "noise_norm", "zeros")]
                gaps.append(" / ".join(f"**{g:+.3f}**" if g <= 0 else f"{g:+.3f}" for g in gs))
            out.append(f"| `{label}` | {rule} | {mode} | " + " | ".join(cells + gaps) + " |")
    return out


def combined(label: str, raw: dict, min_gain: float, against: str) -> list[str]:
    out = []
    for rule in raw["args"]["rules"].split(","):
        xs = [x for x in raw["rows"] if x["rule"] == rule and x["own_batch"] == "shard"]
        a = run_means(xs, lambda x: x["rel_own"])
        p = run_means(xs, lambda x: (x["s_own"] - x[against]) / x["own_before"])
        paid = {k: sum(ai >= min_gain and pi > 0 for ai, pi in zip(a[k], p[k], strict=True)) for k in a}
        cells = [f"{paid[k]}/{len(a[k])}" for k in ("honest", "wrong_data", "noise_norm", "zeros")]
        out.append(
            f"| `{label}` | {rule} | " + " | ".join(cells) + f" | {min(a['honest']):+.3f} / {min(p['honest']):+.3f} | "
            f"{max(a['wrong_data']):+.3f} / {max(p['wrong_data']):+.3f} |"
        )
    return out


def coholders(label: str, raw: dict, min_gain: float) -> list[str]:
    """``--pairs`` runs: per rule and own batch, checks passed by `own_improves` and by `beats_coholder` (s_own > 0
    and s_own > the other holder's input's gain on the same own batch), honest (those with a co-holder) · wrong data
    · noise; run-level gaps of A and of C = mean (s_own − co-holder's gain) ÷ own_before; trainer-runs paid at A ≥
    min_gain; "–": that kind has no co-holder in the layout."""
    out = []
    for rule in raw["args"]["rules"].split(","):
        for mode in ("shard", "trained"):
            xs = [x for x in raw["rows"] if x["rule"] == rule and x["own_batch"] == mode]
            ys = [x for x in xs if x["coholder_gain"] is not None]
            for x in ys:
                x["beats_coholder"] = x["s_own"] > 0 and x["s_own"] > x["coholder_gain"]
            cells = []
            for t in ("own_improves", "beats_coholder"):
                part = []
                for k in KINDS:
                    ks = [x for x in ys if kind(x["trainer"]) == k]
                    part.append(f"{sum(x[t] for x in ks)}/{len(ks)}")
                cells.append(" · ".join(part))
            a = run_means(xs, lambda x: x["rel_own"])
            c = run_means(ys, lambda x: (x["s_own"] - x["coholder_gain"]) / x["own_before"])
            for m in (a, c):
                gs = [min(m["honest"]) - max(m[k]) if k in m else None for k in ("wrong_data", "noise_norm", "zeros")]
                cells.append(" / ".join("–" if g is None else f"**{g:+.3f}**" if g <= 0 else f"{g:+.3f}" for g in gs))
            cells.append(" · ".join(f"{min(c[k]):+.3f} … {max(c[k]):+.3f}" if k in c else "–" for k in KINDS))
            paid = [f"{sum(v >= min_gain for v in a[k])}/{len(a[k])}" for k in ("honest", "wrong_data", "noise_norm")]
            out.append(f"| `{label}` | {rule} | {mode} | " + " | ".join(cells) + " | " + " · ".join(paid) + " |")
    return out


def load(label: str) -> dict:
    """A recorded run: ``freeriders-peers-<label>.json``, or its gzipped form (the --own-batch runs)."""
    path = common.RESULTS / f"freeriders-peers-{label}.json"
    if path.exists():
        return json.loads(path.read_text())
    return json.loads(gzip.decompress(path.with_suffix(".json.gz").read_bytes()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("labels", nargs="+")
    ap.add_argument("--min-gain", type=float, default=0.10, help="run-level threshold on A (run_mean_gain's default)")
    a = ap.parse_args()
    raws = {lab: load(lab) for lab in a.labels}
    paired = {lab: raw for lab, raw in raws.items() if raw["args"].get("pairs")}
    if paired:
        print(
            "| label | rule | own batch | own_improves | beats_coholder | run-level A gap (wrong data / noise / zeros) "
            "| run-level C gap (the same) | C range (honest · wrong data · noise) "
            f"| paid at A ≥ {a.min_gain} (honest · wrong data · noise) |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for lab, raw in paired.items():
            print("\n".join(coholders(lab, raw, a.min_gain)))
        print()
        raws = {lab: raw for lab, raw in raws.items() if lab not in paired}
        if not raws:
            return
    print(
        "| label | rule | own batch | "
        + " | ".join(TESTS)
        + " | run-level A gap (wrong data / noise / zeros) | run-level B gap (the same) |"
    )
    print("|---|---|---|" + "---|" * len(TESTS) + "---|---|")
    for lab, raw in raws.items():
        if raw["args"].get("own_batch") != "both":
            raise SystemExit(f"{lab}: not an --own-batch both run")
        print("\n".join(verdicts(lab, raw)))
    for against, what in (("peer_median", "peer median"), ("agg_gain", "the round's aggregate")):
        print(f"\nPaid under A ≥ {a.min_gain} and P > 0, P against {what}:\n")
        print(
            "| label | rule | honest trainer-runs paid | wrong data paid | noise paid | zeros paid | "
            "honest lowest A / P | wrong data highest A / P |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for lab, raw in raws.items():
            print("\n".join(combined(lab, raw, a.min_gain, against)))


if __name__ == "__main__":
    main()
