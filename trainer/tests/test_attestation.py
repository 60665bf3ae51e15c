"""Trainer-side attestation: the Confidential dataset decryption agrees with Go, and the config section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenzro_trainer import config
from tenzro_trainer.attestation import AttestConfig, Attester, DecryptError, decrypt_dataset, encrypt_dataset

VECTOR = Path(__file__).resolve().parents[2] / "enclave" / "testdata" / "dataset_vector.json"


def test_dataset_vector_matches_go():
    v = json.loads(VECTOR.read_text())
    key, blob = bytes.fromhex(v["key"]), bytes.fromhex(v["blob"])
    assert decrypt_dataset(key, v["task_id"], blob) == bytes.fromhex(v["plaintext"])
    for bad_key, task, b in [
        (key[:-1] + bytes([key[-1] ^ 1]), v["task_id"], blob),
        (key, v["task_id"] + "x", blob),
        (key, v["task_id"], blob[:-1] + bytes([blob[-1] ^ 1])),
        (key, v["task_id"], blob[:20] + bytes([blob[20] ^ 1]) + blob[21:]),
    ]:
        with pytest.raises(DecryptError):
            decrypt_dataset(bad_key, task, b)
    with pytest.raises(DecryptError):
        decrypt_dataset(key[:16], v["task_id"], blob)
    with pytest.raises(DecryptError):
        decrypt_dataset(key, v["task_id"], blob[:10])


def test_encrypt_round_trip():
    key = bytes(range(32))
    blob = encrypt_dataset(key, "t", b"a,b\n1,2\n")
    assert decrypt_dataset(key, "t", blob) == b"a,b\n1,2\n"
    assert len(blob) == 12 + 8 + 16


def test_attestation_config():
    base = {"node_rpc": "http://x", "trainer_keypair": "k.json", "task_id": "t"}
    cfg = config.parse(dict(base, attestation={"enclave": "simulated-snp", "gpu": "simulated"}))
    assert cfg.attestation is not None and cfg.attestation.enclave == "simulated-snp"
    assert config.parse(base).attestation is None
    for bad in [{"enclave": "magic"}, {"gpu": "amd"}, {"bogus": 1}, "snp"]:
        with pytest.raises(config.ConfigError):
            config.parse(dict(base, attestation=bad))


class LaggingNode:
    """A node whose state reaches the run's round only after ``behind`` more nonce requests (a light node's
    replica a block late): the one thing this test cannot get from a real node on demand."""

    def __init__(self, at: int, behind: int) -> None:
        self.at, self.behind, self.calls = at, behind, 0

    def call(self, method: str, params: dict) -> dict:
        assert method == "tenzro_attest_getNonce"
        self.calls += 1
        r = self.at - 1 if self.calls <= self.behind else self.at
        return {"nonce": "", "shard": 0, "model_hash": "0x00", "round": r}


@pytest.mark.parametrize(
    "behind, round_, wait_s, want_calls, want_round",
    [
        (0, 4, 30.0, 1, 4),  # the node is at the round: asked once
        (2, 4, 30.0, 3, 4),  # a node two answers behind: asked until it is at the round
        (2, None, 30.0, 1, 3),  # an enrolment names no round: the node's answer is taken as is
        (10**9, 4, 0.3, None, 3),  # a node that never catches up: given up after wait_s, the stale nonce returned
    ],
)
def test_nonce_waits_for_the_round(behind, round_, wait_s, want_calls, want_round):
    a = Attester(AttestConfig(enclave="simulated-snp"), "http://127.0.0.1:1")
    node = LaggingNode(4, behind)
    n = a._nonce(node, "t", "did:key:z", round_, wait_s)
    assert n["round"] == want_round
    if want_calls is not None:
        assert node.calls == want_calls
    else:
        assert node.calls > 1
