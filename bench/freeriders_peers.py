"""Which per-input pay test separates wrong-data training from honest training under Krum? (issue 23, offline study)

Through the node, the "Gaussian windows" free rider (trains on standard Gaussian windows instead of its shard) is
paid under Krum by every per-input test tried (`bench/results/freeriders-findings.md`): early in training any step
lowers every block's loss, and under Krum the round-start weights are one trainer's step, so an honest input's gain
on its own block does not reliably beat its gain on a control block. This script asks, in one process and without
a chain, whether a *peer-relative* test would: does input i lower the loss of i's own block more than the median
of the round's other inputs lower that same block? An honest trainer trained on that block's shard and its peers
did not; a wrong-data trainer did not either, so it should land at the peers' median, not above it.

The simulation follows the protocol's arithmetic: M honest reference trainers (AdamW, H inner steps, batch B, their
contiguous shard of the statsmodels corpus, the inner optimizer's state kept across rounds), free riders (wrong
data, zeros, noise at the honest per-tensor norm), the round's aggregate by Mean or Krum, the outer Nesterov step
with momentum; each input scored as the evaluator does (scoring.md §1: the first Nesterov step on the round's start
weights, no momentum; loss on one batch of the trainer's own shard and one control batch of the other shards,
before and after). The PyTorch forward stands in for the Wasm evaluator (it matches it within the stated
tolerance). Per rule, every round and trainer: the tests' verdicts.

    $(scripts/venv.sh)/bin/python bench/freeriders_peers.py --seeds 3 --rounds 6

``--own-batch both`` (branch trainedwin) has every trainer draw its inner batches with ``data.round_batches``, as the
node's reference trainer does, and scores each input twice on the same trajectory: own batch from the whole shard
pool (today's draw) and from the windows the trainer was assigned this round, with one shared control batch;
``--shard-count`` adds shards no trainer holds, as in the node bench. ``bench/freeriders_peers_summary.py`` tabulates
such runs.

Writes bench/results/freeriders-peers[-<label>].{md,json}.
"""

from __future__ import annotations

import argparse
import copy
import csv
import gzip
import io
import json
import statistics

import numpy as np
import torch

import common
from tenzro_trainer import data, models, synth

HONEST = 4
RIDERS = ("wrong_data", "zeros", "noise_norm")


def krum(grads: list[torch.Tensor], f: int) -> int:
    n = len(grads)
    g = torch.stack(grads).double()
    d = torch.cdist(g, g) ** 2
    scores = []
    for i in range(n):
        row = torch.sort(torch.cat([d[i, :i], d[i, i + 1 :]])).values
        scores.append(float(row[: n - f - 2].sum()))
    return int(np.argmin(scores))


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load(model: torch.nn.Module, v: torch.Tensor) -> None:
    k = 0
    with torch.no_grad():
        for p in model.parameters():
            n = p.numel()
            p.copy_(v[k : k + n].view_as(p))
            k += n


def loss_at(model: torch.nn.Module, w: torch.Tensor, xb: np.ndarray, yb: np.ndarray) -> float:
    load(model, w)
    with torch.no_grad():
        return float(model.loss(torch.from_numpy(xb), torch.from_numpy(yb)))


def series_counts(series: list[data.Series], window: int, holdout: float = 0.2) -> list[int]:
    """Training windows per series, in make_windows' enumeration order (stride 1)."""
    return [max(0, int(len(s.values) * (1.0 - holdout)) - window + 1) for s in series]


def series_shards(counts: list[int], shard_count: int, gap: int) -> tuple[list[np.ndarray], list[str]]:
    """Series-balanced shards (the loader's data.series_shard_blocks, spec ``"shard_split": "series"``): each
    shard's window indices, and a line per series saying whether it was cut into a time block per shard or dealt
    whole (too short to cut: ⌊windows/S⌋ ≤ gap)."""
    blocks = data.series_shard_blocks(counts, shard_count, gap)
    owner = {lo: s for s, bs in enumerate(blocks) for lo, _ in bs}
    notes, base = [], 0
    for i, n in enumerate(counts):
        if n // shard_count > gap:
            notes.append(f"series {i} ({n} windows): split into {shard_count} blocks")
        elif n > 0:
            notes.append(f"series {i} ({n} windows): whole to shard {owner[base]}")
        base += n
    return [np.concatenate([np.arange(lo, hi, dtype=np.int64) for lo, hi in bs]) for bs in blocks], notes


def synth_corpus(n_series: int, length: int, seed: int = 0) -> list[data.Series]:
    """A balanced corpus: n_series KernelSynth draws of ``length`` points each (synth.series on the train split),
    written out as a corpus CSV and read back with the node's CSV parser (data.csv_series)."""
    ref = synth.SynthRef(seed=seed)
    cols = [synth.series(ref, "train", i, length) for i in range(n_series)]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([f"ks{i}" for i in range(n_series)])
    for t in range(length):
        w.writerow([repr(float(c[t])) for c in cols])
    return data.csv_series(buf.getvalue(), "synth.csv")


def corpus(name: str, n_series: int, length: int) -> list[data.Series]:
    if name == "statsmodels":
        return [s for n in data.STATSMODELS_SETS for s in data._statsmodels_series(n)]
    return synth_corpus(n_series, length)


def run(
    seed: int,
    rule: str,
    rounds: int,
    h: int,
    batch: int,
    score_batch: int,
    lr_out: float,
    mu: float,
    series: list[data.Series],
    split: str,
    own_batch: str = "shard",
    shard_count: int = 0,
    pairs: str = "",
) -> tuple[list[dict], list[dict]]:
    torch.manual_seed(seed)
    md = models.DEMO.metadata()
    win, _ = data.make_windows(series, md["context_len"], md["horizon"])
    n_tr = HONEST + len(RIDERS)
    gap = data.shard_gap(md["context_len"] + md["horizon"], 1)
    counts = series_counts(series, md["context_len"] + md["horizon"])
    n_sh = shard_count or (HONEST if pairs else n_tr)
    if split == "contiguous":
        all_sh = [data.shard_indices(win.n, s, n_sh, gap) for s in range(n_sh)]
    else:
        all_sh, _ = series_shards(counts, n_sh, gap)
    # --shard-count S > trainers: as in the node bench (12 shards, 4 honest, 8 free riders of which only the
    # wrong-data one trains at all), shards no trainer trains on; which shard each trainer holds is drawn per seed
    mine = (
        list(range(n_tr))
        if n_sh == n_tr and not pairs
        else [int(x) for x in np.random.default_rng(20_000 + seed).permutation(n_sh)[:n_tr]]
    )
    if pairs == "riders":  # free rider k holds the shard of honest trainer k (each rider's shard trained honestly)
        mine = mine[:HONEST] + [mine[k] for k in range(len(RIDERS))]
    elif pairs == "mixed":  # honest 0 and 1 share a shard; wrong data holds honest 2's, zeros honest 3's, noise its own
        mine = [mine[0], mine[0], mine[1], mine[2], mine[1], mine[2], mine[3]]
    holder = [next((j for j in range(n_tr) if j != i and mine[j] == mine[i]), None) for i in range(n_tr)]
    shards = [all_sh[mine[i]] for i in range(n_tr)]
    others = [np.concatenate([all_sh[s] for s in range(n_sh) if s != mine[i]]) for i in range(n_tr)]
    rng = np.random.default_rng(seed)
    # --own-batch trained/both: every trainer's inner batches are the loader's (data.round_batches, as the node's
    # reference trainer draws them), so "the windows trained on this round" is defined; the score draws use their
    # own generator so that both own-batch modes score the same trajectory with the same control batches
    round_draw = own_batch != "shard"
    srng = np.random.default_rng(10_000 + seed)
    task = f"peers-{seed}"
    base = models.build("timesfm", md, seed=seed)
    theta = flat(base)
    buf = torch.zeros_like(theta)
    workers = []
    for _ in range(n_tr):
        m = copy.deepcopy(base)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        workers.append((m, opt))
    scorer = copy.deepcopy(base)
    out = []
    mats = []
    for r in range(rounds):
        deltas = []
        honest_norm = None
        # each trainer's assigned batches of this round (a free rider is assigned them too and ignores them)
        rbs = [
            data.round_batches(
                win.n,
                [mine[i]],
                n_sh,
                task + (f"/{i}" if pairs else ""),
                r,
                h,
                batch,
                gap,
                counts if split == "series" else None,
            )
            for i in range(n_tr)
        ]
        trained = [np.unique(np.concatenate(b)) for b in rbs]
        for i, (m, opt) in enumerate(workers):
            kind = "honest" if i < HONEST else RIDERS[i - HONEST]
            if kind == "zeros":
                deltas.append(torch.zeros_like(theta))
                continue
            if kind == "noise_norm":
                deltas.append(None)  # filled below with the honest norm
                continue
            load(m, theta)
            m.train()
            for step in range(h):
                if kind == "wrong_data":
                    xb = rng.standard_normal((batch, md["context_len"])).astype(np.float32)
                    yb = rng.standard_normal((batch, md["horizon"])).astype(np.float32)
                else:
                    idx = rbs[i][step] if round_draw else rng.choice(shards[i], size=batch)
                    xb, yb = win.get(idx)
                loss = m.loss(torch.from_numpy(xb), torch.from_numpy(yb))
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
            deltas.append(theta - flat(m))
        honest_norm = statistics.median(float(d.norm()) for d in deltas[:HONEST])
        for i, d in enumerate(deltas):
            if d is None:
                z = torch.from_numpy(rng.standard_normal(theta.numel()).astype(np.float32))
                deltas[i] = z * (honest_norm / float(z.norm()))
        # scoring (scoring.md §1): first Nesterov step, no momentum, on the round's start weights
        stepped = [theta - lr_out * (d * (1 + mu)) for d in deltas]
        if round_draw:
            ctl = [win.get(srng.choice(others[i], size=score_batch)) for i in range(n_tr)]
            pools = {"shard": shards, "trained": trained} if own_batch == "both" else {own_batch: trained}
            owns = {
                mode: [
                    win.get(srng.choice(pool[i], size=score_batch, replace=len(pool[i]) < score_batch))
                    for i in range(n_tr)
                ]
                for mode, pool in pools.items()
            }
        else:
            owns = {"shard": [win.get(rng.choice(shards[i], size=score_batch)) for i in range(n_tr)]}
            ctl = [win.get(rng.choice(others[i], size=score_batch)) for i in range(n_tr)]
        before_ctl = [loss_at(scorer, theta, *ctl[i]) for i in range(n_tr)]
        s_ctl = [before_ctl[i] - loss_at(scorer, stepped[i], *ctl[i]) for i in range(n_tr)]
        sel = krum(deltas, 2) if rule == "Krum" else -1
        agg = torch.stack(deltas).mean(0) if rule == "Mean" else deltas[sel]
        for mode, own in owns.items():
            before_own = [loss_at(scorer, theta, *own[i]) for i in range(n_tr)]
            # gain[j][i]: input j's loss drop on trainer i's own block
            gain = [[before_own[i] - loss_at(scorer, stepped[j], *own[i]) for i in range(n_tr)] for j in range(n_tr)]
            # the round's aggregate (the rule's output over every input) and its gain on each block, as a
            # validator re-executes it: the same first Nesterov step on the same start weights
            agg_gain = [
                before_own[i] - loss_at(scorer, theta - lr_out * (agg * (1 + mu)), *own[i]) for i in range(n_tr)
            ]
            mats.append(
                {"seed": seed, "rule": rule, "round": r, "own_batch": mode, "selected": sel, "gain": gain,
                 "agg_gain": agg_gain}
            )  # fmt: skip
            # adv[j][l]: input j's gain on block l over the median of the other inputs' gains on that block
            adv = [
                [gain[j][b] - statistics.median(gain[k][b] for k in range(n_tr) if k != j) for b in range(n_tr)]
                for j in range(n_tr)
            ]
            for i in range(n_tr):
                s_own = gain[i][i]
                peers = [gain[j][i] for j in range(n_tr) if j != i]
                rel_own, rel_ctl = s_own / before_own[i], s_ctl[i] / before_ctl[i]
                out.append(
                    {
                        "seed": seed,
                        "rule": rule,
                        "round": r,
                        "own_batch": mode,
                        "trainer": "honest " + str(i) if i < HONEST else RIDERS[i - HONEST],
                        "shard": mine[i],
                        "coholder_gain": None if holder[i] is None else gain[holder[i]][i],
                        "s_own": s_own,
                        "s_ctl": s_ctl[i],
                        "own_before": before_own[i],
                        "ctl_before": before_ctl[i],
                        "rel_own": rel_own,
                        "rel_ctl": rel_ctl,
                        "peer_median": statistics.median(peers),
                        "peer_honest_median": statistics.median(gain[j][i] for j in range(HONEST) if j != i),
                        "own_improves": s_own > 0,
                        "own_beats_control": s_own > 0 and s_own > s_ctl[i],
                        "relative": s_own > 0 and rel_own > rel_ctl,
                        "own_beats_peers": s_own > 0 and s_own > statistics.median(peers),
                        "net_gain": s_own > 0 and s_own + s_ctl[i] > 0,
                        "agg_gain": agg_gain[i],
                        "beats_aggregate": s_own > 0 and s_own > agg_gain[i],
                        "tops_inputs": s_own > 0 and s_own >= max(peers),
                        "own_specific": s_own > 0
                        and adv[i][i] > statistics.median(adv[i][b] for b in range(n_tr) if b != i),
                    }
                )
        # the outer step (Nesterov SGD with momentum, as the syncer)
        buf = mu * buf + agg
        theta = theta - lr_out * (agg + mu * buf)
    return out, mats


def kind(trainer: str) -> str:
    return "honest" if trainer.startswith("honest") else trainer


def verdict_tables(rows: list[dict], rules: list[str], tests: tuple[str, ...], margin: float) -> list[str]:
    """Per rule and own-batch mode: checks passed per kind of trainer (honest pooled), the per-check
    rel_own − rel_ctl range, and the run-level means (per seed and trainer, over its rounds): the honest lowest
    against every free rider's highest."""
    modes = sorted({x["own_batch"] for x in rows}, key=lambda m: m != "shard")
    kinds = ("honest", "wrong_data", "noise_norm", "zeros")
    out = [
        f"rel_margin: s_own > 0 and rel_own − rel_ctl > {margin} (rel = gain / loss before, on each batch). "
        "Honest = 4 trainers × seeds × rounds checks; each free rider seeds × rounds.\n",
        "| rule | own batch | trainer | " + " | ".join(tests) + " | rel_own − rel_ctl per check (min … max) |",
        "|---|---|---|" + "---|" * len(tests) + "---|",
    ]
    for rule in rules:
        for mode in modes:
            for k in kinds:
                xs = [x for x in rows if x["rule"] == rule and x["own_batch"] == mode and kind(x["trainer"]) == k]
                if not xs:
                    continue
                d = [x["rel_own"] - x["rel_ctl"] for x in xs]
                cells = [f"{sum(x[t] for x in xs)}/{len(xs)}" for t in tests]
                out.append(f"| {rule} | {mode} | {k} | " + " | ".join(cells) + f" | {min(d):+.3f} … {max(d):+.3f} |")
    out += [
        "",
        "Run level: per seed and trainer, the mean over its rounds of rel_own (A) and of rel_own − rel_ctl (B). "
        "Gap = honest lowest − the free rider's highest (> 0: a threshold between them separates every run).\n",
        "| rule | own batch | measure | honest lowest … highest | wrong_data highest | noise_norm highest | zeros "
        "highest | gap to wrong_data | gap to noise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rule in rules:
        for mode in modes:
            for name, f in (
                ("A: mean rel_own", lambda x: x["rel_own"]),
                ("B: mean rel_own − rel_ctl", lambda x: x["rel_own"] - x["rel_ctl"]),
            ):
                means: dict[str, list[float]] = {}
                groups: dict[tuple, list[float]] = {}
                for x in rows:
                    if x["rule"] == rule and x["own_batch"] == mode:
                        groups.setdefault((x["seed"], x["trainer"]), []).append(f(x))
                for (_, t), v in groups.items():
                    means.setdefault(kind(t), []).append(statistics.fmean(v))
                h = means["honest"]
                out.append(
                    f"| {rule} | {mode} | {name} | {min(h):+.3f} … {max(h):+.3f} | {max(means['wrong_data']):+.3f} | "
                    f"{max(means['noise_norm']):+.3f} | {max(means['zeros']):+.3f} | "
                    f"**{min(h) - max(means['wrong_data']):+.3f}** | {min(h) - max(means['noise_norm']):+.3f} |"
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--h", type=int, default=8, help="inner steps per round")
    ap.add_argument("--batch", type=int, default=16, help="inner batch")
    ap.add_argument("--score-batch", type=int, default=16)
    ap.add_argument("--rules", default="Mean,Krum")
    ap.add_argument(
        "--split",
        choices=("contiguous", "series"),
        default="contiguous",
        help="contiguous: shard_range over the whole enumeration (the protocol's); series: a time block of every "
        "long series per shard, short series dealt whole (series_shards)",
    )
    ap.add_argument(
        "--own-batch",
        choices=("shard", "trained", "both"),
        default="shard",
        help="shard: the own batch from the trainer's whole shard pool (today's draw; trainers draw their inner "
        "batches at random from their shard); trained: from the windows the trainer was assigned this round "
        "(data.round_batches, which every trainer then trains on); both: score the same trajectory both ways",
    )
    ap.add_argument(
        "--shard-count",
        type=int,
        default=0,
        help="shards S (default: one per trainer); with more, each seed draws which shards the trainers hold and "
        "the rest are trained by no one (the node bench: 12 shards, 4 honest trainers, 1 wrong-data rider)",
    )
    ap.add_argument(
        "--pairs",
        choices=("", "riders", "mixed"),
        default="",
        help="shards held by two trainers, S = 4 by default: riders (free rider k holds honest trainer k's shard) or "
        "mixed (honest 0 and 1 share one, wrong data shares honest 2's, zeros honest 3's, noise holds its own); inner "
        "batches drawn per trainer (the task id gets /<trainer>), else both holders would train on the same batches",
    )
    ap.add_argument("--margin", type=float, default=0.02, help="rel_margin: rel_own − rel_ctl > margin")
    ap.add_argument("--corpus", choices=("statsmodels", "synth"), default="statsmodels")
    ap.add_argument("--synth-series", type=int, default=56, help="--corpus synth: series in the corpus")
    ap.add_argument("--synth-len", type=int, default=256, help="--corpus synth: points per series")
    ap.add_argument("--label", default="", help="writes freeriders-peers-<label>.{md,json} (default: no suffix)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    series = corpus(a.corpus, a.synth_series, a.synth_len)
    n_tr = HONEST + len(RIDERS)
    md = models.DEMO.metadata()
    w = md["context_len"] + md["horizon"]
    counts = series_counts(series, w)
    gap = data.shard_gap(w, 1)
    n_sh = a.shard_count or (HONEST if a.pairs else n_tr)
    if a.split == "contiguous":
        total = sum(counts)
        sizes = [len(data.shard_indices(total, s, n_sh, gap)) for s in range(n_sh)]
        notes = []
    else:
        sh, notes = series_shards(counts, n_sh, gap)
        sizes = [len(x) for x in sh]
    rows, mats = [], []
    for seed in range(a.seeds):
        for rule in a.rules.split(","):
            r, m = run(
                seed, rule, a.rounds, a.h, a.batch, a.score_batch, 0.7, 0.9, series, a.split, a.own_batch,
                a.shard_count, a.pairs,
            )  # fmt: skip
            rows += r
            mats += m
    tests = (
        "own_improves",
        "own_beats_control",
        "own_beats_peers",
        "net_gain",
        "beats_aggregate",
        "tops_inputs",
        "own_specific",
    )
    for x in rows:
        x["rel_margin"] = x["s_own"] > 0 and x["rel_own"] - x["rel_ctl"] > a.margin
    if a.own_batch != "shard":
        tests = ("own_improves", "own_beats_control", "relative", "rel_margin", "own_beats_peers", "own_specific")
    flags = "" if a.split == "contiguous" else f" --split {a.split}"
    if a.own_batch != "shard":
        flags += f" --own-batch {a.own_batch} --margin {a.margin}"
    if a.shard_count:
        flags += f" --shard-count {a.shard_count}"
    if a.pairs:
        flags += f" --pairs {a.pairs}"
    if a.corpus != "statsmodels":
        flags += f" --corpus {a.corpus} --synth-series {a.synth_series} --synth-len {a.synth_len}"
    if a.label:
        flags += f" --label {a.label}"
    what = "statsmodels corpus" if a.corpus == "statsmodels" else f"{a.synth_series} KernelSynth series × {a.synth_len}"
    lines = [
        f"# Pay tests, offline (issue 23: wrong data under Krum){' — ' + a.label if a.label else ''}\n",
        f"Command: `$(scripts/venv.sh)/bin/python bench/freeriders_peers.py --seeds {a.seeds} --rounds {a.rounds} "
        f"--h {a.h} --batch {a.batch} --score-batch {a.score_batch}{flags}`. {HONEST} honest trainers + "
        f"{', '.join(RIDERS)}; DEMO TimesFM ({models.DEMO.param_count():,} parameters), {what} "
        f"({sum(counts)} training windows) in {n_sh} {a.split} shards of {sizes} windows; Krum f=2; outer Nesterov "
        "lr 0.7, momentum 0.9. Checks passed out of those scored (every input, every round). beats_aggregate: "
        "s_own > 0 and s_own > the gain of the round's aggregate (Krum: the selected input) on the same block; "
        "tops_inputs: s_own > 0 and no other input of the round gains more on the same block; own_specific: s_own > 0 "
        "and the input's advantage over the median input on its own block exceeds its median advantage on the other "
        "blocks (both need every input scored on every block).\n",
        "| rule | trainer | " + " | ".join(tests) + " | s_own − peer median (min … max) |",
        "|---|---|" + "---|" * len(tests) + "---|",
    ]
    for rule in a.rules.split(","):
        names = sorted({x["trainer"] for x in rows if x["rule"] == rule}, key=lambda s: (not s.startswith("honest"), s))
        for name in names:
            xs = [x for x in rows if x["rule"] == rule and x["trainer"] == name]
            diffs = [x["s_own"] - x["peer_median"] for x in xs]
            cells = [f"{sum(x[t] for x in xs)}/{len(xs)}" for t in tests]
            lines.append(f"| {rule} | {name} | " + " | ".join(cells) + f" | {min(diffs):+.4f} … {max(diffs):+.4f} |")
        hs = [x for x in rows if x["rule"] == rule and x["trainer"].startswith("honest")]
        cells = [f"{sum(x[t] for x in hs)}/{len(hs)}" for t in tests]
        lines.append(f"| {rule} | **all honest** | " + " | ".join(cells) + " | |")
    if a.own_batch != "shard":
        lines = lines[:2] + verdict_tables(rows, a.rules.split(","), tests, a.margin)
    if notes:
        lines += ["", "Series-balanced split:", ""] + [f"- {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    stem = "freeriders-peers" + (f"-{a.label}" if a.label else "")
    (common.RESULTS / f"{stem}.md").write_text(text)
    out = {"args": vars(a), "shard_sizes": sizes, "rows": rows, "gains": mats}
    # the --own-batch runs hold twice the rows: written compact, floats to 7 significant digits (the losses are f32
    # computations), without the gain matrices (every table reads the rows)
    if a.own_batch == "shard":
        dump = json.dumps(out, indent=1)
    else:
        out.pop("gains")
        out["rows"] = [{k: float(f"{v:.7g}") if isinstance(v, float) else v for k, v in x.items()} for x in rows]
        dump = json.dumps(out, separators=(",", ":"))
    if a.own_batch == "shard":
        (common.RESULTS / f"{stem}.json").write_text(dump)
    else:  # 0.5–1.5 MB of rows each: kept gzipped (freeriders_peers_summary.py reads either)
        (common.RESULTS / f"{stem}.json.gz").write_bytes(gzip.compress(dump.encode(), mtime=0))
    print(text)


if __name__ == "__main__":
    main()
