"""trainer.yaml parsing and the Prometheus endpoint."""

from __future__ import annotations

import socket
import urllib.request

import pytest
import yaml

from tenzro_trainer import config
from tenzro_trainer.metrics import Metrics

SEED = """
node_rpc: http://127.0.0.1:8545
trainer_did: did:tenzro:machine:z6Mko9hTggMwjSTEaJaPUfE6tqcy2xvU6BnNq3e3o8qVBiyH
trainer_keypair: ./trainer-key.json
task_id: train-2026-04-25-timesfm-200m
inner: {optimizer: adamw, lr: 3.0e-4, weight_decay: 0.1, beta1: 0.9, beta2: 0.95, inner_steps: 24, batch_size: 32}
device: auto
dtype: bf16
gradient_checkpointing: true
metrics: {port: 9101}
"""


def test_seed_keys_parse(tmp_path):
    p = tmp_path / "trainer.yaml"
    p.write_text(SEED)
    c = config.load(p)
    assert c.inner.lr == 3e-4 and c.inner.inner_steps == 24 and c.inner.batch_size == 32
    assert c.metrics_port == 9101 and c.dtype == "bf16" and c.gradient_checkpointing
    assert c.trainer_keypair == str(tmp_path / "trainer-key.json")


@pytest.mark.parametrize(
    "patch,err",
    [
        ({"bogus": 1}, "unknown keys"),
        ({"inner": {"optimizer": "sgd"}}, "only adamw"),
        ({"inner": {"lr": "fast"}}, "inner.lr"),
        ({"dtype": "int8"}, "dtype"),
        ({"task_id": ""}, "task_id is required"),
        ({"attack": {"kind": "nope"}}, "attack.kind"),
    ],
)
def test_bad_configs_are_refused(patch, err):
    d = yaml.safe_load(SEED)
    d.update(patch)
    with pytest.raises(config.ConfigError, match=err):
        config.parse(d)


def test_metrics_endpoint_serves_the_counters():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = Metrics()
    m.serve(port)
    m.steps.inc(3)
    m.round.set(7)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for name in ("tenzro_trainer_inner_steps_total 3.0", "tenzro_trainer_round 7.0", "tenzro_trainer_loss",
                 "tenzro_trainer_submitted_total", "tenzro_trainer_accepted_total", "tenzro_trainer_bytes_sent_total"):  # fmt: skip
        assert name in body
