"""Overlapped outer synchronization on a shaped link (issue 26): blocking vs eager DiLoCo through a real
tenzro-node, with the trainers in their own network namespace behind a rate-limited veth link (tc tbf, both
directions) and a delaying TCP proxy for the RTT (this kernel has no netem). Reports per strategy and link:
the trainers' busy fraction (compute time / wall time per round, from their "round done" log lines), wall
time per round, held-out MSE at equal rounds and at equal wall time, and that the receipt verifies and
replays. Needs root (ip netns, tc). Every namespace, link and process it makes is removed on exit.

    sudo $(scripts/venv.sh)/bin/python bench/overlap.py [--rates 100mbit,1gbit] [--rtt-ms 20] [--seeds 1]
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
from concurrent.futures import ThreadPoolExecutor
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
    url, node, _ = start_node(bins, link)
    proxy = None
    try:
        proxy_url = url
        if args.rtt_ms > 0:
            proxy_url = start_proxy(url, args.rtt_ms / 2, link)
            proxy = next(p for p in reversed(PROCS) if link.ns in p.args)
        md = dict(models.DEMO.metadata(), d_model=args.d_model, d_ff=2 * args.d_model, n_layers=args.layers, stride=2)
        e = Experiment(
            rpc=url, trainer_rpc=proxy_url, launcher=["ip", "netns", "exec", link.ns],
            workdir=Path(tempfile.mkdtemp(prefix=f"bench-overlap-{strategy}-")), rounds=args.rounds,
            m=args.m, k=args.m, f=4, h=args.h, batch=args.batch, metadata=md, bins=bins, quiet=True, replay=True,
            compression={"codec": "int4-block", "block": 64}, sync_strategy=strategy, grace_window_ms=30000,
            task_id=f"bench-overlap-s{seed}",
        )  # fmt: skip
        c, task, procs, _ = start(e)
        PROCS.extend(procs)
        rows = follow(e, c, task, procs, timeout=args.timeout)
        status = c.get_run(task)["status"]
        ok, msg = verify_receipt(e, c, task) if status == "sealed" else (False, status)
        params = sum(p.numel() for p in models.build("timesfm", md, seed=0).parameters())
        node_cpu = cpu_seconds(node.pid)
    finally:
        if proxy is not None:
            stop(proxy)
        stop(node)
    st = trainer_stats(e)
    # Steady state: not round 0 (task setup, data load) nor the last (nothing to run ahead).
    steady = [s for s in st if 0 < int(s["round"]) < args.rounds - 1]
    return {
        "strategy": strategy, "rate": rate, "seed": seed, "status": status, "receipt_ok": ok, "receipt": msg,
        "params": params, "curve": [r.eval_loss for r in rows], "elapsed": [r.elapsed_s for r in rows],
        "busy": statistics.mean(float(s["busy"]) for s in steady) if steady else float("nan"),
        "wall_per_round": statistics.mean(float(s["wall_s"]) for s in steady) if steady else float("nan"),
        "inner_s": statistics.mean(float(s["inner_s"]) for s in steady) if steady else float("nan"),
        "cpu_share": statistics.mean(float(s["cpu_s"]) / float(s["wall_s"]) for s in steady) if steady else 0.0,
        "node_cpu_s": node_cpu,
        "bytes": statistics.mean(float(s["bytes"]) for s in st) if st else 0.0,
        "rebased": sum(1 for s in st if s.get("rebased")), "trainer_rounds": len(st), "workdir": str(e.workdir),
    }  # fmt: skip


def at_time(r: dict, t: float) -> float:
    """Held-out MSE of the last committed model at or before t seconds into the run."""
    best = r["curve"][0]
    for loss, el in zip(r["curve"], r["elapsed"], strict=True):
        if el <= t:
            best = loss
    return best


def report(results: list[dict], args) -> None:
    rows, notes = [], []
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["rate"], r["strategy"]), []).append(r)
    for rate in args.rates:
        base = groups.get((rate, "blocking"), [])
        t_eq = min((r["elapsed"][-1] for k, g in groups.items() if k[0] == rate for r in g), default=0.0)
        for strat in args.strategies:
            g = groups.get((rate, strat), [])
            if not g:
                continue
            m = statistics.mean
            loss_end = m(r["curve"][-1] for r in g)
            base_end = m(r["curve"][-1] for r in base) if base else float("nan")
            loss_t = m(at_time(r, t_eq) for r in g)
            base_t = m(at_time(r, t_eq) for r in base) if base else float("nan")
            wall = m(r["wall_per_round"] for r in g)
            base_wall = m(r["wall_per_round"] for r in base) if base else float("nan")
            rows.append([
                rate, strat, len(g), f"**{m(r['busy'] for r in g):.2f}**", f"{m(r['inner_s'] for r in g):.2f}",
                f"{m(r['cpu_share'] for r in g):.2f}", f"{m(r['node_cpu_s'] for r in g):.0f}",
                f"{wall:.2f}", f"{wall / base_wall:.2f}", f"{loss_end:.4f}", f"{loss_end / base_end:.3f}",
                f"{t_eq:.0f}", f"{loss_t:.4f}", f"{loss_t / base_t:.3f}",
                "yes" if all(r["receipt_ok"] for r in g) else "NO",
            ])  # fmt: skip
    r0 = results[0]
    notes += [
        f"Command: `sudo TENZRO_BIN_DIR=bin $(scripts/venv.sh)/bin/python bench/overlap.py {args.argv}`.",
        f"Setup: TimesFM d_model={args.d_model}, {args.layers} layers ({r0['params']:,} parameters), M=K={args.m}, "
        f"F=4, H={args.h}, batch {args.batch}, {args.rounds} rounds, int4-block (block 64) outer gradients, grace "
        f"30 s; one tenzro-node --dev (root namespace) per run; the strategies of one seed and link rate run at the "
        f"same time, each with its own node, namespace and link, so they share the machine's other load; the M trainer processes (1 torch thread each) in "
        f"one network namespace behind a veth pair shaped with tc tbf at the rate in both directions, reaching "
        f"the node through a delaying TCP proxy adding {args.rtt_ms:g} ms RTT (netem is not in this kernel).",
        "Busy = compute time (the inner loop) / wall time per round, averaged over the trainers' steady-state "
        "rounds (not round 0, which loads the task, nor the last, which has nothing to run ahead); wall/round "
        "likewise. Loss at equal steps = held-out MSE of the sealed model (same rounds × H inner steps); loss at "
        "equal wall time = held-out MSE of the last committed model when the fastest run of that link sealed. "
        "Ratios are against blocking on the same link in the same invocation. Trainer CPU/wall = the trainer "
        "process's CPU time (all threads) / wall time per steady round; node CPU s = the node process's CPU time "
        "over the whole run (the dev chain, RPC, syncer; plugin workers not counted).",
        f"Seeds: {args.seeds} (the seed picks the task id, hence the data batches; initial weights are fixed). "
        "Receipts: `tenzro receipt verify` and `tenzro receipt replay` per run.",
        f"Load: a shared 2-core machine with other engineers' builds and tests running (load average at the "
        f"start {os.getloadavg()[0]:.1f}); absolute times are inflated and noisy, compare ratios within the table.",
    ]
    common.write(
        "overlap", "Overlapped outer synchronization on a shaped link (blocking vs eager DiLoCo, int4)",
        ["link", "strategy", "runs", "busy", "inner s", "trainer CPU/wall", "node CPU s", "wall s/round", "wall ratio", "MSE end", "ratio",
         "equal-time s", "MSE @t", "ratio", "receipts verify+replay"],
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
        axes[1].plot(r["elapsed"], r["curve"], marker=".", label=lab)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("wall time (s)")
    for ax in axes:
        ax.set_ylabel("held-out MSE")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"blocking vs eager, int4, M={args.m}, H={args.h}, {args.rtt_ms:g} ms RTT (seed {args.first_seed})")
    fig.tight_layout()
    fig.savefig(common.RESULTS / "overlap.png", dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="100mbit")
    ap.add_argument("--strategies", default="blocking,eager")
    ap.add_argument("--rtt-ms", type=float, default=20.0)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--h", type=int, default=12)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
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
    bins = common.build_bins()
    links = [Link(i) for i in range(len(args.strategies))]
    for link in links:
        LINKS.append(link)
        link.make()
    results = []
    # The strategies of one (seed, link) run at the same time, each with its own node, namespace and shaped
    # link, so that they share whatever else loads the machine (ratios within the same time window).
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for rate in args.rates:
            for link in links:
                link.shape(rate)
            with ThreadPoolExecutor(len(links)) as ex:
                futs = [ex.submit(run_one, args, bins, s, rate, seed, link)
                        for s, link in zip(args.strategies, links, strict=True)]  # fmt: skip
                for f in futs:
                    r = f.result()
                    print(json.dumps({k: v for k, v in r.items() if k not in ("curve", "elapsed", "receipt")}),
                          flush=True)  # fmt: skip
                    results.append(r)
            partial = common.RESULTS / "overlap-partial.json"  # what a run cut short leaves (--from-json)
            partial.write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    report(results, args)
    (common.RESULTS / "overlap-partial.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
