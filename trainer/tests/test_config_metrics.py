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


def test_seed_p2p_keys_are_accepted_with_a_warning(tmp_path):
    p = tmp_path / "trainer.yaml"
    p.write_text(
        SEED + "gossip_listen: /ip4/0.0.0.0/tcp/4002\n"
        "hivemind_initial_peers: [/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc]\n"
    )
    c = config.load(p)
    assert c.gossip_listen == "/ip4/0.0.0.0/tcp/4002"
    assert c.hivemind_initial_peers == ["/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc"]
    assert any("--listen-addr /ip4/0.0.0.0/tcp/4002" in w for w in c.warnings)
    assert any("--boot-nodes /ip4/10.0.0.2/tcp/4001/p2p/12D3KooWabc" in w for w in c.warnings)
    d = yaml.safe_load(SEED)
    d["hivemind_initial_peers"] = {"not": "a list"}
    c = config.parse(d)
    assert c.hivemind_initial_peers == [] and "ignored" in c.warnings[0]
    assert not config.parse(yaml.safe_load(SEED)).warnings


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
