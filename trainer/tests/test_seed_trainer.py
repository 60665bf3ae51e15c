"""The seed's trainer commands as written (issue 25.4, 27.6): a default stake, one clear line and exit 2 for a
device or extra this machine lacks, permanent enrolment refusals stop the trainer, metrics.addr."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tenzro_trainer import config, data, models, sponsor, weights
from tenzro_trainer.cli import device_problem
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import DEFAULT_STAKE, EXIT_OK, EXIT_REFUSED, enrol_stake, permanent_refusal
from tenzro_trainer.rpc import Client, RpcError

# The seed's trainer.yaml (no stake; a GPU device; the seed's metrics address).
SEED_YAML = """
node_rpc: http://127.0.0.1:8545
trainer_did: did:tenzro:machine:z6Mk...
trainer_keypair: ./trainer-key.json
task_id: train-2026-04-25-timesfm-200m
inner: {optimizer: adamw, lr: 3.0e-4, weight_decay: 0.1, beta1: 0.9, beta2: 0.95, inner_steps: 24, batch_size: 32}
device: "cuda:0"
dtype: bf16
gradient_checkpointing: true
metrics: {addr: ":9101"}
gossip_listen: /ip4/0.0.0.0/tcp/4002
hivemind_initial_peers: []
"""
SYNTH = "synth://kernelsynth/v1?seed=1&eval=4"


@pytest.mark.parametrize(
    "metrics,host,port",
    [
        ({"addr": ":9101"}, "0.0.0.0", 9101),
        ({"addr": "127.0.0.1:0"}, "127.0.0.1", 0),
        ({"addr": "[::1]:9102"}, "::1", 9102),
        (":9103", "0.0.0.0", 9103),
        ({"port": 9104}, "127.0.0.1", 9104),
        (9105, "127.0.0.1", 9105),
    ],
)
def test_metrics_addr(metrics, host, port):
    d = yaml.safe_load(SEED_YAML)
    d["metrics"] = metrics
    c = config.parse(d)
    assert (c.metrics_host, c.metrics_port) == (host, port)


@pytest.mark.parametrize("bad", [{"addr": "9101"}, {"addr": ":x"}, {"addr": ":70000"}, {"bind": ":1"}])
def test_metrics_addr_refused(bad):
    d = yaml.safe_load(SEED_YAML)
    d["metrics"] = bad
    with pytest.raises(config.ConfigError, match="metrics"):
        config.parse(d)


def test_compile_option_parses_and_is_off_by_default():
    d = yaml.safe_load(SEED_YAML)
    assert config.parse(d).compile is False
    d["compile"] = True
    assert config.parse(d).compile is True


def test_default_stake():
    assert enrol_stake(None, {}) == DEFAULT_STAKE
    assert enrol_stake(None, {"min_stake": "250"}) == "250"
    assert enrol_stake(None, {"min_stake": "0"}) == DEFAULT_STAKE
    assert enrol_stake("7", {"min_stake": "250"}) == "7"


@pytest.mark.parametrize(
    "code,msg,permanent",
    [
        (-32003, "run t is full: 1 of M=1 trainers enrolled", True),
        (-32003, "did:x was evicted from t and cannot rejoin", True),
        (-32003, "run t is sealed", True),
        (-32004, "balance of did:x is 0 attoTNZO, needs 1000 for enrolment stake", True),
        (-32006, "tier Verified needs attestation evidence", True),
        (-32602, "stake 5 is below the run's min_stake 10", True),
        (-32003, "did:x is already enrolled in t", False),
        (-32010, "busy", False),
        (-32603, "internal", False),
    ],
)
def test_permanent_refusals(code, msg, permanent):
    assert permanent_refusal(RpcError("tenzro_training_enrollTrainer", code, msg)) is permanent


def test_device_problem_names_the_fix():
    import torch

    assert device_problem("cpu") is None and device_problem("auto") is None
    if not torch.cuda.is_available():
        p = device_problem("cuda:0")
        assert p and "set device: cpu" in p and "\n" not in p
    assert "want auto, cpu" in device_problem("tpu")


def test_missing_extra_names_the_fix():
    e = models.MissingExtra("chronos-bolt", "chronos")
    assert "pip install -e 'trainer[chronos]'" in str(e) and isinstance(e, ImportError)


def _run_cli(cfg: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tenzro_trainer", "run", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _seed_cfg(tmp_path: Path, node, task: str, key: Key, **over) -> Path:
    """The seed's yaml with its placeholders filled (node, key, task) and the metrics port made free (tests
    run side by side); everything else, notably the absent stake, as written."""
    d = yaml.safe_load(SEED_YAML)
    d.update(node_rpc=node.url, trainer_did=key.did, trainer_keypair=str(tmp_path / "trainer0.json"), task_id=task)
    d["metrics"] = {"addr": "127.0.0.1:0"}
    d.update(over)
    p = tmp_path / "trainer.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _post(node, tmp_path: Path, m: int = 1, rounds: int = 1):
    c = Client(node.url)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**24)
    keys = []
    for i in range(m + 1):
        k = Key.generate("machine")
        k.save(tmp_path / f"trainer{i}.json")
        c.faucet(k.did, 10**21)
        keys.append(k)
    md = dict(models.tiny_metadata("timesfm"))
    init = weights.model_to_safetensors(models.build("timesfm", md, seed=0))
    task = f"seed-yaml-{time.time_ns()}"
    spec = sponsor.make_spec(
        task, sp, metadata=md, fragments=1, trainers=m, quorum=m, inner_steps=1, max_rounds=rounds,
        reward_pool="1000000000000000000000", dataset_ref=SYNTH, dataset_hash=data.dataset_hash(SYNTH).hex(),
    )  # fmt: skip
    sponsor.post(c, sp, spec, init)
    return c, keys, task


def test_seed_yaml_with_only_device_replaced_runs_on_cpu(node, tmp_path):
    c, keys, task = _post(node, tmp_path)
    wrong = _run_cli(_seed_cfg(tmp_path, node, task, keys[0]), timeout=120)  # device: "cuda:0", no GPU here
    import torch

    if not torch.cuda.is_available():
        lines = wrong.stderr.strip().splitlines()
        assert wrong.returncode == 2 and len(lines) == 1, wrong.stderr
        assert "cuda:0" in lines[0] and "set device: cpu" in lines[0]
    p = _run_cli(_seed_cfg(tmp_path, node, task, keys[0], device="cpu"))
    assert p.returncode == EXIT_OK, p.stderr[-3000:]
    logs = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
    enrolled = [x for x in logs if x["msg"] == "enrolled"]
    assert enrolled and enrolled[0]["stake"] == DEFAULT_STAKE and enrolled[0]["stake_from"] == "default"
    run = c.get_run(task)
    assert run["status"] == "sealed" and run["trainer_metrics"][keys[0].did]["accepted"] == 1


def test_permanent_refusal_stops_the_trainer(node, tmp_path):
    """A second trainer on a run of M=1 that is already full: one line, exit 5, no retry loop."""
    c, keys, task = _post(node, tmp_path, m=1, rounds=50)
    c.enroll(keys[0], task, "100000000000000000")
    cfg = _seed_cfg(tmp_path, node, task, keys[1], device="cpu", trainer_keypair=str(tmp_path / "trainer1.json"))
    p = _run_cli(cfg, timeout=300)
    assert p.returncode == EXIT_REFUSED, p.stderr[-3000:]
    logs = [json.loads(x) for x in p.stderr.splitlines() if x.startswith("{")]
    refused = [x for x in logs if "enrolment refused" in x["msg"]]
    assert len(refused) == 1 and "is full" in refused[0]["msg"], logs
