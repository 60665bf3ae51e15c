"""The reference trainer, unchanged, through a light client of a real 2-validator network (no --dev, no faucet:
funds come from the genesis). The light client joins by itself (--boot-nodes, pinned with --genesis-hash), the
sponsor posts through it, both trainers enrol and submit through it, the elected syncer's node pulls their payloads
from it by hash, and the run seals: the run, the receipt and the balances are the same on the light client and on
both validators. The light client keeps no replica: it follows headers and answers every read with values proven
against them (no chain home in its data dir)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import NodeProc, free_port
from tenzro_trainer import data, models, sponsor, weights
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import EXIT_OK
from tenzro_trainer.rpc import Client
from test_node import make_trainer, run_all

REF = "statsmodels://co2,nile"


class HomeProc(NodeProc):
    """A node started from a home written by ``tenzro-node testnet`` (its addresses are in the home's
    config/tenzro-chain.json)."""

    def __init__(self, bins: Path, home: Path) -> None:
        conf = json.loads((home / "config" / "tenzro-chain.json").read_text())
        port = int(conf["json_rpc_addr"].rsplit(":", 1)[1])
        super().__init__(bins, home, port, dev=False)
        self.home = home

    def start(self) -> None:
        """Starts the process without waiting: a validator answers JSON-RPC only once the chain has its
        first block, which needs the other validators."""
        self.proc = subprocess.Popen(
            [str(self.bins / "tenzro-node"), "--home", str(self.home)], stdout=self.log, stderr=subprocess.STDOUT
        )


def wait_for(what: str, cond, within: float = 120) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within} s")
        time.sleep(0.1)


def test_reference_trainer_through_a_light_client(go_bins, tmp_path):
    sp = Key.generate("human")
    keys = [Key.generate("machine") for _ in range(2)]
    for i, k in enumerate(keys):
        k.save(tmp_path / f"trainer{i}.json")
    net = tmp_path / "net"
    allocs = [f"{sp.did}={10**21}"] + [f"{k.did}={10**19}" for k in keys]
    p = subprocess.run(
        [
            str(go_bins / "tenzro-node"), "testnet", "--validators", "2", "--dir", str(net), "--base-port", "0",
            "--block-time", "200ms", "--challenge-window-blocks", "10", *[a for al in allocs for a in ("--alloc", al)],
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    vals = [HomeProc(go_bins, net / f"node{i}") for i in range(2)]
    light = None
    try:
        for v in vals:
            v.start()
        for v in vals:
            v._wait()
        info = Client(vals[0].url).node_info()
        wait_for("validators commit", lambda: Client(vals[1].url).node_info()["chain"]["height"] >= 1)
        light_dir = tmp_path / "light"
        light_dir.mkdir()
        light = NodeProc(
            go_bins,
            light_dir,
            free_port(),
            [
                "--role", "light-client", "--boot-nodes", info["listen_addrs"][0],
                "--genesis-hash", info["chain"]["genesis_hash"],
            ],
            dev=False,
        )  # fmt: skip
        light.start()
        lc = Client(light.url)
        assert lc.node_info()["role"] in ("light", "light-client")
        # No faucet without --dev: the light client refuses it as the validators do, word for word.
        with pytest.raises(Exception) as e:
            lc.faucet(sp.did, 1)
        assert "faucet" in str(e.value).lower(), e.value

        md = dict(models.tiny_metadata("timesfm"), stride=4)
        init = weights.model_to_safetensors(models.build("timesfm", md, seed=0))
        task = f"net-{time.time_ns()}"
        spec = sponsor.make_spec(
            task, sp, metadata=md, fragments=2, trainers=2, quorum=2, inner_steps=2, max_rounds=2,
            reward_pool=str(10**18), dataset_ref=REF, dataset_hash=data.corpus_hash(data.load_corpus(REF)).hex(),
        )  # fmt: skip
        sponsor.post(lc, sp, spec, init)
        # The reference trainer, unchanged: its node_rpc is the light client.
        trs = [make_trainer(light, task, k, i, tmp_path) for i, k in enumerate(keys)]
        assert run_all(trs, timeout=400) == [EXIT_OK, EXIT_OK]
        run = lc.get_run(task)
        assert run["status"] == "sealed", run["status"]
        for k in keys:
            assert run["trainer_metrics"][k.did]["accepted"] == 2 * 2
        # Every node answers the same (the validators from their replicas, the light client by proofs), once it has
        # the seal's block and the receipt.
        nodes = [lc, *(Client(v.url) for v in vals)]

        def receipts():
            try:
                return [json.dumps(c.get_receipt(task), sort_keys=True) for c in nodes]
            except Exception:  # noqa: BLE001 - "sealed, awaiting the syncer's signature" until signed
                return None

        wait_for("receipt signed and replicated", lambda: (r := receipts()) is not None and len(set(r)) == 1)
        for did in [sp.did, *(k.did for k in keys)]:
            # The light client reads at the height below its newest verified header: compare the amounts.
            assert len({json.dumps({k: v for k, v in c.get_balance(did).items() if k != "height"}) for c in nodes}) == 1
        assert not (light_dir / "chain").exists(), "the light client wrote a chain home (a replica)"
        assert (light_dir / "light" / "light.json").exists()
        rc = lc.get_receipt(task)
        assert rc["final_model_hash"] != rc["init_model_hash"]
        assert lc.call("tenzro_training_verifyReceipt", {"receipt": rc, "root": rc["run_root"]})["valid"] == 1
    finally:
        if light:
            light.stop()
        for v in vals:
            v.stop()
