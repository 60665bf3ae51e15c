"""Free riders (issue 23 "Must show"): real reference trainers, honest and free riders of every kind of issue 23's
table, through one tenzro-node --dev, under Mean, TrimmedMean and Krum, with scoring on in the spec. Per rule:
each trainer's payout (ledger balance after the seal minus balance after the faucet: reward + refunded stake −
stake − fees − slashes), free rider payout / median honest payout (goal <= 5%), honest spread (max/min − 1, goal
<= 10%), slashes, rounds committed.

    $(scripts/venv.sh)/bin/python bench/freeriders.py [--rounds 3] [--rules Mean,...] [--label before]

The free riders are ordinary ``tenzro-trainer run`` processes whose config carries ``attack:`` (the reference
trainer's benchmark-only hook, tenzro_trainer/freeride.py); a copier finds its victim's record in the chain's
blocks and fetches the bytes with ``GET /blobs/<hash>``, as anyone can. ``--label`` names the column (the branch
measured) and writes ``bench/results/freeriders-<label>.{md,json}`` besides ``freeriders.{md,json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shlex
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import common
from tenzro_trainer import models
from tenzro_trainer.experiment import Experiment, start
from tenzro_trainer.freeride import COPIES as COPY_KINDS
from tenzro_trainer.freeride import Records, fetch_blob
from tenzro_trainer.rpc import Client, NodeUnavailable, RpcError

RULES = {
    "Mean": ("Mean", None),
    "TrimmedMean 20%": ("TrimmedMean", {"alpha_bps": 2000}),
    "Krum f=2": ("Krum", {"f": 2}),
}
HONEST = 4
# name, attack config (victim: an honest trainer's index)
FREE_RIDERS: list[tuple[str, dict]] = [
    ("zeros", {"kind": "zeros"}),
    ("noise (honest norm)", {"kind": "noise_norm"}),
    ("byte copy (re-bound)", {"kind": "copy", "victim": 0}),
    ("copy by hash", {"kind": "copy_hash", "victim": 3}),
    ("copy x1.0001", {"kind": "copy_scaled", "victim": 1, "scale": 1.0001}),
    ("copy + 1e-4 rms noise", {"kind": "copy_noise", "victim": 2, "sigma": 1e-4}),
    ("own round-0 replayed", {"kind": "replay"}),
    ("Gaussian windows", {"kind": "wrong_data"}),
]
SYNTH = "synth://kernelsynth/v1?seed=23"
TNZO = 10**18
COUNTS = ("inputs", "kept", "selected", "copy", "stale", "rejected", "scored", "passed")
# kinds whose inputs the chain rejects after their first round: the copies (copy rule) and the replay (stale rule,
# copies.md §6: its rounds after the first are copies of its own earlier input)
UNKEPT_KINDS = (*COPY_KINDS, "replay", "cycle3")
# --cycle: a free rider that trains in its first three rounds, then cycles through those gradients (round r sends
# round r−3's): beyond the stale rule's r−1, r−2; caught by the input sketch (copies.sketch_dim, copies.md §7)
CYCLE_RIDER = ("cycle of 3 own gradients", {"kind": "cycle3"})


def scoring_spec(batch: int, test: str = "", min_gain_ppm: int | None = None) -> dict:
    md = models.DEMO.metadata()
    params = {k: md[k] for k in ("context_len", "horizon", "patch_len", "d_model", "n_layers", "n_heads", "d_ff")}
    spec: dict = {"evaluator": "TimesFMScore", "params": params, "rate_bps": 10000, "batch": batch}
    if test:  # the spec's pay test (scoring.md §8); absent = the default, own_improves
        spec["test"] = test
    if min_gain_ppm is not None:  # run_mean_gain's threshold; absent = 100000 (a mean relative own gain of 0.10)
        spec["min_gain_ppm"] = min_gain_ppm
    return spec


def settle(c: Client, dids: list[str], timeout: float = 120) -> dict[str, int]:
    """Balances once they stop moving (the seal refunds stakes and pays the pool in the same block or the next)."""
    last: dict[str, int] | None = None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            now = {d: int(c.get_balance(d)["balance"]) for d in dids}
        except (NodeUnavailable, RpcError):
            time.sleep(1)
            continue
        if now == last:
            return now
        last = now
        time.sleep(2)
    return last or {}


def inputs_by_trainer(transcript: list[dict]) -> dict[str, dict[str, int]]:
    """Per trainer, over the run's commits: inputs, kept (not rejected), selected, copies, other rejections, scored
    and passed (the score check of scoring.md §8)."""
    out: dict[str, dict[str, int]] = {}
    for rc in transcript:
        for fc in rc.get("fragments") or []:
            for inp in fc.get("inputs") or []:
                d = out.setdefault(inp["trainer_did"], dict.fromkeys(COUNTS, 0))
                d["inputs"] += 1
                if inp.get("copy_of"):
                    d["copy"] += 1
                elif inp.get("stale_of_round") is not None:
                    d["stale"] += 1
                elif inp.get("rejected"):
                    d["rejected"] += 1
                else:
                    d["kept"] += 1
                d["selected"] += bool(inp.get("selected"))
                if inp.get("score"):  # pay by score (scoring.md §8): drawn and evaluated
                    d["scored"] += 1
                    d["passed"] += bool(inp["score"].get("pass"))
    return out


def flat(payload: bytes) -> np.ndarray:
    """An outer-gradient payload's values, every tensor in name order, as one float64 vector."""
    from safetensors.numpy import load as st_load

    t = st_load(payload)
    return np.concatenate([t[k].astype(np.float64).ravel() for k in sorted(t)])


class Watch:
    """What the bench reads while a run goes: each round's shards per trainer (dealt anew every round under
    shard_holders 2, scoring.md §3.1) and, under shard_holders, the honest trainers' payloads (``GET /blobs`` once
    their record is in a block, as a copier reads them) to measure how similar two honest co-holders' outer gradients
    are against the copy rule's threshold."""

    def __init__(self, c: Client, task: str, honest: list[str], payloads: bool) -> None:
        self.c, self.task, self.honest = c, task, honest
        self.shards: dict[int, dict[str, list[int]]] = {}
        self.blobs: dict[tuple[str, int, int], bytes] = {}
        self.records = Records.of_node(c) if payloads else None

    def see(self, run: dict) -> None:
        if run.get("status") == "running":
            self.shards.setdefault(
                int(run["round"]), {t["did"]: list(t.get("shards") or []) for t in run.get("trainers") or []}
            )
        if self.records is None:
            return
        with contextlib.suppress(NodeUnavailable):
            self.records.poll()
        for (task, did, r, f), h in list(self.records.seen.items()):
            if task == self.task and did in self.honest and (did, r, f) not in self.blobs:
                with contextlib.suppress(Exception):  # collected already, or the node busy: that pair is not measured
                    self.blobs[(did, r, f)] = fetch_blob(self.c, h)

    def cosines(self, name_of: dict[str, str]) -> list[dict]:
        """Cosine of every two honest trainers' outer gradients of one round and fragment, and whether they held a
        shard together that round."""
        out = []
        vecs = {k: flat(v) for k, v in self.blobs.items()}
        for (da, r, f), (db, r2, f2) in itertools.combinations(sorted(vecs), 2):
            if (r, f) != (r2, f2):
                continue
            a, b = vecs[(da, r, f)], vecs[(db, r, f)]
            sh = self.shards.get(r, {})
            shared = sorted(set(sh.get(da, [])) & set(sh.get(db, [])))
            cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) if a.any() and b.any() else 0.0
            out.append({"round": r, "fragment": f, "a": name_of[da], "b": name_of[db], "shared_shards": shared,
                        "cosine": cos})  # fmt: skip
        return out


def run_rule(url: str, bins: Path, label: str, rule: str, params: dict | None, a: argparse.Namespace) -> dict:
    m = HONEST + len(FREE_RIDERS)
    # K = the inputs that are recorded and not copies or replays: a fragment aggregates only when K inputs are left
    # after the copy and stale rules, so with K above that every fragment would close no_quorum and no rule (nor
    # scoring) would run
    k = HONEST + sum(1 for _, att in FREE_RIDERS if att["kind"] not in UNKEPT_KINDS)
    attackers = {HONEST + i: att for i, (_, att) in enumerate(FREE_RIDERS)}
    e = Experiment(
        rpc=url, workdir=Path(tempfile.mkdtemp(prefix="bench-freeriders-")), rounds=a.rounds, m=m, k=k,
        f=a.fragments, h=a.inner_steps, batch=a.batch, metadata=dict(models.DEMO.metadata()), aggregation=rule,
        aggregation_params=params, attackers=attackers, bins=bins, quiet=True, grace_window_ms=a.grace_ms,
        dataset_ref=SYNTH if a.dataset == "synth" else "", dataset="ipfs" if a.dataset == "ipfs" else "statsmodels",
        reward_pool=a.pool * TNZO, task_id=f"freeriders-{label}-{rule.lower()}-{int(time.time())}",
        score_corpus=a.score_corpus, spec_extra={"round_deadline_ms": 300_000, **({"scoring": scoring_spec(a.score_batch, a.score_test, a.min_gain_ppm)} if a.scoring else {}),
                                                 **({"copies": {"sketch_dim": a.sketch_dim}} if a.sketch_dim else {}),
                                                 **({"shard_split": a.shard_split} if a.shard_split else {}),
                                                 **({"shard_holders": a.shard_holders} if a.shard_holders else {})},
    )  # fmt: skip
    t0 = time.monotonic()
    c, task, procs, keys = start(e)
    names = [f"honest {i}" for i in range(HONEST)] + [n for n, _ in FREE_RIDERS]
    watch = Watch(c, task, [k.did for k in keys[:HONEST]], bool(a.shard_holders))
    status = "timeout"
    while time.monotonic() - t0 < a.timeout:
        try:
            run = c.get_run(task)
            watch.see(run)
        except (NodeUnavailable, RpcError):
            time.sleep(1)
            continue
        status = run["status"]
        if status in ("sealed", "cancelled"):
            break
        if all(p.poll() is not None for p in procs):
            status = "trainers exited"
            break
        time.sleep(1)
    wall = time.monotonic() - t0
    for p in procs:
        try:
            p.wait(60)
        except Exception:  # noqa: BLE001 — a trainer that hangs is stopped, the run's figures stand
            p.terminate()
            p.wait(10)
    run = c.get_run(task)
    after = settle(c, [k.did for k in keys])
    tv = {t["did"]: t for t in run.get("trainers") or []}
    transcript = c.call("tenzro_training_getTranscript", {"task_id": task}) or []
    ins = inputs_by_trainer(transcript)
    rows = []
    name_of = {k.did: names[i] for i, k in enumerate(keys)}
    for i, k in enumerate(keys):
        t = tv.get(k.did, {})
        rows.append({
            "trainer": names[i], "did": k.did, "honest": i < HONEST,
            "payout_tnzo": (after.get(k.did, 0) - e.balances_before[k.did]) / TNZO,
            "slashed_tnzo": int(t.get("slashed") or 0) / TNZO, "status": t.get("status", "?"),
            # which data the trainer was dealt (freeriders-findings: wrong data is paid on a shard holding a series
            # no honest trainer trains), as the run reported it at the end
            "shards": t.get("shard_assignments", t.get("shards")),
            # each round's shards, and who held one of them too (under shard_holders 2 the deal is drawn every round)
            "shards_by_round": {str(r): sh.get(k.did) for r, sh in sorted(watch.shards.items())},
            "co_holders_by_round": {
                str(r): sorted(name_of[d] for d, s2 in sh.items() if d != k.did and set(s2) & set(sh.get(k.did) or []))
                for r, sh in sorted(watch.shards.items())
            },
            **ins.get(k.did, dict.fromkeys(COUNTS, 0)),
        })  # fmt: skip
    # every input's verdicts and recorded losses (scores are f64 bits in hex), for analysis of other pay tests
    verdicts = [
        {"trainer": name_of.get(inp["trainer_did"], inp["trainer_did"]), "round": rc.get("round"),
         "fragment": fc.get("fragment"), "rejected": bool(inp.get("rejected")), "copy_of": inp.get("copy_of", ""),
         "stale_of_round": inp.get("stale_of_round"), "score": inp.get("score")}
        for rc in transcript for fc in rc.get("fragments") or [] for inp in fc.get("inputs") or []
    ]  # fmt: skip
    honest = [r["payout_tnzo"] for r in rows if r["honest"]]
    med = statistics.median(honest)
    for r in rows:
        r["vs_median_honest"] = r["payout_tnzo"] / med if med > 0 else float("nan")
    worst_fr = max(r["vs_median_honest"] for r in rows if not r["honest"])
    statuses = sorted({fc.get("status", "?") for rc in transcript for fc in rc.get("fragments") or []})
    spread = max(honest) / min(honest) - 1 if min(honest) > 0 else float("inf")
    cos = watch.cosines(name_of) if a.shard_holders else []
    return {
        "honest_cosines": cos,
        "rule": rule, "params": params, "task": task, "status": status, "rounds": len(transcript), "fragment_statuses": statuses,
        "inputs": verdicts,
        "wall_s": round(wall, 1), "median_honest_tnzo": med, "honest_spread": spread,
        "worst_free_rider_vs_median": worst_fr,
        "honest_slashed": sum(r["slashed_tnzo"] > 0 for r in rows if r["honest"]),
        "free_riders_slashed": sum(r["slashed_tnzo"] > 0 for r in rows if not r["honest"]),
        "trainers": rows, "workdir": str(e.workdir),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fragments", type=int, default=2)
    ap.add_argument("--inner-steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--grace-ms", type=int, default=10000)
    ap.add_argument("--pool", type=int, default=10, help="reward pool in TNZO")
    ap.add_argument("--score-batch", type=int, default=16)
    ap.add_argument("--no-scoring", dest="scoring", action="store_false")
    ap.add_argument(
        "--score-test",
        choices=["", "own_improves", "own_beats_control", "own_gains_relative", "run_mean_gain"],
        default="",
        help="the spec's scoring.test (default: absent, which means own_improves)",
    )
    ap.add_argument(
        "--min-gain-ppm",
        type=int,
        default=None,
        help="with --score-test run_mean_gain: the spec's scoring.min_gain_ppm (absent: the default, 100000)",
    )
    ap.add_argument(
        "--score-corpus",
        action="store_true",
        help="with --dataset ipfs: upload the CSV and name its content hash as scoring.corpus",
    )
    ap.add_argument(
        "--dataset",
        choices=["synth", "ipfs"],
        default="synth",
        help=f"synth: {SYNTH}; ipfs: the statsmodels corpus as CSV, published with `tenzro dataset add`",
    )
    ap.add_argument("--sketch-dim", type=int, default=0, help="the spec's copies.sketch_dim (0: absent, no sketch)")
    ap.add_argument("--shard-split", default="", choices=["", "series"],
                    help="the spec's shard_split (absent: contiguous blocks; series: scoring.md §3)")  # fmt: skip
    ap.add_argument("--shard-holders", type=int, default=0, choices=[0, 2],
                    help="the spec's shard_holders (0: absent, one trainer per shard; 2: scoring.md §3.1)")  # fmt: skip
    ap.add_argument("--cycle", action="store_true", help="add the cycle3 free rider (run 4+ rounds)")
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--label", default="")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument(
        "--from-transcripts",
        type=Path,
        default=None,
        help="only rewrite freeriders-<label>.{md,json} from saved transcripts in this folder",
    )
    a = ap.parse_args()
    if a.min_gain_ppm is not None and a.score_test != "run_mean_gain":
        ap.error("--min-gain-ppm is the threshold of --score-test run_mean_gain")
    if a.cycle:
        FREE_RIDERS.append(CYCLE_RIDER)
    if a.from_transcripts:
        from_transcripts(a.label, a.from_transcripts)
        return
    bins = common.build_bins()
    res: list[dict] = []
    with common.node(bins) as (url, _, _):
        for name in a.rules.split(","):
            rule, params = RULES[name]
            r = run_rule(url, bins, a.label or "run", rule, params, a)
            r["name"] = name
            res.append(r)
            print(f"{name}: {r['status']} after {r['rounds']} rounds, {r['wall_s']} s; median honest "
                  f"{r['median_honest_tnzo']:.4f} TNZO, worst free rider {r['worst_free_rider_vs_median']:.3f}x, "
                  f"honest spread {r['honest_spread']:.3f}", flush=True)  # fmt: skip
    report(res, a)


def from_transcripts(label: str, trdir: Path) -> None:
    """Re-derives the input counts (with scores) of a labelled result from saved transcripts
    (``<trdir>/<task>.json``, getTranscript answers) and rewrites its tables."""
    raw = json.loads((common.RESULTS / f"freeriders-{label}.json").read_text())
    for r in raw["rules"]:
        tr = json.loads((trdir / f"{r['task']}.json").read_text())
        tr = tr.get("result", tr)
        ins = inputs_by_trainer(tr)
        for t in r["trainers"]:
            t.update(ins.get(t["did"], dict.fromkeys(COUNTS, 0)))
        r["fragment_statuses"] = sorted({fc.get("status", "?") for rc in tr for fc in rc.get("fragments") or []})
    report(raw["rules"], argparse.Namespace(**raw["args"]))


def report(res: list[dict], a: argparse.Namespace) -> None:
    names = [t["trainer"] for t in res[0]["trainers"]]
    header = ["trainer"] + [f"{r['name']}: payout TNZO (× median honest), kept/inputs, passed/scored, slashed"
                            for r in res]  # fmt: skip
    rows = []
    for i, n in enumerate(names):
        cells = [n]
        for r in res:
            t = r["trainers"][i]
            cells.append(f"{t['payout_tnzo']:+.4f} ({t['vs_median_honest']:.3f}×), {t['kept']}/{t['inputs']}, "
                         f"{t.get('passed', 0)}/{t.get('scored', 0)}"
                         + (f", −{t['slashed_tnzo']:.3f}" if t["slashed_tnzo"] else "") + f", {t['status']}")  # fmt: skip
        rows.append(cells)
    rows.append(["**worst free rider / median honest** (goal ≤ 0.05)"]
                + [f"**{r['worst_free_rider_vs_median']:.3f}**" for r in res])  # fmt: skip
    rows.append(["**honest spread max/min − 1** (goal ≤ 0.10)"] + [f"**{r['honest_spread']:.3f}**" for r in res])
    rows.append(["honest slashed / free riders slashed"]
                + [f"{r['honest_slashed']} / {r['free_riders_slashed']}" for r in res])  # fmt: skip
    if getattr(a, "shard_holders", 0):
        rows.append(
            ["honest co-holders' outer-gradient cosine, max (pairs; copy threshold 0.9999)"]
            + [cosine_cell([x for x in r.get("honest_cosines") or [] if x["shared_shards"]]) for r in res]
        )
        rows.append(
            ["other honest pairs' cosine, max (pairs)"]
            + [cosine_cell([x for x in r.get("honest_cosines") or [] if not x["shared_shards"]]) for r in res]
        )
        rows.append(["Gaussian windows: honest co-holders by round"]
                    + [coholders_cell(r, "Gaussian windows") for r in res])  # fmt: skip
    rows.append(["run status, rounds (fragment statuses), wall"]
                + [f"{r['status']}, {r['rounds']} ({', '.join(r['fragment_statuses'])}), {r['wall_s']} s" for r in res])  # fmt: skip
    cmd = "$(scripts/venv.sh)/bin/python bench/freeriders.py" + "".join(
        f" --{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in vars(a).items()
        if k not in ("timeout", "from_transcripts") and v not in ("", None) and not isinstance(v, bool)
        and not (k in ("sketch_dim", "shard_holders") and v == 0)
    ) + ("" if a.scoring else " --no-scoring") + (" --score-corpus" if a.score_corpus else "") + (
        " --cycle" if a.cycle else "")  # fmt: skip
    notes = [
        f"{HONEST} honest reference trainers + {len(FREE_RIDERS)} free riders (M={HONEST + len(FREE_RIDERS)}, "
        f"K={HONEST + sum(1 for _, att in FREE_RIDERS if att['kind'] not in UNKEPT_KINDS)}: the inputs left after "
        f"the copy and stale rules, so every fragment aggregates), F={a.fragments}, H={a.inner_steps}, "
        f"batch {a.batch}, {a.rounds} rounds, DEMO TimesFM-class model "
        f"({models.DEMO.param_count():,} parameters), dataset "
        + (f"`{SYNTH}`" if a.dataset == "synth" else "the statsmodels corpus as CSV (`tenzro dataset add`, ipfs://)")
        + f", reward pool {a.pool} TNZO, "
        f"grace window {a.grace_ms} ms, "
        + (f"scoring `{json.dumps(scoring_spec(a.score_batch, a.score_test, a.min_gain_ppm))}`" if a.scoring else "no scoring field")
        + (" + `corpus`: the BLAKE3 content hash of the uploaded CSV" if a.scoring and a.score_corpus else "")
        + (f", copies `{{\"sketch_dim\": {a.sketch_dim}}}` (the input sketch, copies.md §7)" if a.sketch_dim else "")
        + (f", shard_split `{a.shard_split}` (scoring.md §3)" if a.shard_split else "")
        + (f", shard_holders `{a.shard_holders}` (scoring.md §3.1)." if getattr(a, "shard_holders", 0) else "."),
        "Payout = ledger balance after the seal − balance right after the faucet (reward + refunded stake − stake − "
        "fees − slashes); fees are ~0.002 TNZO per submission, so an unpaid trainer shows a small negative payout. "
        "kept/inputs = the trainer's inputs in the commits not rejected (copies, replays — stale_of_round — and "
        "refusals are rejected; a "
        "submission the node refused never becomes an input); passed/scored = its inputs the evaluator scored and "
        "that passed the spec's pay test (scoring.md §8: own_improves, the default since label `own-improves`, is "
        "s_own > 0; own_beats_control, the default before, adds s_own > s_ctl; a failed check forfeits N × 10000/rate_bps; "
        "under run_mean_gain no check forfeits and passed is the recorded own_improves verdict: the seal pays nothing to a "
        "trainer whose summed relative own gain, in ppm, is below min_gain_ppm × its scored checks).",
        "Victims: byte copy ← honest 0, copy ×1.0001 ← honest 1, copy + noise ← honest 2, copy by hash ← honest 3. "
        "Each copier waits for its victim's record in a block (CometBFT `/block`), fetches `GET /blobs/<hash>`, "
        "re-encodes with its own binding and submits.",
        f"Label: `{a.label or '-'}`. Command: `{cmd}`.",
    ]  # fmt: skip
    title = "Free riders through tenzro-node" + (f" ({a.label})" if a.label else "")
    raw = {"label": a.label, "args": {k: v for k, v in vars(a).items() if k != "from_transcripts"}, "command": cmd,
           "rules": res}  # fmt: skip
    common.write(f"freeriders-{a.label}" if a.label else "freeriders", title, header, rows, notes, raw)
    if a.label:
        combine()


def cosine_cell(xs: list[dict]) -> str:
    return f"{max(x['cosine'] for x in xs):.4f} ({len(xs)})" if xs else "–"


def coholders_cell(r: dict, name: str) -> str:
    """Per round, how many honest trainers held one of ``name``'s shards too."""
    t = next((t for t in r["trainers"] if t["trainer"] == name), None)
    if t is None or not t.get("co_holders_by_round"):
        return "–"
    return " / ".join(f"r{k}: {sum(c.startswith('honest') for c in v)}" for k, v in t["co_holders_by_round"].items())


def combine() -> None:
    """bench/results/freeriders.{md,json}: every labelled run side by side (before = main, after = pay by score)."""
    runs = []
    for p in sorted(common.RESULTS.glob("freeriders-*.json")):
        d = json.loads(p.read_text())
        if d.get("label") and d["label"] != "smoke":
            runs.append(d)
    runs.sort(key=lambda d: {"before": 0, "after": 1}.get(d["label"], 2))
    if not runs:
        return
    cols = [(d["label"], r) for d in runs for r in d["rules"]]
    header = ["trainer"] + [f"{lab}: {r['name']}" for lab, r in cols]
    names = [t["trainer"] for t in cols[0][1]["trainers"]]
    rows = []
    for i, n in enumerate(names):
        rows.append([n] + [f"{r['trainers'][i]['vs_median_honest']:.3f}×" + (" (slashed)" if r["trainers"][i][
            "slashed_tnzo"] else "") for _, r in cols])  # fmt: skip
    rows.append(["median honest payout, TNZO"] + [f"{r['median_honest_tnzo']:.4f}" for _, r in cols])
    rows.append(["**worst free rider / median honest** (goal ≤ 0.05)"]
                + [f"**{r['worst_free_rider_vs_median']:.3f}**" for _, r in cols])  # fmt: skip
    rows.append(["**honest spread** (goal ≤ 0.10)"] + [f"**{r['honest_spread']:.3f}**" for _, r in cols])
    rows.append(["honest slashed"] + [str(r["honest_slashed"]) for _, r in cols])
    rows.append(["rounds committed (fragment statuses)"]
                + [f"{r['rounds']} ({', '.join(r.get('fragment_statuses', []))})" for _, r in cols])  # fmt: skip
    notes = ["Each cell: the trainer's payout (ledger balance change over the run) / the median honest payout. "
             "Per-trainer TNZO, kept inputs and slashes: `freeriders-<label>.md`."]  # fmt: skip
    notes += ["`before` ran against a tenzro-node built from main (`TENZRO_BIN_DIR=<main's bin>`, before pay by score), "
              "`after` against main + the `score` branch; the trainers are this branch's in both. Analysis: "
              "`freeriders-findings.md`."]  # fmt: skip
    notes += [f"`{d['label']}`: `{d['command']}`" for d in runs]
    common.write("freeriders", "Free riders: payout relative to the median honest trainer", header, rows, notes,
                 {"runs": runs})  # fmt: skip


if __name__ == "__main__":
    main()
