"""Runs a whole training task on a live node: sponsor key + faucet, post the task with the model's
deterministic initial weights, launch M trainer processes (``tenzro-trainer run``), follow the rounds
(held-out loss of the committed weights, accepted submissions), wait for the seal and verify the
receipt. Used by ``scripts/demo.sh`` and the benchmarks under ``bench/``."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import data, models, sponsor, weights
from .canon import content_hash
from .evaluate import heldout_mse, node_sources, pull_model, task_data
from .identity import Key
from .rpc import Client, NodeUnavailable, RpcError

REF = "statsmodels://co2,sunspots,elnino,nile,macrodata"


@dataclass
class Experiment:
    rpc: str
    workdir: Path
    rounds: int = 20
    m: int = 8
    k: int = 6
    f: int = 4
    h: int = 24
    family: str = "timesfm"
    metadata: dict = field(default_factory=lambda: dict(models.DEMO.metadata(), stride=2))
    aggregation: str = "Mean"
    aggregation_params: dict | None = None
    lr: float = 1e-3
    batch: int = 32
    attackers: dict[int, dict] = field(default_factory=dict)
    grace_window_ms: int = 3000
    task_id: str = ""
    bins: Path | None = None
    quiet: bool = False
    replay: bool = False  # also re-execute the run from the node's stored payloads (tenzro receipt replay)
    compression: dict | None = None  # the spec's compression field, e.g. {"codec": "int4-block", "block": 64}
    dataset: str = "statsmodels"  # or "ipfs": publish the corpus with `tenzro dataset add`, post its ipfs:// ref
    sync_strategy: str = ""  # the spec's sync_strategy ("" leaves it out: blocking)
    trainer_rpc: str = ""  # the URL the trainers use (default rpc), e.g. a proxy across a shaped link
    launcher: list[str] = field(default_factory=list)  # prefix of the trainer command, e.g. ip netns exec NS
    # score every submission with the built-in evaluator on the corpus (docs/protocol/scoring.md): the spec's
    # scoring field names the corpus CSV by content hash, sent to the node before the posting
    scoring: bool = False
    scoring_rate_bps: int = 10000
    scoring_batch: int = 16  # the windows of each batch (wire.DefaultScoringBatch)
    scoring_test: str = ""  # the spec's scoring.test: "" (own_improves, the default), "own_beats_control", "own_gains_relative" or "run_mean_gain"
    dataset_ref: str = ""  # a synth:// ref to post instead (its dataset_hash is its definition's hash)
    reward_pool: int = 10**18
    spec_extra: dict = field(default_factory=dict)  # more spec fields (scoring, copies, round_deadline_ms, ...)
    trainer_funds: int = 10**19
    balances_before: dict[str, int] = field(default_factory=dict)  # DID -> balance right after the faucet
    # with dataset "ipfs" and a scoring spec field: upload corpus.csv as a blob and name it as scoring.corpus
    # (the content hash of the CSV the evaluator draws its windows from)
    score_corpus: bool = False
    trainer_extra: dict = field(default_factory=dict)  # more trainer.yaml keys (e.g. streaming: {...})


@dataclass
class RoundRow:
    round: int
    eval_loss: float
    accepted: int
    elapsed_s: float


def _say(e: Experiment, msg: str) -> None:
    if not e.quiet:
        print(msg, flush=True)


def start(e: Experiment) -> tuple[Client, str, list[subprocess.Popen], list[Key]]:
    e.workdir.mkdir(parents=True, exist_ok=True)
    c = Client(e.rpc)
    sp = Key.generate("human")
    sp.save(e.workdir / "sponsor.json")
    c.faucet(sp.did, 10**21)
    keys = []
    for i in range(e.m):
        k = Key.generate("machine")
        k.save(e.workdir / f"trainer{i}.json")
        c.faucet(k.did, e.trainer_funds)
        e.balances_before[k.did] = int(c.get_balance(k.did)["balance"])
        keys.append(k)
    init_model = models.build(e.family, e.metadata, seed=0)
    task = e.task_id or f"demo-{e.family}-{time.strftime('%Y%m%d-%H%M%S')}"
    if e.dataset_ref.startswith("synth://"):
        from . import synth

        ref, dhash = e.dataset_ref, synth.parse_ref(e.dataset_ref).hash().hex()
    elif e.dataset == "ipfs":
        ref, dhash = publish_dataset(e)
    else:
        ref, dhash = REF, data.corpus_hash(data.load_corpus(REF)).hex()
    extra = dict(e.spec_extra)
    if e.score_corpus and isinstance(extra.get("scoring"), dict):
        if e.dataset != "ipfs":
            raise ValueError("score_corpus needs dataset='ipfs' (a CSV corpus)")
        blob = (e.workdir / "corpus.csv").read_bytes()
        c.put_blob(blob, key=sp)
        extra["scoring"] = {**extra["scoring"], "corpus": content_hash(blob).hex()}
    spec = sponsor.make_spec(
        task, sp, family=e.family, metadata=e.metadata,
        param_count=sum(p.numel() for p in init_model.parameters()),
        fragments=e.f, trainers=e.m, quorum=e.k, inner_steps=e.h, max_rounds=e.rounds,
        aggregation=e.aggregation, aggregation_params=e.aggregation_params,
        dataset_ref=ref, dataset_hash=dhash,
        reward_pool=str(e.reward_pool), grace_window_ms=e.grace_window_ms,
        **({"compression": e.compression} if e.compression else {}),
        **({"sync_strategy": e.sync_strategy} if e.sync_strategy else {}), **extra,
    )  # fmt: skip
    # The initial weights in the spec's dtype (architecture.dtype): the node takes no other.
    init = weights.model_to_safetensors(init_model, spec["architecture"]["dtype"])
    (e.workdir / "init.safetensors").write_bytes(init)
    corpus = None
    if e.scoring:
        corpus = write_corpus_csv(e)
        spec["scoring"] = scoring_field(e, corpus.read_bytes())
    (e.workdir / "spec.json").write_text(json.dumps(spec, indent=2))
    cli = _cli(e)
    if cli:  # the sponsor's real flow: tenzro train post-task --spec --init-weights --key
        extra = ["--corpus", str(corpus)] if corpus else []
        p = subprocess.run(
            [cli, "--rpc", e.rpc, "train", "post-task", "--spec", str(e.workdir / "spec.json"),
             "--init-weights", str(e.workdir / "init.safetensors"), "--key", str(e.workdir / "sponsor.json"), *extra],
            capture_output=True, text=True,
        )  # fmt: skip
        if p.returncode != 0:
            raise RuntimeError(f"tenzro train post-task failed: {p.stderr.strip()}")
        _say(e, f"$ tenzro train post-task --spec spec.json --init-weights init.safetensors --key sponsor.json\n"
             f"  {p.stdout.strip()}")  # fmt: skip
    else:
        res = sponsor.post(c, sp, spec, init, score_corpus=corpus.read_bytes() if corpus else None)
        _say(e, f"posted task {task} (spec_hash {res.get('spec_hash', '')})")
    _say(e, f"task {task}: M={e.m} K={e.k} F={e.f} H={e.h} rounds={e.rounds} rule={e.aggregation}, "
         f"{spec['architecture']['param_count']:,} parameters")  # fmt: skip
    procs = []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for i, k in enumerate(keys):
        cfg: dict[str, Any] = {
            "node_rpc": e.trainer_rpc or e.rpc, "trainer_did": k.did, "trainer_keypair": str(e.workdir / f"trainer{i}.json"),
            "task_id": task, "inner": {"optimizer": "adamw", "lr": e.lr, "weight_decay": 0.1, "beta1": 0.9,
                                       "beta2": 0.95, "inner_steps": e.h, "batch_size": e.batch},
            "device": "auto", "dtype": "auto", "gradient_checkpointing": False, "metrics": {"port": 0},
            "stake": str(10**17), "threads": 1, "eval": False, "poll_interval": 0.1, "log_format": "json",
        }  # fmt: skip
        cfg.update(e.trainer_extra)
        if i in e.attackers:
            cfg["attack"] = dict(e.attackers[i])
            if isinstance(cfg["attack"].get("victim"), int):  # a copier names its victim by trainer index
                cfg["attack"]["victim"] = keys[cfg["attack"]["victim"]].did
        p = e.workdir / f"trainer{i}.yaml"
        p.write_text(yaml.safe_dump(cfg, sort_keys=False))
        log = open(e.workdir / f"trainer{i}.log", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [*e.launcher, sys.executable, "-m", "tenzro_trainer", "run", "--config", str(p)],
                stdout=log,
                stderr=log,
                env=env,
            )  # fmt: skip
        )
    return c, task, procs, keys


def write_corpus_csv(e: Experiment) -> Path:
    """Writes the statsmodels corpus as CSV (values in repr form, so its corpus hash is the same)."""
    series = data.load_corpus(REF)
    path = e.workdir / "corpus.csv"
    n = max(len(s.values) for s in series)
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([s.name for s in series])
        for i in range(n):
            w.writerow([repr(float(s.values[i])) if i < len(s.values) else "" for s in series])
    return path


SCORE_PARAMS = ("context_len", "horizon", "patch_len", "d_model", "n_layers", "n_heads", "d_ff")


GRANITE_SCORE_PARAMS = ("context_len", "horizon", "patch_len", "d_model", "num_layers", "decoder_num_layers")
GRANITE_FAMILIES = ("granite-ttm", "granite_ttm", "ttm", "granite")  # models.build's names for the family
CHRONOS_FAMILIES = ("chronos-bolt", "chronos_bolt", "chronos")  # models.build's names for the family


def scoring_field(e: Experiment, corpus: bytes) -> dict:
    """The spec's scoring field for a family with a built-in evaluator (TimesFM-class: TimesFMScore; Granite-TTM:
    GraniteTTMScore; Chronos-Bolt: ChronosBoltScore): the evaluator with the model's configuration, every submission scored on batches of the
    corpus named by its content hash."""
    md = e.metadata
    if e.family.lower() in GRANITE_FAMILIES:
        from .models.granite_ttm import TINY as GRANITE_TINY

        cfg_g = {**GRANITE_TINY, **md}
        evaluator, params = "GraniteTTMScore", {k: int(cfg_g[k]) for k in GRANITE_SCORE_PARAMS}
    elif e.family.lower() in CHRONOS_FAMILIES:
        from .models.chronos_bolt import TINY as CHRONOS_TINY

        cfg_c = {**CHRONOS_TINY, **md}  # the evaluator's nine parameters are the adapter's TINY keys
        evaluator, params = "ChronosBoltScore", {k: int(cfg_c[k]) for k in CHRONOS_TINY}
    elif e.family == "timesfm":
        if any(md.get(k) not in (None, md.get("d_ff")) for k in ("embed_hidden", "head_hidden")):
            raise ValueError("TimesFMScore takes embed/head hidden widths equal to d_ff")
        cfg = models.TimesFMConfig.from_metadata(md)
        evaluator, params = "TimesFMScore", {k: getattr(cfg, k) for k in SCORE_PARAMS}
    else:
        raise ValueError(f"no built-in evaluator for family {e.family!r}")
    field = {
        "evaluator": evaluator,
        "params": params,
        "rate_bps": e.scoring_rate_bps,
        "batch": e.scoring_batch,
        "corpus": content_hash(corpus).hex(),
    }
    if e.scoring_test:
        field["test"] = e.scoring_test
    return field


def publish_dataset(e: Experiment) -> tuple[str, str]:
    """Writes the statsmodels corpus as CSV and publishes it with ``tenzro dataset add``, signed by the
    sponsor's key (the node pins it for that DID): returns the ``ipfs://`` ref and the dataset_hash."""
    cli = _cli(e)
    if cli is None:
        raise RuntimeError("DEMO_DATASET=ipfs needs the tenzro CLI (--bins)")
    series = data.load_corpus(REF)
    path = write_corpus_csv(e)
    p = subprocess.run(
        [
            cli,
            "--rpc",
            e.rpc,
            "dataset",
            "add",
            "--format",
            "json",
            "--key",
            str(e.workdir / "sponsor.json"),
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise RuntimeError(f"tenzro dataset add failed: {p.stderr.strip()}")
    rec = json.loads(p.stdout)
    want = data.corpus_hash(series).hex()
    if rec["dataset_hash"] != want:
        raise RuntimeError(f"corpus.csv hashes to {rec['dataset_hash']}, the corpus to {want}")
    _say(e, f"$ tenzro dataset add corpus.csv\n  dataset_ref:  {rec['ref']}\n  dataset_hash: {rec['dataset_hash']}")
    return rec["ref"], rec["dataset_hash"]


def follow(
    e: Experiment,
    c: Client,
    task: str,
    procs: list[subprocess.Popen],
    timeout: float = 3600,
    key: Key | None = None,
    defer_eval: bool = False,
) -> list[RoundRow]:
    """Follows the run to its seal: each round's held-out loss of the committed weights and accepted count.
    ``key`` (default: the experiment's sponsor key, ``sponsor.json`` in the workdir, when there is one) signs
    the node fetch of an ``ipfs://`` corpus, which a node off --dev refuses unsigned. ``defer_eval`` keeps a
    copy of each round's weights and evaluates them after the seal (so the follower takes no CPU from the
    trainers while they run; the timing benchmarks)."""
    if key is None and (e.workdir / "sponsor.json").exists():
        key = Key.load(e.workdir / "sponsor.json")
    sources = node_sources(Client(e.rpc), key)
    _, heldout = task_data(json.loads((e.workdir / "spec.json").read_text()), sources=sources)
    rows: list[RoundRow] = []
    t0 = time.monotonic()
    seen = -1
    model = None
    kept: list[dict] = []
    accepted_before = 0
    while time.monotonic() - t0 < timeout:
        try:
            run = c.get_run(task)
        except (NodeUnavailable, RpcError):
            time.sleep(0.5)
            continue
        r = int(run["round"])
        sealed = run["status"] == "sealed"
        if run["status"] == "running" and r != seen or sealed:
            model = pull_model(c, run, model)
            loss = float("nan") if defer_eval else heldout_mse(model, heldout)
            acc = sum(int(v.get("accepted", 0)) for v in (run.get("trainer_metrics") or {}).values())
            row = RoundRow(r if not sealed else e.rounds, loss, acc - accepted_before, time.monotonic() - t0)
            accepted_before = acc
            if not (sealed and rows and rows[-1].round == row.round):
                rows.append(row)
                if defer_eval:
                    kept.append({n: t.detach().clone() for n, t in model.state_dict().items()})
                label = "sealed" if sealed else f"start of round {r:3d}"
                _say(e, f"  {label:>18}  held-out MSE {loss:.4f}  accepted +{row.accepted:3d}  t={row.elapsed_s:6.1f}s")
            seen = r
        if sealed or run["status"] == "cancelled":
            break
        if all(p.poll() is not None for p in procs):
            _say(e, "all trainers exited before the seal; see trainer*.log")
            break
        time.sleep(0.2)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.terminate()
    if defer_eval and model is not None:
        for row, sd in zip(rows, kept, strict=True):
            model.load_state_dict(sd)
            row.eval_loss = heldout_mse(model, heldout)
    return rows


def _cli(e: Experiment) -> str | None:
    cli = (e.bins / "tenzro") if e.bins else shutil.which("tenzro")
    return str(cli) if cli and Path(cli).exists() else None


def verify_receipt(e: Experiment, c: Client, task: str) -> tuple[bool, str]:
    """Fetches the receipt and verifies it offline with ``tenzro receipt verify`` (or, without the
    CLI, with the node's tenzro_training_verifyReceipt)."""
    path = e.workdir / "receipt.json"
    cli = _cli(e)
    if cli:
        g = subprocess.run([cli, "--rpc", e.rpc, "train", "get-receipt", "--task-id", task, "--out", str(path)],
                           capture_output=True, text=True)  # fmt: skip
        if g.returncode != 0:
            return False, f"tenzro train get-receipt: {g.stderr.strip()}"
        p = subprocess.run([cli, "receipt", "verify", "--receipt", str(path)], capture_output=True, text=True)
        msg = "$ tenzro receipt verify --receipt receipt.json: " + (p.stdout + p.stderr).strip()
        if p.returncode == 0 and e.replay:
            q = subprocess.run([cli, "--rpc", e.rpc, "receipt", "replay", "--receipt", str(path)],
                               capture_output=True, text=True)  # fmt: skip
            msg += "\n$ tenzro receipt replay --receipt receipt.json: " + (q.stdout + q.stderr).strip()
            return q.returncode == 0, msg
        return p.returncode == 0, msg
    rc = c.get_receipt(task)
    path.write_text(json.dumps(rc, indent=2))
    try:
        v = c.call("tenzro_training_verifyReceipt", {"receipt": rc, "root": rc["run_root"]})
    except RpcError as err:
        return False, f"no tenzro CLI and the node refused verifyReceipt: {err}"
    return v.get("valid") == 1, f"tenzro_training_verifyReceipt: valid={v.get('valid')} {v.get('reason', '')}"


def plot(rows: list[RoundRow], out: Path, title: str, extra: dict[str, list[float]] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r.round for r in rows], [r.eval_loss for r in rows], marker="o", label="DiLoCo via tenzro-node")
    for name, ys in (extra or {}).items():
        ax.plot(range(len(ys)), ys, marker=".", label=name)
    ax.set_xlabel("round (outer step)")
    ax.set_ylabel("held-out MSE (normalized)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def trainer_stats(e: Experiment) -> list[dict]:
    out = []
    for i in range(e.m):
        p = e.workdir / f"trainer{i}.log"
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("msg") == "round done":
                d["trainer"] = i
                out.append(d)
    return out
