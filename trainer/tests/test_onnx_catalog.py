"""The ONNX forecast catalog: a sealed run's final model, named by the receipt's final model hash; onnxruntime's
forecasts equal PyTorch's within ATOL + RTOL·max|y| (1e-4 + 1e-4·max|y|) on the run's held-out windows."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from tenzro_trainer import config, data, models, sponsor, weights
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import EXIT_OK, Trainer
from tenzro_trainer.metrics import Metrics
from tenzro_trainer.rpc import Client

ort = pytest.importorskip("onnxruntime", reason="the [onnx] extra (onnxruntime) is not installed")

SYNTH = "synth://kernelsynth/v1?seed=5&eval=16"


def test_roundtrip_tolerance_on_a_demo_model():
    from tenzro_trainer.onnx_export import check, to_onnx

    m = models.build("timesfm", models.DEMO.metadata(), seed=3)
    x = np.random.default_rng(0).standard_normal((7, 64)).astype(np.float32)
    r = check(to_onnx(m, 64), m, x)
    assert r["max_abs_diff"] <= r["bound"] and r["windows"] == 7


def test_export_a_sealed_run_and_list_it(node, tmp_path):
    c = Client(node.url)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**24)
    key = Key.generate("machine")
    key.save(tmp_path / "t.json")
    c.faucet(key.did, 10**21)
    md = models.tiny_metadata("timesfm")
    task = f"onnx-{time.time_ns()}"
    spec = sponsor.make_spec(task, sp, metadata=md, fragments=2, trainers=1, quorum=1, inner_steps=2, max_rounds=1,
                             reward_pool="1000000000000000000000", dataset_ref=SYNTH, dataset_hash=data.dataset_hash(SYNTH).hex())  # fmt: skip
    sponsor.post(c, sp, spec, weights.model_to_safetensors(models.build("timesfm", md, seed=0)))
    cat = tmp_path / "catalog"
    p = subprocess.run([sys.executable, "-m", "tenzro_trainer", "export", "--onnx", "--rpc", node.url,
                        "--task-id", task, "--dir", str(cat)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 1 and "only a sealed run's final model" in p.stderr, p.stderr
    cfg = config.parse({"node_rpc": node.url, "trainer_keypair": str(tmp_path / "t.json"), "task_id": task,
                        "inner": {"batch_size": 4}, "metrics": {"port": 0}, "stake": "100000000000000000", "eval": False,
                        "threads": 1, "poll_interval": 0.05})  # fmt: skip
    c.enroll(key, task, "100000000000000000")
    assert Trainer(cfg, key, client=c, metrics=Metrics()).run() == EXIT_OK
    deadline = time.monotonic() + 120
    while c.get_run(task)["status"] != "sealed":
        assert time.monotonic() < deadline, "the run did not seal"
        time.sleep(0.2)
    rc = c.get_receipt(task)
    p = subprocess.run([sys.executable, "-m", "tenzro_trainer", "export", "--onnx", "--rpc", node.url,
                        "--task-id", task, "--dir", str(cat)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    final = rc["final_model_hash"].removeprefix("0x")
    assert out["final_model_hash"] == final != rc["init_model_hash"].removeprefix("0x")
    assert (cat / f"{final}.onnx").is_file()
    entry = json.loads((cat / f"{final}.json").read_text())
    assert entry["check"]["max_abs_diff"] <= entry["check"]["bound"] and entry["check"]["windows"] == 16
    # onnxruntime on the run's own held-out windows against the committed model in PyTorch, here too.
    from tenzro_trainer.evaluate import pull_model, task_data

    m = pull_model(c, c.get_run(task)).eval()
    _, ev = task_data(spec)
    x, _ = ev.get(np.arange(ev.n))
    got = ort.InferenceSession(str(cat / f"{final}.onnx")).run(None, {"context": x})[0]
    with torch.no_grad():
        want = m.forecast(torch.from_numpy(x)).numpy()
    assert np.abs(got - want).max() <= 1e-4 + 1e-4 * np.abs(want).max()
    listed = subprocess.run([sys.executable, "-m", "tenzro_trainer", "catalog", "--dir", str(cat), "--json"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    entries = json.loads(listed.stdout)
    assert [e["final_model_hash"] for e in entries] == [final] and entries[0]["ok"]
    (cat / f"{final}.onnx").write_bytes(b"tampered")
    assert not json.loads(
        subprocess.run(
            [sys.executable, "-m", "tenzro_trainer", "catalog", "--dir", str(cat), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout  # fmt: skip
    )[0]["ok"]
