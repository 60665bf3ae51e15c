"""The reference trainer in the Verified and Confidential tiers against a real tenzro-node whose syncer key
and key broker live in a simulated SEV-SNP enclave (``--enclave simulated-snp``); the trainers attest through
``tenzro attest quote --enclave simulated-snp`` (issue 11 item 4)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import NodeProc, free_port
from tenzro_trainer import config, data
from tenzro_trainer.attestation import Attester, encrypt_dataset
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import EXIT_OK, Trainer
from tenzro_trainer.metrics import Metrics
from tenzro_trainer.rpc import Client, RpcError
from test_node import make_trainer, post_run, run_all, trainer_cfg

# enclave.SimulatedMeasurement: SHA-384 of a public label (the simulated image's launch measurement).
SIM_MEASUREMENT = hashlib.sha384(b"tenzro/train SIMULATED enclave image").hexdigest()


def sim_policy(tier: str, gpu: bool = False) -> dict:
    p = {"version": 1, "tier": tier, "allow_simulated": True,
         "snp": {"measurement": [SIM_MEASUREMENT], "smt_allowed": True, "vmpl": 0}}  # fmt: skip
    if gpu:
        p["nvidia_cc"] = {"cc_mode": "on", "architectures": ["HOPPER"], "min_driver_version": "550.54.14"}
    return p


@pytest.fixture
def enclave_node(go_bins: Path, tmp_path: Path):
    n = NodeProc(go_bins, tmp_path / "node", free_port(), ["--enclave", "simulated-snp"])
    n.data_dir.mkdir()
    n.start()
    yield n
    n.stop()


def post(
    node,
    tmp_path: Path,
    tier: str,
    dataset_ref: str,
    dataset_hash: str,
    m: int = 2,
    gpu: bool = False,
    task: str | None = None,
    dataset_key: bytes | None = None,
):
    return post_run(
        node, tmp_path, m=m, k=m, task=task or f"{tier.lower()}-{time.time_ns()}", dataset_key=dataset_key,
        dataset_ref=dataset_ref, dataset_hash=dataset_hash, tier=tier, attestation_policy={tier: sim_policy(tier, gpu)},
    )  # fmt: skip


def attest_cfg(go_bins: Path, gpu: str = "none") -> dict:
    return {"attestation": {"enclave": "simulated-snp", "gpu": gpu, "tenzro": str(go_bins / "tenzro")}}


def check_sealed(c: Client, task: str, keys: list[Key], trs) -> dict:
    run = c.get_run(task)
    assert run["status"] == "sealed"
    for k in keys:
        assert run["trainer_metrics"][k.did]["accepted"] == 2 * 2
    rc = c.get_receipt(task)
    # every enrolment and submission's evidence, plus the syncer key's (the list is a blob, by its hash)
    assert rc["attestation_count"] == len(keys) * (1 + 2 * 2) + 1
    v = c.call("tenzro_training_verifyReceipt", {"receipt": rc, "root": rc["run_root"]})
    assert v["valid"] == 1, v
    return rc


def test_verified_run_with_reference_trainer(enclave_node, go_bins, tmp_path):
    ref = "statsmodels://co2,nile"
    h = data.corpus_hash(data.load_corpus(ref)).hex()
    c, keys, task, _ = post(enclave_node, tmp_path, "Verified", ref, h)
    # Without an attestation section the trainer says what is missing and stops.
    bare = make_trainer(enclave_node, task, keys[0], 0, tmp_path)
    assert run_all([bare], timeout=120) != [EXIT_OK]
    trs = [make_trainer(enclave_node, task, k, i, tmp_path, **attest_cfg(go_bins)) for i, k in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    check_sealed(c, task, keys, trs)


class ViaLight(Client):
    """A trainer's client that reads from and enrols on the syncer's node but asks its light node for the
    attestation nonces and submits through it (the light node answers from its own replica of the chain and
    puts the submission's record on chain; the syncer's node fetches the payload from it by hash)."""

    RELAYED = ("tenzro_attest_getNonce", "tenzro_training_submitOuterGradient")

    def __init__(self, syncer_url: str, light_url: str) -> None:
        super().__init__(syncer_url)
        self.light = Client(light_url)
        self.relayed: dict[str, int] = {}

    def call(self, method, params=None):
        if method in self.RELAYED:
            self.relayed[method] = self.relayed.get(method, 0) + 1
            return self.light.call(method, params)
        return super().call(method, params)

    def put_blob(self, data, h=None, key=None, task=""):
        # A payload submitted by reference must be on the node that takes the submission.
        return self.light.put_blob(data, h, key, task)


def test_verified_run_through_a_light_node(enclave_node, go_bins, tmp_path):
    """Trainer 1 gets its attestation nonces from a light node (deterministic, from its replica of the chain)
    and submits through it; the syncer re-checks and aggregates its attested submissions."""
    boot = Client(enclave_node.url).node_info()["listen_addrs"][0]
    light = NodeProc(
        go_bins,
        tmp_path / "light",
        free_port(),
        # a replica (--role full): a header-only light client cannot follow a --dev node, which has no CometBFT
        ["--role", "full", "--enclave", "none", "--boot-nodes", boot],
        follow=enclave_node,
    )
    light.data_dir.mkdir()
    light.start()
    try:
        ref = "statsmodels://co2,nile"
        h = data.corpus_hash(data.load_corpus(ref)).hex()
        c, keys, task, _ = post(enclave_node, tmp_path, "Verified", ref, h)
        # A light node answers as the syncer's node does: the same state, the same refusals.
        lc = Client(light.url)
        with pytest.raises(RpcError) as direct:
            c.call("tenzro_attest_getNonce", {"task_id": task, "did": "not-a-did"})
        with pytest.raises(RpcError) as relayed:
            lc.call("tenzro_attest_getNonce", {"task_id": task, "did": "not-a-did"})
        assert (relayed.value.code, relayed.value.message) == (direct.value.code, direct.value.message)
        assert direct.value.message.startswith("did: "), direct.value.message
        assert lc.node_info()["role"] == "full"
        t0 = make_trainer(enclave_node, task, keys[0], 0, tmp_path, **attest_cfg(go_bins))
        via = ViaLight(enclave_node.url, light.url)
        cfg1 = config.parse(trainer_cfg(enclave_node, task, 1, tmp_path, **attest_cfg(go_bins)))
        t1 = Trainer(cfg1, keys[1], client=via, metrics=Metrics(), stop=threading.Event())
        assert run_all([t0, t1]) == [EXIT_OK, EXIT_OK]
        check_sealed(c, task, keys, [t0, t1])
        # one nonce for the enrolment and one per submission (2 rounds × 2 fragments), all via the light node
        assert via.relayed["tenzro_attest_getNonce"] >= 1 + 4
        assert via.relayed["tenzro_training_submitOuterGradient"] >= 4
    finally:
        light.stop()


def test_verified_run_with_gpu_evidence(enclave_node, go_bins, tmp_path):
    """Issue 16 with the reference trainer: the policy asks for nvidia_cc; trainers send simulated SEV-SNP +
    simulated NVIDIA CC evidence bound together. A trainer without GPU evidence is refused at enrolment."""
    ref = "statsmodels://co2,nile"
    h = data.corpus_hash(data.load_corpus(ref)).hex()
    c, keys, task, _ = post(enclave_node, tmp_path, "Verified", ref, h, gpu=True)
    att = config.parse(trainer_cfg(enclave_node, task, 0, tmp_path, **attest_cfg(go_bins))).attestation
    with pytest.raises(RpcError) as e:
        c.enroll(keys[0], task, str(10**17), attestation=Attester(att, enclave_node.url).claim(c, task, keys[0].did))
    assert "nvidia.missing" in e.value.message
    trs = [
        make_trainer(enclave_node, task, k, i, tmp_path, **attest_cfg(go_bins, "simulated")) for i, k in enumerate(keys)
    ]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    check_sealed(c, task, keys, trs)


def test_confidential_run_with_reference_trainer(enclave_node, go_bins, tmp_path):
    corpus = data.load_corpus("statsmodels://co2,nile")
    n = max(len(s.values) for s in corpus)
    rows = [",".join(s.name for s in corpus)]
    for i in range(n):
        rows.append(",".join(repr(float(s.values[i])) if i < len(s.values) else "" for s in corpus))
    plain = ("\n".join(rows) + "\n").encode()
    h = data.corpus_hash(data.csv_series(plain.decode())).hex()
    enc = tmp_path / "dataset.enc"
    c, keys, task, res = post(enclave_node, tmp_path, "Confidential", f"file://{enc}", h)
    key = base64.b64decode(res["dataset_key"])
    enc.write_bytes(encrypt_dataset(key, task, plain))
    assert plain not in enc.read_bytes()
    trs = [make_trainer(enclave_node, task, k, i, tmp_path, **attest_cfg(go_bins)) for i, k in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    check_sealed(c, task, keys, trs)
    # The cleartext never reached the disk next to the ciphertext.
    assert sorted(p.name for p in tmp_path.glob("dataset*")) == ["dataset.enc"]


def test_confidential_run_from_encrypted_ipfs_dataset(enclave_node, go_bins, tmp_path):
    """Issue 15 item 4 end to end: the sponsor picks the dataset key, encrypts and adds the corpus to its
    node (the CID is over the ciphertext), posts the Confidential spec naming that ipfs:// CID with its own key;
    the reference trainers release the key with their evidence, fetch the ciphertext over ipfs:// through
    their node, decrypt in memory, check the hash and train to a sealed, verified run."""
    corpus = data.load_corpus("statsmodels://co2,nile")
    n = max(len(s.values) for s in corpus)
    rows = [",".join(s.name for s in corpus)]
    for i in range(n):
        rows.append(",".join(repr(float(s.values[i])) if i < len(s.values) else "" for s in corpus))
    csv = tmp_path / "corpus.csv"
    csv.write_text("\n".join(rows) + "\n")
    key = os.urandom(32)
    (tmp_path / "dataset.key").write_text(key.hex())
    task = f"confidential-ipfs-{time.time_ns()}"
    publisher = tmp_path / "publisher.json"  # imports are signed; the node pins for this funded DID
    pk = Key.generate("human")
    pk.save(publisher)
    Client(enclave_node.url).faucet(pk.did, 10**18)
    added = json.loads(
        subprocess.run(
            [str(go_bins / "tenzro"), "dataset", "add", "--rpc", enclave_node.url, "--format", "json",
             "--key", str(publisher), "--encrypt-key", str(tmp_path / "dataset.key"), "--task-id", task, str(csv)],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    assert added["encrypted"] and added["ref"].startswith("ipfs://")
    c, keys, task, res = post(
        enclave_node, tmp_path, "Confidential", added["ref"], added["dataset_hash"], task=task, dataset_key=key
    )
    assert base64.b64decode(res["dataset_key"]) == key
    # The key must be 32 bytes, and only a Confidential run takes one.
    for i, (tier, k, why) in enumerate(
        [("Confidential", key[:16], "want 32"), ("Verified", key, "only a Confidential")]
    ):
        (tmp_path / f"refused{i}").mkdir()
        with pytest.raises(RpcError, match=why):
            post(enclave_node, tmp_path / f"refused{i}", tier, added["ref"], added["dataset_hash"], dataset_key=k)
    trs = [make_trainer(enclave_node, task, k, i, tmp_path, **attest_cfg(go_bins)) for i, k in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    check_sealed(c, task, keys, trs)
