"""Black-box finalize on a real `tenzro-node --dev` (issue 21 item 2).

One run of F=1 fragment, M=K trainers, N f32 values, set up through the `tenzro` CLI;
the gradients are submitted as tenzro-trainer submits them (bound payloads, the trainer
package's RPC client), or with --client cli by one `tenzro train submit-gradient` process
each (whose exit, and its stamped temporary copy when a payload is unbound, overlap the
K-th's finalize on the same cores). Per round: K-1 plain submissions (each timed), then the K-th, timed from
its start to the round's commit as seen over JSON-RPC (polled every --poll-ms, 20 ms by default: each
poll is a getRun the node serves on the cores the finalize runs on, and at 2 ms the node spent 15-20 ms
more CPU inside each commit's engine call serving them; the black-box figure is then up to that much late).
finalize = (K-th submission -> commit) - median plain submission; reported
against one f32 memory pass over the same K*N values (numpy, same process,
measured between rounds) and a stricter one (every input byte read once, nothing
written: read_pass_ms, compute_read_ratio), and the chain's fixed latency (a faucet
transaction: submit -> in a block) separately. The node's own compute per
commit (tenzro_syncer_commit_compute_seconds{phase}, read from --metrics-addr
before and after each round) is reported beside the black-box figure, and so is
the CPU the node and its plugin workers used from the K-th submission to the
commit less a plain submission's (finalize_cpu_ms: /proc stat, independent of
what else the machine runs). Before the rounds: the node's
peak RSS around one plain submission (VmHWM reset through clear_refs).

    V=$(scripts/venv.sh); make build
    $V/bin/python bench/plugins/node_finalize.py --rounds 5 [--n 8650000] [--k 6] [--node-arg=--input-cache-bytes=0]

Prints one JSON object (every figure in ms, medians with ranges).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

import numpy as np

from tenzro_trainer.binding import binding_metadata, canonical_safetensors
from tenzro_trainer.identity import Key
from tenzro_trainer.rpc import Client


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def write_st(path: str, name: str, values: np.ndarray, metadata: dict[str, str] | None = None) -> None:
    """One F32 tensor as a safetensors file in the canonical form the trainer package writes."""
    with open(path, "wb") as f:
        f.write(canonical_safetensors([(name, "F32", [int(values.size)], values.astype("<f4").tobytes())], metadata))


def tree_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by pid and its living descendants,
    and by the descendants alone (the node's plugin workers, which run the
    engine's finalize): a measure of work done that does not depend on what else
    the machine runs."""
    tick = os.sysconf("SC_CLK_TCK")
    total, workers, todo, seen = 0, 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            used = int(fields[11]) + int(fields[12])  # utime, stime
            total += used
            workers += used if p != pid else 0
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / tick, workers / tick


def proc_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--n", type=int, default=8_650_000)
    ap.add_argument(
        "--poll-ms",
        type=float,
        default=20.0,
        help="how often the K-th submission's round is polled until it commits (each poll is a getRun the node "
        "serves on the cores the finalize runs on)",
    )
    ap.add_argument(
        "--client",
        choices=["trainer", "cli"],
        default="trainer",
        help="who submits: the trainer package's RPC client in this process (as tenzro-trainer submits), or one "
        "`tenzro train submit-gradient` process per submission (its exit overlaps the K-th's finalize on the same cores)",
    )
    ap.add_argument("--bin", default=os.environ.get("TENZRO_BIN_DIR", os.path.join(os.getcwd(), "bin")))
    ap.add_argument(
        "--node-arg",
        action="append",
        default=[],
        help="one more tenzro-node flag (repeatable), e.g. --node-arg=--input-cache-bytes=0",
    )
    a = ap.parse_args()
    k, n = a.k, a.n
    t = tempfile.mkdtemp(prefix="node-finalize-")
    port = free_port()
    rpc = f"http://127.0.0.1:{port}"
    metrics = f"127.0.0.1:{free_port()}"
    log = open(os.path.join(t, "node.log"), "w")  # noqa: SIM115 (closed in finally)
    node = subprocess.Popen(
        [
            os.path.join(a.bin, "tenzro-node"),
            "--dev",
            "--data-dir",
            os.path.join(t, "data"),
            "--rpc-addr",
            f"127.0.0.1:{port}",
            "--listen-addr",
            "/ip4/127.0.0.1/tcp/0",
            "--metrics-addr",
            metrics,
            *a.node_arg,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        run(a, k, n, t, rpc, node, f"http://{metrics}/metrics")
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(20)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait()
        log.close()
        shutil.rmtree(t, ignore_errors=True)


def compute_sums(url: str) -> dict[str, float]:
    """tenzro_syncer_commit_compute_seconds_sum by phase (absent: {})."""
    out: dict[str, float] = {}
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("tenzro_syncer_commit_compute_seconds_sum{"):
            labels, value = line.rsplit(" ", 1)
            phase = labels.split('phase="', 1)[1].split('"', 1)[0]
            out[phase] = float(value)
    return out


def run(a, k: int, n: int, t: str, rpc: str, node: subprocess.Popen, metrics_url: str) -> None:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", int(rpc.rsplit(":", 1)[1])), 0.2).close()
            break
        except OSError:
            time.sleep(0.2)

    def cli(*args: str) -> str:
        p = subprocess.run(
            [os.path.join(a.bin, "tenzro"), *args, "--rpc", rpc], capture_output=True, text=True, timeout=600
        )
        if p.returncode != 0:
            raise RuntimeError("{}: {}".format(" ".join(args[:3]), (p.stderr or p.stdout)[-400:]))
        return p.stdout

    def call(method: str, params: dict) -> dict:
        req = urllib.request.Request(
            rpc,
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["result"]

    def keygen(name: str, kind: str) -> str:
        out = subprocess.run(
            [
                os.path.join(a.bin, "tenzro"),
                "key",
                "generate",
                "--kind",
                kind,
                "--out",
                os.path.join(t, name + ".key"),
                "--format",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(out)["did"]

    task = f"bench-finalize-{os.getpid()}"
    sponsor = keygen("sponsor", "human")
    trainers = [keygen(f"t{i}", "machine") for i in range(k)]
    spec = {
        "task_id": task,
        "sponsor_did": sponsor,
        "sponsor_address": "0x" + "11" * 20,
        "architecture": {
            "family": "timesfm",
            "param_count": n,
            "modality": "Timeseries",
            "fragment_count": 1,
            "dtype": "f32",
        },
        "tier": "Open",
        "aggregation": "Mean",
        "trainer_count": k,
        "quorum": k,
        "inner_steps": 24,
        "max_rounds": a.rounds + 2,
        "grace_window_ms": 600000,
        "reward_pool": "1000000000000000000000",
        "dataset_ref": "ipfs://QmAccept",
        "dataset_hash": "0x" + "ab" * 32,
        "min_throughput": None,
        "created_at": 1761350400,
    }
    with open(os.path.join(t, "spec.json"), "w") as f:
        json.dump(spec, f)
    rng = np.random.default_rng(7)
    write_st(os.path.join(t, "init.safetensors"), "w", rng.standard_normal(n, dtype=np.float32))
    cli("ledger", "faucet", "--did", sponsor, "--amount", "2000000000000000000000")
    cli(
        "train",
        "post-task",
        "--spec",
        os.path.join(t, "spec.json"),
        "--init-weights",
        os.path.join(t, "init.safetensors"),
        "--key",
        os.path.join(t, "sponsor.key"),
    )
    for i, d in enumerate(trainers):
        cli("ledger", "faucet", "--did", d, "--amount", "200000000000000000000")
        cli(
            "train",
            "enroll-trainer",
            "--task-id",
            task,
            "--did",
            d,
            "--stake",
            "100000000000000000000",
            "--key",
            os.path.join(t, f"t{i}.key"),
        )
    grads = np.empty((k, n), dtype=np.float32)
    for i in range(k):
        grads[i] = rng.standard_normal(n, dtype=np.float32) * 1e-3
    paths = [os.path.join(t, f"g{i}.safetensors") for i in range(k)]

    def write_payload(i: int, rnd: int) -> None:
        # Bound to its trainer, task, round and fragment before it is timed, as
        # the trainer package writes it (tenzro_trainer.binding): an unbound file
        # would make the CLI stamp a temporary copy, write and delete 35 MB on
        # the node's two cores while the node finalizes, which no trainer on
        # another machine does.
        write_st(paths[i], "w", grads[i], binding_metadata(trainers[i], task, rnd, 0))

    plain_cpu: list[float] = []

    client = Client(rpc)
    keys = [Key.load(os.path.join(t, f"t{i}.key")) for i in range(k)]

    def send(i: int, rnd: int) -> None:
        if a.client == "trainer":
            with open(paths[i], "rb") as f:
                res = client.submit(keys[i], task, rnd, 0, f.read())
            if not res.get("accepted"):
                raise RuntimeError(f"submission {i} of round {rnd} not accepted: {res}")
            return
        cli(
            "train",
            "submit-gradient",
            "--task-id",
            task,
            "--round",
            str(rnd),
            "--fragment",
            "0",
            "--payload",
            paths[i],
            "--key",
            os.path.join(t, f"t{i}.key"),
        )

    def submit(i: int, rnd: int) -> float:
        s, c = time.perf_counter(), tree_cpu_s(node.pid)
        send(i, rnd)
        d = time.perf_counter() - s
        plain_cpu.append(tree_cpu_s(node.pid)[0] - c[0])
        return d

    def read_pass() -> float:
        # A stricter baseline: every input byte read once, nothing written.
        s = time.perf_counter()
        for g in grads:
            g.sum(dtype=np.float32)
        return time.perf_counter() - s

    def memory_pass() -> float:
        s = time.perf_counter()
        np.add.reduce(grads, axis=0, dtype=np.float32)
        return time.perf_counter() - s

    def chain_latency() -> float:
        s = time.perf_counter()
        cli("ledger", "faucet", "--did", sponsor, "--amount", "1")
        return time.perf_counter() - s

    res: dict = {"k": k, "n": n, "client": a.client, "load_avg_start": os.getloadavg()}
    # Ingest: peak RSS of the node around one plain submission (round 0's first).
    rnd = call("tenzro_training_getRun", {"task_id": task})["round"]
    for i in range(k):
        write_payload(i, rnd)
    payload = res["payload_bytes"] = os.path.getsize(paths[0])
    with open(f"/proc/{node.pid}/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = proc_kb(node.pid, "VmRSS")
    first = submit(0, rnd)
    peak = proc_kb(node.pid, "VmHWM")
    res["ingest"] = {
        "rss_before_kb": before,
        "peak_kb": peak,
        "peak_growth_over_payload": round((peak - before) * 1024 / payload, 3),
    }
    rows = []
    for r in range(a.rounds):
        run_ = call("tenzro_training_getRun", {"task_id": task})
        rnd = run_["round"]
        if r > 0:
            # Fresh payloads every round: the stale rule slashes a trainer that
            # resubmits its previous round's gradient (and evicts it).
            for i in range(k):
                grads[i] = rng.standard_normal(n, dtype=np.float32) * 1e-3
                write_payload(i, rnd)
        comp0 = compute_sums(metrics_url)
        plain = [first] if r == 0 else []
        for i in range(1 if r == 0 else 0, k - 1):
            plain.append(submit(i, rnd))
        s, cpu0 = time.perf_counter(), tree_cpu_s(node.pid)
        send(k - 1, rnd)
        sub_k = time.perf_counter() - s
        while call("tenzro_training_getRun", {"task_id": task})["round"] == rnd:
            time.sleep(a.poll_ms / 1e3)
        to_commit = time.perf_counter() - s
        cpu1 = tree_cpu_s(node.pid)
        cpu = cpu1[0] - cpu0[0] - statistics.median(plain_cpu[-(k - 1) :])
        worker_cpu = cpu1[1] - cpu0[1]
        comp1 = compute_sums(metrics_url)
        mp = statistics.median(memory_pass() for _ in range(3))
        rp = statistics.median(read_pass() for _ in range(3))
        cl = chain_latency()
        fin = to_commit - statistics.median(plain)
        phases = {ph: round(1e3 * (v - comp0.get(ph, 0.0)), 1) for ph, v in comp1.items()}
        compute = sum(phases.values()) if phases else None
        rows.append(
            {
                "round": rnd,
                "kth_to_commit_ms": round(1e3 * to_commit, 1),
                "kth_submit_ms": round(1e3 * sub_k, 1),
                "plain_submit_ms": round(1e3 * statistics.median(plain), 1),
                "finalize_ms": round(1e3 * fin, 1),
                "memory_pass_ms": round(1e3 * mp, 1),
                "read_pass_ms": round(1e3 * rp, 1),
                "chain_tx_ms": round(1e3 * cl, 1),
                "ratio": round(fin / mp, 2),
                "compute_ms": None if compute is None else round(compute, 1),
                "compute_ratio": None if compute is None else round(compute / 1e3 / mp, 2),
                "compute_read_ratio": None if compute is None else round(compute / 1e3 / rp, 2),
                "compute_phases_ms": phases,
                # CPU of the node and its plugin workers from the K-th submission
                # to the commit, less a plain submission's (10 ms ticks).
                "finalize_cpu_ms": round(1e3 * cpu, 1),
                "finalize_cpu_ratio": round(cpu / mp, 2),
                # ... of which the plugin workers' (the engine's finalize).
                "worker_cpu_ms": round(1e3 * worker_cpu, 1),
                "load_avg": os.getloadavg()[0],
            }
        )
    res["rounds"] = rows

    def med(key: str) -> list:
        v = [x[key] for x in rows]
        return [statistics.median(v), min(v), max(v)]

    keys = [
        "finalize_ms",
        "memory_pass_ms",
        "read_pass_ms",
        "ratio",
        "chain_tx_ms",
        "plain_submit_ms",
        "kth_to_commit_ms",
    ]
    keys += ["finalize_cpu_ms", "finalize_cpu_ratio", "worker_cpu_ms"]
    if all(x["compute_ms"] is not None for x in rows):
        keys += ["compute_ms", "compute_ratio", "compute_read_ratio"]
    res["median_range"] = {key: med(key) for key in keys}
    res["node_rss_end_kb"] = proc_kb(node.pid, "VmRSS")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
