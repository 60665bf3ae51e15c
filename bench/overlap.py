"""Overlapped outer synchronization on a shaped link (issue 26): blocking vs eager vs streaming DiLoCo through a
real tenzro-node, with the trainers in their own network namespace behind a rate-limited veth link (tc tbf, both
directions) and a delaying TCP proxy for the RTT (this kernel has no netem). The strategies run ONE AFTER ANOTHER
(the order rotates per seed), so that they do not compete with each other for the machine's cores. Reports per
strategy and link: the trainers' busy fraction (compute time / wall time per round, from their "round done" log
lines), wall time per round and what the rest of it is spent on, held-out MSE at equal steps and at equal wall
time (the committed weights of every round are kept while the run goes and evaluated after its seal), each seed's
value and the mean, the load average at each run's start, and that every receipt verifies and replays. Needs root
(ip netns, tc). Every namespace, link and process it makes is removed on exit (and stale ones at the start).

    sudo $(scripts/venv.sh)/bin/python bench/overlap.py [--rates 100mbit,1gbit] [--rtt-ms 20] [--seeds 3]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from tenzro_trainer import models
from tenzro_trainer.experiment import Experiment, follow, start, trainer_stats, verify_receipt
from tenzro_trainer.rpc import Client, NodeUnavailable

PROCS: list[subprocess.Popen] = []


class Link:
    """One network namespace for a run's trainers, joined to the root namespace (the node) by a veth pair."""

    def __init__(self, idx: int) -> None:
        tag = f"tzov{os.getpid() % 100000}{idx}"
        subnet = f"10.{77 + idx}.{os.getpid() % 250}"
        self.ns, self.veth_n, self.veth_t = tag, f"{tag}n", f"{tag}t"
        self.node_ip, self.trainer_ip = f"{subnet}.1", f"{subnet}.2"

    def sh(self, *cmd: str, ns: bool = False) -> None:
        full = (["ip", "netns", "exec", self.ns] if ns else []) + list(cmd)
        subprocess.run(full, check=True, capture_output=True, text=True)

    def make(self) -> None:
        self.sh("ip", "netns", "add", self.ns)
        self.sh("ip", "link", "add", self.veth_n, "type", "veth", "peer", "name", self.veth_t)
        self.sh("ip", "link", "set", self.veth_t, "netns", self.ns)
        self.sh("ip", "addr", "add", f"{self.node_ip}/24", "dev", self.veth_n)
        self.sh("ip", "link", "set", self.veth_n, "up")
        self.sh("ip", "addr", "add", f"{self.trainer_ip}/24", "dev", self.veth_t, ns=True)
        self.sh("ip", "link", "set", self.veth_t, "up", ns=True)
        self.sh("ip", "link", "set", "lo", "up", ns=True)

    def shape(self, rate: str) -> None:
        """tbf on both ends of the veth: the node's egress (weights to the trainers) and the trainers' (uploads)."""
        burst = "256kb" if rate.endswith("gbit") else "64kb"
        for dev, ns in ((self.veth_n, False), (self.veth_t, True)):
            pre = ["ip", "netns", "exec", self.ns] if ns else []
            subprocess.run(pre + ["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
            self.sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", burst, "latency", "100ms",
                    ns=ns)  # fmt: skip

    def remove(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.veth_n], capture_output=True)


LINKS: list[Link] = []


def cleanup() -> None:
    for p in PROCS:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    for link in LINKS:
        link.remove()


def remove_stale() -> None:
    """Namespaces and veth ends a killed earlier run of this benchmark left behind (names start with tzov)."""
    ls = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    for name in ls:
        if name.startswith("tzov"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
    for line in links:
        parts = line.split(":")
        if len(parts) > 1 and parts[1].strip().split("@")[0].startswith("tzov"):
            subprocess.run(["ip", "link", "del", parts[1].strip().split("@")[0]], capture_output=True)


def on_signal(sig: int, _frame: object) -> None:
    cleanup()
    sys.exit(128 + sig)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(bins: Path, link: Link) -> tuple[str, subprocess.Popen, Path]:
    port = free_port()
    d = Path(tempfile.mkdtemp(prefix="bench-overlap-node-"))
    log = open(d / "node.log", "wb")  # noqa: SIM115
    p = subprocess.Popen(
        [str(bins / "tenzro-node"), "--dev", "--data-dir", str(d / "data"), "--rpc-addr", f"{link.node_ip}:{port}",
         "--listen-addr", "/ip4/127.0.0.1/tcp/0"], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    PROCS.append(p)
    url = f"http://{link.node_ip}:{port}"
    c = Client(url, timeout=5)
    for _ in range(600):
        try:
            c.node_info()
            return url, p, d
        except NodeUnavailable:
            if p.poll() is not None:
                raise RuntimeError(f"tenzro-node exited; see {d / 'node.log'}") from None
            time.sleep(0.1)
    raise RuntimeError("tenzro-node did not answer")


def start_proxy(node_url: str, delay_ms: float, link: Link) -> str:
    port = free_port()
    target = node_url.removeprefix("http://")
    p = subprocess.Popen(
        ["ip", "netns", "exec", link.ns, sys.executable, str(common.ROOT / "bench" / "delayproxy.py"),
         "--listen", f"127.0.0.1:{port}", "--to", target, "--delay-ms", str(delay_ms)])  # fmt: skip
    PROCS.append(p)
    for _ in range(100):
        r = subprocess.run(["ip", "netns", "exec", link.ns, sys.executable, "-c",
                            f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                           capture_output=True)  # fmt: skip
        if r.returncode == 0:
            return f"http://127.0.0.1:{port}"
        time.sleep(0.2)
    raise RuntimeError("delay proxy did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process (plus children it already reaped; live plugin workers are not
    counted)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def run_one(args, bins: Path, strategy: str, rate: str, seed: int, link: Link) -> dict:
    load = os.getloadavg()
    url, node, _ = start_node(bins, link)
    proxy = None
    try:
        proxy_url = url
        if args.rtt_ms > 0:
            proxy_url = start_proxy(url, args.rtt_ms / 2, link)
            proxy = next(p for p in reversed(PROCS) if link.ns in p.args)
        md = dict(models.DEMO.metadata(), d_model=args.d_model, d_ff=2 * args.d_model, n_layers=args.layers, stride=2)
        extra = {}
        if strategy == "streaming":
            tau = args.tau if args.tau >= 0 else args.h - 1
            extra = {"streaming": {"overlap_steps": tau, "merge": args.merge, "alpha": args.alpha}}
        e = Experiment(
            rpc=url, trainer_rpc=proxy_url, launcher=["ip", "netns", "exec", link.ns],
            workdir=Path(tempfile.mkdtemp(prefix=f"bench-overlap-{strategy}-")), rounds=args.rounds,
            m=args.m, k=args.m, f=args.f, h=args.h, batch=args.batch, metadata=md, bins=bins, quiet=True, replay=True,
            compression={"codec": "int4-block", "block": 64}, sync_strategy=strategy, grace_window_ms=args.grace_ms,
            task_id=f"bench-overlap-s{seed}", trainer_extra=extra,
        )  # fmt: skip
        c, task, procs, _ = start(e)
        PROCS.extend(procs)
        rows = follow(e, c, task, procs, timeout=args.timeout, defer_eval=True)
        status = c.get_run(task)["status"]
        ok, msg = verify_receipt(e, c, task) if status == "sealed" else (False, status)
        params = sum(p.numel() for p in models.build("timesfm", md, seed=0).parameters())
        node_cpu = cpu_seconds(node.pid)
    finally:
        if proxy is not None:
            stop(proxy)
        stop(node)
    st = trainer_stats(e)
    # Steady state: not round 0 (task setup, data load) nor the last (nothing to run ahead / to merge).
    steady = [s for s in st if 0 < int(s["round"]) < args.rounds - 1]

    def mean(key) -> float:
        return statistics.mean(float(key(s)) for s in steady) if steady else float("nan")

    starts = [r.elapsed_s for r in rows]
    return {
        "strategy": strategy, "rate": rate, "seed": seed, "status": status, "receipt_ok": ok, "receipt": msg,
        "load_at_start": [round(x, 2) for x in load], "params": params,
        "curve": [r.eval_loss for r in rows], "elapsed": starts,
        "busy": mean(lambda s: s["busy"]), "wall_per_round": mean(lambda s: s["wall_s"]),
        "inner_s": mean(lambda s: s["inner_s"]),
        "upload_s": mean(lambda s: s["submit_s"]),
        # Blocking: what a round spends neither computing nor uploading — the other trainers' submissions, the
        # commit, the blocks in between and the weights download.
        "wait_s": mean(lambda s: float(s["wall_s"]) - float(s["inner_s"]) - float(s["serialize_s"]) - float(s["submit_s"])),
        "waited_s": mean(lambda s: s.get("waited_s", 0.0)),
        "chain_round_s": statistics.mean(b - a for a, b in zip(starts[1:-1], starts[2:], strict=False))
        if len(starts) > 3 else float("nan"),
        "cpu_share": mean(lambda s: float(s["cpu_s"]) / float(s["wall_s"])),
        "node_cpu_s": node_cpu,
        "bytes": statistics.mean(float(s["bytes"]) for s in st) if st else 0.0,
        "rebased": sum(1 for s in st if s.get("rebased")), "merged": sum(int(s.get("merged", 0)) for s in st),
        "trainer_rounds": len(st), "workdir": str(e.workdir),
    }  # fmt: skip


def since_open(r: dict) -> list[float]:
    """Seconds since round 0 opened (enrolment before it varies with the machine's load, not the strategy)."""
    return [el - r["elapsed"][0] for el in r["elapsed"]]


def at_time(r: dict, t: float) -> float:
    """Held-out MSE of the last committed model at or before t seconds after round 0 opened."""
    best = r["curve"][0]
    for loss, el in zip(r["curve"], since_open(r), strict=True):
        if el <= t:
            best = loss
    return best


def last_k(r: dict, k: int = 4) -> float:
    """Mean held-out MSE of the last k committed models (the sealed one and the k−1 before): the round-to-round
    MSE of these small runs moves by ±20 %, so one final value is mostly noise."""
    return statistics.mean(r["curve"][-k:])


def per_seed(g: list[dict], key) -> str:
    """The mean over seeds, then each seed's value (ordered by seed)."""
    vals = [key(r) for r in sorted(g, key=lambda r: r["seed"])]
    return f"**{statistics.mean(vals):.3f}** ({' / '.join(f'{v:.3f}' for v in vals)})"


def report(results: list[dict], args) -> None:
    rows, notes = [], []
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["rate"], r["strategy"]), []).append(r)
    for rate in args.rates:
        base = {r["seed"]: r for r in groups.get((rate, "blocking"), [])}
        # Equal wall time, per seed: when the fastest strategy of that seed and link sealed.
        t_eq: dict[int, float] = {}
        for k, g in groups.items():
            if k[0] == rate:
                for r in g:
                    t_eq[r["seed"]] = min(t_eq.get(r["seed"], float("inf")), since_open(r)[-1])
        for strat in args.strategies:
            g = [r for r in groups.get((rate, strat), []) if r["seed"] in base]
            if not g:
                continue
            m = statistics.mean
            end = m(r["curve"][-1] for r in g)
            base_end = m(base[r["seed"]]["curve"][-1] for r in g)
            at_t = m(at_time(r, t_eq[r["seed"]]) for r in g)
            base_t = m(at_time(base[r["seed"]], t_eq[r["seed"]]) for r in g)
            rows.append([
                rate, strat, len(g), per_seed(g, lambda r: r["busy"]), f"{m(r['inner_s'] for r in g):.2f}",
                f"{m(r['upload_s'] for r in g):.2f}", f"{m(r['wait_s'] for r in g):.2f}" if strat == "blocking" else "",
                f"{m(r['waited_s'] for r in g):.2f}" if strat == "streaming" else "",
                f"{m(r['wall_per_round'] for r in g):.2f}", f"{m(r['chain_round_s'] for r in g):.2f}",
                f"{m(r['cpu_share'] * r['wall_per_round'] for r in g):.2f}",
                per_seed(g, lambda r, base=base: r["curve"][-1] / base[r["seed"]]["curve"][-1]), f"{end:.4f}",
                f"{end / base_end:.3f}",
                per_seed(g, lambda r, base=base: last_k(r) / last_k(base[r["seed"]])),
                per_seed(g, lambda r, base=base, t_eq=t_eq: at_time(r, t_eq[r["seed"]]) / at_time(base[r["seed"]], t_eq[r["seed"]])),
                f"{at_t / base_t:.3f}",
                " / ".join(f"{r['load_at_start'][0]:.1f}" for r in sorted(g, key=lambda r: r["seed"])),
                "yes" if all(r["receipt_ok"] for r in g) else "NO",
            ])  # fmt: skip
    r0 = results[0]
    tau = args.tau if args.tau >= 0 else args.h - 1
    notes += [
        f"Command: `sudo TENZRO_BIN_DIR=bin $(scripts/venv.sh)/bin/python bench/overlap.py {args.argv}`.",
        f"Setup: TimesFM d_model={args.d_model}, {args.layers} layers ({r0['params']:,} parameters), M=K={args.m} "
        f"(quorum = M: a fragment closes on its last submission), F={args.f}, H={args.h}, batch {args.batch}, "
        f"{args.rounds} rounds, int4-block (block 64) outer gradients, grace {args.grace_ms} ms; streaming with "
        f"τ={tau} steps, merge {args.merge}" + (f" (α={args.alpha})" if args.merge == "mix" else "") + "; one "
        "tenzro-node --dev (root namespace, default block time) per run; the M trainer processes (1 torch thread "
        "each) in one network namespace behind a veth pair shaped with tc tbf at the rate in both directions, "
        f"reaching the node through a delaying TCP proxy adding {args.rtt_ms:g} ms RTT (netem is not in this "
        "kernel). Runs go one after another, never two at once; the strategy order rotates per seed.",
        "Columns: busy = compute time (the inner loop) / wall time per round, averaged over the trainers' steady "
        "rounds (not round 0, which loads the task, nor the last); mean of the seeds, then each seed's value. "
        "inner s = compute per round; upload s = the trainer's submit calls (a background thread under eager and streaming); wait s = wall − inner − encode − "
        "upload (for blocking: the other trainers, the commit, the blocks and the weights download); blocked s = "
        "streaming's time blocked for a commit τ steps after its sync point; chain s/round = time between "
        "consecutive round openings seen by the follower (steady rounds). MSE ratio at equal steps = the sealed "
        "model's held-out MSE / blocking's of the same seed (all strategies run rounds × H inner steps); at equal "
        "wall time = held-out MSE of the last committed model when the fastest strategy of that seed sealed "
        "(seconds since round 0 opened), / blocking's at that time. The bold value is the mean of the per-seed ratios; the next column is the ratio "
        "of the mean MSEs. Because one model's MSE moves by ±20 % from round to round here, the mean MSE of the "
        "last 4 committed models (rounds R−3..R, every strategy the same steps) is also compared, per seed. "
        "Load = the 1-minute load average at each run's start (per seed).",
        f"Seeds: {args.seeds} (the seed picks the task id, hence the data batches; initial weights are fixed). "
        "Receipts: `tenzro receipt verify` and `tenzro receipt replay` per run.",
        "The machine is a shared 2-core box (other engineers' builds and tests ran during the runs: see the load "
        "column); trainer CPU s/round is one trainer process's CPU time (all its threads) per steady round.",
        "Previous run (2026-11-28, blocking vs eager only): the strategies of a seed ran at the same time on a box "
        "at load 45–55, the trainers got 3–5 % of a core, so its busy fractions (eager 0.74/0.80 vs blocking "
        "0.39/0.35) measured CPU starvation rather than overlap; it is replaced by this table.",
    ]
    common.write(
        "overlap", "Overlapped outer synchronization on a shaped link (blocking vs eager vs streaming DiLoCo, int4)",
        ["link", "strategy", "seeds", "busy (per seed)", "inner s", "upload s", "wait s", "blocked s",
         "wall s/round", "chain s/round", "trainer CPU s/round", "MSE ratio @ equal steps (per seed)", "MSE end",
         "ratio of means", "MSE ratio, mean of last 4 models (per seed)", "MSE ratio @ equal time (per seed)", "ratio of means", "load at start",
         "receipts verify+replay"],
        rows, notes, {"args": vars(args), "results": results},
    )  # fmt: skip
    plot(results, args)


def plot(results: list[dict], args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        if r["seed"] != args.first_seed:
            continue
        lab = f"{r['strategy']} {r['rate']} (busy {r['busy']:.2f})"
        axes[0].plot(range(len(r["curve"])), r["curve"], marker=".", label=lab)
        axes[1].plot(since_open(r), r["curve"], marker=".", label=lab)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("wall time since round 0 opened (s)")
    for ax in axes:
        ax.set_ylabel("held-out MSE")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{' vs '.join(args.strategies)}, int4, M={args.m}, H={args.h}, {args.rtt_ms:g} ms RTT "
                 f"(seed {args.first_seed})")  # fmt: skip
    fig.tight_layout()
    fig.savefig(common.RESULTS / "overlap.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100mbit")
    ap.add_argument("--strategies", default="blocking,eager,streaming")
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--f", type=int, default=4)
    ap.add_argument("--h", type=int, default=24)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--grace-ms", type=int, default=2000)
    ap.add_argument("--tau", type=int, default=-1, help="streaming overlap steps (-1: H-1)")
    ap.add_argument("--merge", default="rebase", choices=["mix", "rebase"])
    ap.add_argument("--alpha", type=float, default=0.0)
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--from-json", help="re-render the report from a results JSON (overlap.json or a partial file)")
    args = ap.parse_args()
    args.rates = args.rates.split(",")
    args.strategies = args.strategies.split(",")
    args.argv = " ".join(sys.argv[1:])
    if args.from_json:
        raw = json.loads(Path(args.from_json).read_text())
        for k, v in raw["args"].items():
            if k != "from_json":
                setattr(args, k, v)
        report(raw["results"], args)
        return
    if os.geteuid() != 0:
        sys.exit("bench/overlap.py needs root (ip netns, tc)")
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    remove_stale()
    bins = common.build_bins()
    link = Link(0)
    LINKS.append(link)
    link.make()
    results = []
    partial = common.RESULTS / "overlap-partial.json"  # what a run cut short leaves (--from-json)
    for n, seed in enumerate(range(args.first_seed, args.first_seed + args.seeds)):
        order = args.strategies[n % len(args.strategies) :] + args.strategies[: n % len(args.strategies)]
        for rate in args.rates:
            link.shape(rate)
            for strat in order:
                r = run_one(args, bins, strat, rate, seed, link)
                print(json.dumps({k: v for k, v in r.items() if k not in ("curve", "elapsed", "receipt")}),
                      flush=True)  # fmt: skip
                results.append(r)
                partial.write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    report(results, args)
    partial.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
