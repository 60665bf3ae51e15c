"""Shared helpers for the benchmarks: build and start a real tenzro-node --dev, write result tables.
Run each benchmark with the trainer venv: ``$(scripts/venv.sh)/bin/python bench/<name>.py``."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer" / "src"))
os.environ["PYTHONPATH"] = str(ROOT / "trainer" / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
RESULTS = ROOT / "bench" / "results"

from tenzro_trainer.rpc import Client, NodeUnavailable  # noqa: E402


def build_bins() -> Path:
    """Builds tenzro + tenzro-node from this clone (TENZRO_BIN_DIR=<dir> uses prebuilt ones)."""
    if os.environ.get("TENZRO_BIN_DIR"):
        return Path(os.environ["TENZRO_BIN_DIR"])
    out = Path(tempfile.mkdtemp(prefix="tenzro-bench-bin-"))
    subprocess.run(["go", "build", "-o", f"{out}/", "./cmd/tenzro", "./cmd/tenzro-node"], cwd=ROOT, check=True)
    return out


@contextlib.contextmanager
def node(bins: Path):
    """A fresh tenzro-node --dev on a free port: yields (url, data dir, process); the process's peak RSS
    (VmHWM) belongs to this node alone."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = Path(tempfile.mkdtemp(prefix="tenzro-bench-node-"))
    log = open(d / "node.log", "wb")  # noqa: SIM115
    p = subprocess.Popen(
        [str(bins / "tenzro-node"), "--dev", "--data-dir", str(d / "data"), "--rpc-addr", f"127.0.0.1:{port}",
         "--listen-addr", "/ip4/127.0.0.1/tcp/0"], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    c = Client(url, timeout=5)
    for _ in range(600):
        try:
            c.node_info()
            break
        except NodeUnavailable:
            if p.poll() is not None:
                raise RuntimeError(f"tenzro-node exited; see {d / 'node.log'}") from None
            time.sleep(0.1)
    try:
        yield url, d, p
    finally:
        p.terminate()
        p.wait(10)


def machine() -> str:
    import torch

    cpu = os.cpu_count()
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({cpu} cores)"
    return f"{dev}, torch {torch.__version__}"


def write(name: str, title: str, header: list[str], rows: list[list], notes: list[str], raw: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    nd = os.environ.get("TENZRO_BENCH_NODE_LABEL", "tenzro-node --dev built from this clone")
    lines = [f"# {title}", "", f"Machine: {machine()}. Node: {nd}. Date: {when}.", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    lines += [""] + notes + [""]
    p = RESULTS / f"{name}.md"
    p.write_text("\n".join(lines))
    (RESULTS / f"{name}.json").write_text(json.dumps(raw, indent=2, default=str))
    print("\n".join(lines))
    return p
