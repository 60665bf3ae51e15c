"""The trainer against a real tenzro-node process (built from this clone by the go_bins fixture)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tenzro_trainer import config, data, models, sponsor, weights
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import EXIT_INTERRUPTED, EXIT_OK, Trainer
from tenzro_trainer.metrics import Metrics
from tenzro_trainer.rpc import Client, RpcError

REF = "statsmodels://co2,sunspots,elnino,nile,macrodata"
_HASH: list[str] = []


def dataset_hash() -> str:
    if not _HASH:
        _HASH.append(data.corpus_hash(data.load_corpus(REF)).hex())
    return _HASH[0]


def receipt_verifies_and_replays(node, go_bins: Path, tmp_path: Path, task: str) -> None:
    """The sealed run's receipt, fetched with the CLI, verifies offline and replays through the node."""
    receipt = tmp_path / "receipt.json"
    cli = str(go_bins / "tenzro")
    g = subprocess.run([cli, "--rpc", node.url, "train", "get-receipt", "--task-id", task, "--out", str(receipt)],
                       capture_output=True, text=True)  # fmt: skip
    assert g.returncode == 0, g.stderr
    v = subprocess.run([cli, "receipt", "verify", "--receipt", str(receipt)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    r = subprocess.run([cli, "--rpc", node.url, "receipt", "replay", "--receipt", str(receipt)],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def post_task(node, tmp_path: Path, *, m=2, k=2, f=2, h=2, rounds=2, **kw):
    c, keys, task, _ = post_run(node, tmp_path, m=m, k=k, f=f, h=h, rounds=rounds, **kw)
    return c, keys, task


def post_run(node, tmp_path: Path, *, m=2, k=2, f=2, h=2, rounds=2, task=None, dataset_key=None, **kw):
    """A sponsor and m funded trainer keys (saved as trainer<i>.json in tmp_path), then the posting of a tiny
    TimesFM run; ``kw`` goes to ``sponsor.make_spec``. Returns the client, the keys, the task id and the
    postTask result."""
    c = Client(node.url)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**21)
    keys = []
    for i in range(m):
        key = Key.generate("machine")
        key.save(tmp_path / f"trainer{i}.json")
        c.faucet(key.did, 10**19)
        keys.append(key)
    md = dict(models.tiny_metadata("timesfm"), stride=4)
    task = task or f"test-{time.time_ns()}"
    kw.setdefault("dataset_hash", dataset_hash())
    spec = sponsor.make_spec(
        task, sp, metadata=md, fragments=f, trainers=m, quorum=k, inner_steps=h, max_rounds=rounds,
        reward_pool=str(10**18), **kw,
    )  # fmt: skip
    # The weights in the spec's dtype: the node takes no other.
    init = weights.model_to_safetensors(models.build("timesfm", md, seed=0), spec["architecture"]["dtype"])
    res = sponsor.post(c, sp, spec, init, dataset_key)
    return c, keys, task, res


def trainer_cfg(node, task, i, tmp_path: Path, **over) -> dict:
    d = {
        "node_rpc": node.url,
        "trainer_keypair": str(tmp_path / f"trainer{i}.json"),
        "task_id": task,
        "inner": {"lr": 1e-3, "batch_size": 8},
        "metrics": {"port": 0},
        "stake": str(10**17),
        "threads": 1,
        "eval": False,
        "poll_interval": 0.05,
        "log_format": "text",
    }
    d.update(over)
    return d


def make_trainer(node, task, key, i, tmp_path, **over) -> Trainer:
    cfg = config.parse(trainer_cfg(node, task, i, tmp_path, **over))
    return Trainer(cfg, key, metrics=Metrics(), stop=threading.Event())


def run_all(trainers: list[Trainer], timeout: float = 300) -> list[int]:
    codes: list[int] = [-1] * len(trainers)

    def go(i: int) -> None:
        codes[i] = trainers[i].run()

    ts = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(len(trainers))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    for tr in trainers:
        tr.stop.set()
    return codes


def test_loop_trains_to_a_sealed_verified_receipt(node, tmp_path):
    c, keys, task = post_task(node, tmp_path, m=2, k=2, f=2, h=2, rounds=2)
    trs = [make_trainer(node, task, key, i, tmp_path) for i, key in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    run = c.get_run(task)
    assert run["status"] == "sealed"
    for key, tr in zip(keys, trs, strict=True):
        assert run["trainer_metrics"][key.did]["accepted"] == 2 * 2
        assert tr.metrics.accepted._value.get() == 4
        assert len(tr.history) == 2 and tr.history[0].bytes_sent > 0
        assert tr.client.blob_uploads is True  # payloads went with PUT /blobs, submissions by reference
    assert c.blob_uploads is True  # and the initial weights
    rc = c.get_receipt(task)
    assert rc["final_model_hash"] != rc["init_model_hash"]
    v = c.call("tenzro_training_verifyReceipt", {"receipt": rc, "root": rc["run_root"]})
    assert v["valid"] == 1, v
    # The submissions' signed metrics reached the node: its dashboard plots the loss curve.
    with urllib.request.urlopen(f"{node.url}/runs/{task}", timeout=30) as r:
        page = r.read().decode()
    assert 'class="line train"' in page and "✓" in page


def test_resume_after_node_restart(node, tmp_path):
    c, keys, task = post_task(node, tmp_path, m=2, k=2, f=2, h=2, rounds=3)
    trs = [make_trainer(node, task, key, i, tmp_path) for i, key in enumerate(keys)]
    killer_done = threading.Event()

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if c.get_run(task)["round"] >= 1:
                    break
            except Exception:
                pass
            time.sleep(0.05)
        node.kill()
        time.sleep(1.5)
        node.start()
        killer_done.set()

    threading.Thread(target=killer, daemon=True).start()
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    assert killer_done.is_set()
    assert c.get_run(task)["status"] == "sealed"
    assert sum(tr.metrics.node_down._value.get() for tr in trs) > 0


def test_rejected_submissions_change_nothing_and_the_trainer_goes_on(node, tmp_path):
    c, keys, task = post_task(node, tmp_path, m=1, k=1, f=2, h=1, rounds=2)
    tr = make_trainer(node, task, keys[0], 0, tmp_path)
    c.enroll(keys[0], task, str(10**17))
    run = c.get_run(task)
    assert run["status"] == "running"
    tr._ensure_task(run)
    stale = dict(run, round=run["round"] + 3)
    st = tr.train_round(stale, run["trainers"][0]["shards"])
    assert len(st.rejected) == 2 and all("round" in r for r in st.rejected)
    assert tr.metrics.rejected._value.get() == 2
    # A payload whose tensors are not the fragment's is refused with a precise reason.
    with pytest.raises(RpcError) as e:
        c.submit(keys[0], task, run["round"], 0, weights.model_to_safetensors(models.build("timesfm", {"d_model": 16})))
    assert e.value.code in (-32602, -32003) and e.value.message
    after = c.get_run(task)
    assert after["round"] == run["round"]
    assert after["trainer_metrics"][keys[0].did]["accepted"] == 0
    tr.pending_round = None
    assert tr.run() == EXIT_OK
    assert c.get_run(task)["status"] == "sealed"


def test_bf16_run_weights_and_payloads_are_bf16(node, tmp_path):
    """A bf16 spec's run: F32 initial weights are refused (the node never converts), BF16 ones are laid out as
    BF16, and every payload the reference trainer submits is BF16 (the fragment's dtype) and accepted."""
    c = Client(node.url)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**21)
    md = dict(models.tiny_metadata("timesfm"), stride=4)
    spec = sponsor.make_spec(f"f32-under-bf16-{time.time_ns()}", sp, metadata=md, fragments=2, trainers=1, quorum=1,
                             dtype="bf16", dataset_hash=dataset_hash(), reward_pool=str(10**18))  # fmt: skip
    with pytest.raises(
        RpcError, match=r"architecture.dtype is bf16, so the initial weights must be BF16, but they are F32"
    ):
        sponsor.post(c, sp, spec, weights.model_to_safetensors(models.build("timesfm", md, seed=0)))
    assert spec["task_id"] not in [r["task_id"] for r in c.list_runs()]

    c, keys, task = post_task(node, tmp_path, m=1, k=1, f=2, h=1, rounds=2, dtype="bf16")
    run = c.get_run(task)
    assert {t["dtype"] for fr in run["fragments"] for t in fr["tensors"]} == {"BF16"}
    tr = make_trainer(node, task, keys[0], 0, tmp_path)
    sent: list[bytes] = []
    submit = tr.client.submit

    def spy(key, task_id, round_, fragment, payload, *a, **kw):
        sent.append(payload)
        return submit(key, task_id, round_, fragment, payload, *a, **kw)

    tr.client.submit = spy  # type: ignore[method-assign]
    c.enroll(keys[0], task, str(10**17))
    assert tr.run() == EXIT_OK
    assert c.get_run(task)["status"] == "sealed"
    assert len(sent) == 2 * 2  # two fragments, two rounds
    for p in sent:
        hdr = weights.header(p)
        assert {v["dtype"] for k, v in hdr.items() if k != "__metadata__"} == {"BF16"}, hdr
    assert c.get_run(task)["trainer_metrics"][keys[0].did]["accepted"] == 4


def test_cli_run_leaves_cleanly_on_sigint(node, tmp_path):
    c, keys, task = post_task(node, tmp_path, m=1, k=1, f=1, h=1, rounds=1000)
    cfg = tmp_path / "trainer.yaml"
    # The seed's whole trainer.yaml: its peer-to-peer keys are accepted (and explained), never refused.
    seed_p2p = {
        "gossip_listen": "/ip4/0.0.0.0/tcp/4002",
        "hivemind_initial_peers": ["/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWx"],
    }
    cfg.write_text(yaml.safe_dump(trainer_cfg(node, task, 0, tmp_path, log_format="json", **seed_p2p)))
    p = subprocess.Popen(
        [sys.executable, "-m", "tenzro_trainer", "run", "--config", str(cfg)],
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    for line in p.stderr:
        seen.append(line)
        if '"round done"' in line:
            break
    p.send_signal(signal.SIGINT)
    _, rest = p.communicate(timeout=60)
    seen.append(rest)
    assert p.returncode == EXIT_INTERRUPTED, "".join(seen)[-3000:]
    logs = [json.loads(x) for x in "".join(seen).splitlines() if x.startswith("{")]
    assert any("leaving cleanly" in x["msg"] for x in logs)
    assert any("gossip_listen" in x["msg"] for x in logs) and any("--boot-nodes" in x["msg"] for x in logs)
    assert c.get_run(task)["trainer_metrics"][keys[0].did]["accepted"] >= 1


def test_fsdp2_two_processes_on_one_host(node, tmp_path):
    """torchrun --nproc_per_node 2: FSDP2 shards the model over two CPU (gloo) processes; rank 0
    pulls, gathers the full state after the inner loop and submits."""
    c, keys, task = post_task(node, tmp_path, m=1, k=1, f=2, h=2, rounds=2)
    cfg = tmp_path / "trainer.yaml"
    cfg.write_text(yaml.safe_dump(trainer_cfg(node, task, 0, tmp_path)))
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "tenzro_trainer", "run", "--config", str(cfg)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    run = c.get_run(task)
    assert run["status"] == "sealed"
    assert run["trainer_metrics"][keys[0].did]["accepted"] == 2 * 2
