"""Shared fixtures. The package under test is always this clone's ``trainer/src`` (put first on
sys.path), even when the venv's editable install points at another clone."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

TRAINER = Path(__file__).resolve().parents[1]
REPO = TRAINER.parent
sys.path.insert(0, str(TRAINER / "src"))
os.environ["PYTHONPATH"] = str(TRAINER / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")

import torch  # noqa: E402

torch.set_num_threads(1)

from tenzro_trainer.rpc import Client, NodeUnavailable  # noqa: E402


class _ShowFields(logging.Filter):
    """Puts a trainer log record's fields (reason=, code=, round=) into its message, so a failing test's
    captured log says why a node refused something, not only that it did."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, "fields", None)
        if fields and not getattr(record, "fields_shown", False):
            record.msg = f"{record.msg} " + " ".join(f"{k}={v}" for k, v in fields.items())
            record.fields_shown = True
        return True


logging.getLogger("tenzro_trainer.loop").addFilter(_ShowFields())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def go_bins() -> Path:
    """Builds tenzro and tenzro-node from this clone. A failing build fails the tests that need a
    node (they error, they are not skipped). TENZRO_BIN_DIR=<dir holding tenzro-node> skips the build."""
    pre = os.environ.get("TENZRO_BIN_DIR")
    if pre:
        if not (Path(pre) / "tenzro-node").exists():
            pytest.fail(f"TENZRO_BIN_DIR={pre} has no tenzro-node")
        return Path(pre)
    out = Path(tempfile.mkdtemp(prefix="tenzro-bin-"))
    go = shutil.which("go")
    if go is None:
        pytest.fail("go is not on PATH: cannot build tenzro-node for the real-node tests")
    p = subprocess.run(
        [go, "build", "-o", str(out) + "/", "./cmd/tenzro", "./cmd/tenzro-node"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if p.returncode != 0 or not (out / "tenzro-node").exists():
        pytest.fail(f"go build ./cmd/tenzro ./cmd/tenzro-node failed:\n{p.stderr[-4000:]}")
    return out


class NodeProc:
    def __init__(
        self,
        bins: Path,
        data_dir: Path,
        port: int,
        extra: list[str] | None = None,
        dev: bool = True,
        follow: NodeProc | None = None,
    ) -> None:
        """A real tenzro-node; ``dev`` adds ``--dev`` (its own one-validator chain with the faucet). A node
        that ``follow``s a --dev node (a full node, ``--role full``) is a home written by ``tenzro-node init`` from that
        node's genesis, with that node as its chain peer."""
        self.bins, self.data_dir, self.port, self.extra = bins, data_dir, port, list(extra or [])
        self.dev = dev and follow is None
        self.follow = follow
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.log = open(data_dir.parent / f"node-{port}.log", "ab")  # noqa: SIM115

    def _init_home(self) -> Path:
        home = self.data_dir / "home"
        if not (home / "config").exists():
            peer = Client(self.follow.url).node_info()["chain"]["peer"]
            genesis = self.follow.data_dir / "chain" / "config" / "genesis.json"
            p = subprocess.run(
                [
                    str(self.bins / "tenzro-node"), "init", "--home", str(home), "--genesis", str(genesis), "--peers", peer,
                    "--p2p-addr", f"127.0.0.1:{free_port()}", "--rpc-addr", f"127.0.0.1:{free_port()}",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )  # fmt: skip
            if p.returncode != 0:
                raise RuntimeError(f"tenzro-node init: {p.stderr}")
        return home

    def start(self) -> None:
        where = (
            ["--home", str(self._init_home())]
            if self.follow
            else [*(["--dev"] if self.dev else []), "--data-dir", str(self.data_dir)]
        )
        self.proc = subprocess.Popen(
            [
                str(self.bins / "tenzro-node"), *where,
                "--rpc-addr", f"127.0.0.1:{self.port}", "--listen-addr", "/ip4/127.0.0.1/tcp/0",
                *self.extra,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._wait()

    def _wait(self) -> None:
        """Waits (60 s at most) until the started process answers JSON-RPC."""
        assert self.proc is not None
        c = Client(self.url, timeout=5)
        deadline = time.monotonic() + 60
        while True:
            try:
                c.node_info()
                return
            except NodeUnavailable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tenzro-node did not come up; log: {self.log.name}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def node(go_bins: Path, tmp_path: Path):
    n = NodeProc(go_bins, tmp_path / "node", free_port())
    n.data_dir.mkdir()
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="session")
def vectors() -> dict:
    import json

    p = REPO / "wire" / "testdata" / "vectors.json"
    return json.loads(p.read_text())
