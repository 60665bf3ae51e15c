"""Trainer-side attestation: the Confidential dataset decryption agrees with Go, and the config section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenzro_trainer import config
from tenzro_trainer.attestation import DecryptError, decrypt_dataset, encrypt_dataset

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
