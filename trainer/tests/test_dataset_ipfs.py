"""Datasets by content address: ``ipfs://`` through the trainer's node, the corpus hash shared with
Go, and the multi-node run (a sponsor's node adds a CSV corpus; two trainers attached to two other
nodes fetch it over bitswap, check the hash and train to a sealed, verified receipt)."""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, NodeProc, free_port
from tenzro_trainer import config, data, models, sponsor, weights
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import EXIT_OK, Trainer
from tenzro_trainer.metrics import Metrics
from tenzro_trainer.rpc import Client, RpcError
from test_node import run_all, trainer_cfg


def test_corpus_hash_vectors_shared_with_go(tmp_path):
    vs = json.loads((REPO / "dataset" / "testdata" / "corpus_vectors.json").read_text())
    assert len(vs) >= 5
    for v in vs:
        got = data.corpus_hash(data.corpus_from_bytes(v["name"], v["csv"].encode())).hex()
        assert got == v["dataset_hash"], v["name"]
        p = tmp_path / f"{v['name']}.csv"
        p.write_bytes(v["csv"].encode())
        assert data.corpus_hash(data.load_corpus(f"file://{p}")).hex() == v["dataset_hash"]


def test_refused_refs():
    for ref in ("ipfs://", "ipfs://not-a-cid!", "http://example.org/x.csv", "ftp://x/y"):
        with pytest.raises(data.DatasetError):
            data.load_corpus(ref, data.Sources(node_url="http://127.0.0.1:9"))
    with pytest.raises(config.ConfigError):
        config.parse({"node_rpc": "http://x", "trainer_keypair": "k", "task_id": "t", "ipfs_gateway": "file:///x"})


def write_corpus(path: Path) -> None:
    rows = ["temp,load,wind"]
    for i in range(360):
        rows.append(f"{20 + 5 * math.sin(i / 9):.4f},{100 + 30 * math.cos(i / 17):.3f},{(i * 7919) % 23 / 3:.5f}")
    path.write_text("\n".join(rows) + "\n")


def add_corpus(bins: Path, node: NodeProc, tmp_path: Path, *flags: str) -> tuple[Path, dict]:
    """Writes the test corpus to tmp_path/corpus.csv and adds it with `tenzro dataset add` signed by the
    funded publisher (flags: more of its flags, e.g. --encrypt-key): the CSV's path and the CLI's answer."""
    csv = tmp_path / "corpus.csv"
    write_corpus(csv)
    key = publisher(tmp_path, node.url)
    return csv, json.loads(
        cli(bins, "dataset", "add", "--rpc", node.url, "--format", "json", "--key", key, *flags, str(csv))
    )


def publisher(tmp_path: Path, url: str) -> str:
    """A key file for `tenzro dataset add --key`: imports are signed, and the node pins for that DID,
    which needs a balance (--blob-price per byte pinned): the faucet funds it on the --dev node."""
    p = tmp_path / "publisher.json"
    if not p.exists():
        k = Key.generate("human")
        k.save(p)
        Client(url).faucet(k.did, 10**18)
    return str(p)


def cli(bins: Path, *args: str) -> str:
    p = subprocess.run([str(bins / "tenzro"), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def light_nodes(go_bins, node, tmp_path):
    boot = Client(node.url).node_info()["listen_addrs"][0]
    out = []
    for i in range(2):
        d = tmp_path / f"light{i}"
        d.mkdir()
        n = NodeProc(
            go_bins,
            d,
            free_port(),
            ["--role", "full", "--enclave", "none", "--boot-nodes", boot, "--dataset-stall-timeout", "3s"],
            follow=node,
        )
        n.start()
        out.append(n)
    yield out
    for n in out:
        n.stop()


def test_ipfs_dataset_multi_node_run(go_bins, node, light_nodes, tmp_path):
    csv, added = add_corpus(go_bins, node, tmp_path)
    ref, want_hash = added["ref"], added["dataset_hash"]
    assert ref.startswith("ipfs://bafy") or ref.startswith("ipfs://bafk")
    # The Go CLI's dataset_hash is the trainer's corpus hash.
    assert want_hash == data.corpus_hash(data.load_corpus(f"file://{csv}")).hex()

    c = Client(node.url)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**21)
    keys = []
    for i in range(2):
        key = Key.generate("machine")
        key.save(tmp_path / f"trainer{i}.json")
        c.faucet(key.did, 10**19)
        keys.append(key)
    md = dict(models.tiny_metadata("timesfm"), stride=4)
    init = weights.model_to_safetensors(models.build("timesfm", md, seed=0))
    task = f"ipfs-{time.time_ns()}"
    spec = sponsor.make_spec(
        task, sp, metadata=md, fragments=2, trainers=2, quorum=2, inner_steps=2, max_rounds=2,
        dataset_ref=ref, dataset_hash=want_hash, reward_pool=str(10**18),
    )  # fmt: skip
    sponsor.post(c, sp, spec, init)

    # Each trainer signs its node's fetch, which pins for (and is charged to) its DID: its node must have
    # caught up with the faucet transfer first.
    for i, key in enumerate(keys):
        wait_balance(Client(light_nodes[i].url), key.did)
    trs = []
    for i, key in enumerate(keys):
        cfg = config.parse(trainer_cfg(node, task, i, tmp_path, ipfs_node=light_nodes[i].url))
        trs.append(Trainer(cfg, key, metrics=Metrics(), stop=threading.Event()))
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    run = c.get_run(task)
    assert run["status"] == "sealed"
    rc = c.get_receipt(task)
    v = c.call("tenzro_training_verifyReceipt", {"receipt": rc, "root": rc["run_root"]})
    assert v["valid"] == 1, v
    # Each trainer's own node fetched the dataset over bitswap and holds it pinned.
    cid = ref.removeprefix("ipfs://")
    for n in light_nodes:
        held = json.loads(cli(go_bins, "dataset", "ls", "--rpc", n.url, "--format", "json"))
        assert [(h["cid"], h["source"]) for h in held] == [(cid, "fetched")]
    # The IPFS path gateway of a trainer's node serves the same bytes, and ipfs_gateway: reads them.
    gw = data.load_corpus(ref, data.Sources(ipfs_gateway=light_nodes[0].url))
    assert data.corpus_hash(gw).hex() == want_hash


def test_hash_mismatch_refused(go_bins, node, tmp_path):
    _, added = add_corpus(go_bins, node, tmp_path)
    corpus = data.load_corpus(added["ref"], data.Sources(node_url=node.url))
    with pytest.raises(data.DatasetError, match="mismatch"):
        data.check_hash(corpus, "00" * 32)
    with pytest.raises(data.DatasetError, match="could not fetch"):
        # A CID the node refuses (identity multihash): the node's precise error comes through.
        data.load_corpus("ipfs://bafkqaaa", data.Sources(node_url=node.url))


def test_decrypt_dataset_vector_shared_with_go():
    v = json.loads((REPO / "dataset" / "testdata" / "encrypted_vector.json").read_text())
    key, ct = bytes.fromhex(v["key"]), bytes.fromhex(v["ciphertext"])
    with pytest.raises(data.DatasetError):
        data.decrypt_dataset(key[:16], v["task_id"], ct)
    assert data.decrypt_dataset(key, v["task_id"], ct) == v["plaintext"].encode()
    with pytest.raises(data.DatasetError, match="does not decrypt"):
        data.decrypt_dataset(key, "another-task", ct)


def test_confidential_ipfs_dataset_decrypted_in_memory(go_bins, node, tmp_path):
    """`tenzro dataset add --encrypt-key` stores the ciphertext (CID over it); the trainer reads it through
    its node and decrypts in memory with the released key before the hash check."""
    key = bytes(range(32))
    (tmp_path / "k.hex").write_text(key.hex())
    _, added = add_corpus(go_bins, node, tmp_path, "--encrypt-key", str(tmp_path / "k.hex"), "--task-id", "task-c")
    assert added["encrypted"]
    src = data.Sources(node_url=node.url, decrypt=lambda b: data.decrypt_dataset(key, "task-c", b))
    corpus = data.load_corpus(added["ref"], src)
    data.check_hash(corpus, added["dataset_hash"])
    # The trainer loop's Confidential path (the key from the broker) reads the same ipfs:// ciphertext.
    from tenzro_trainer.attestation import load_encrypted_corpus

    again = load_encrypted_corpus(added["ref"], key, "task-c", data.Sources(node_url=node.url))
    data.check_hash(again, added["dataset_hash"])
    with pytest.raises(data.DatasetError):
        load_encrypted_corpus(added["ref"], key, "another-task", data.Sources(node_url=node.url))


def wait_balance(c: Client, did: str) -> None:
    """Waits (2 minutes at most) until c's node sees a balance for did."""
    deadline = time.monotonic() + 120
    while int(c.get_balance(did).get("balance", "0")) == 0:
        assert time.monotonic() < deadline, f"{c.url} never saw {did}'s balance"
        time.sleep(0.2)


def funded_signer(tmp_path: Path, dev: NodeProc, on: NodeProc) -> tuple[Key, data.Sources]:
    """A machine key funded by ``dev``'s faucet, once ``on`` (a follower) sees the balance, and Sources
    that sign ``on``'s fetches with it, as the trainer loop does."""
    key = Key.generate("machine")
    Client(dev.url).faucet(key.did, 10**19)
    lc = Client(on.url)
    wait_balance(lc, key.did)
    return key, data.Sources(node_url=on.url, sign=lambda op, cid: lc.dataset_request(key, op, cid))


def test_unreachable_cid_names_the_peers_asked(node, light_nodes, tmp_path):
    """A CID that no connected peer has: the trainer's node gives up after its stall timeout and says
    which peers it asked; the trainer reports it and the node holds nothing."""
    peer = Client(node.url).node_info()["peer_id"]
    _, src = funded_signer(tmp_path, node, light_nodes[0])
    with pytest.raises(data.DatasetError, match=rf"peer\(s\) asked \[.*{peer}.*\]"):
        data.load_corpus("ipfs://bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu", src)
    held = json.loads(cli(light_nodes[0].bins, "dataset", "ls", "--rpc", light_nodes[0].url, "--format", "json"))
    assert held == []


def test_trainer_signs_its_fetch_on_a_network(go_bins, node, light_nodes, tmp_path):
    """A node off --dev (a full node following the chain) refuses an unsigned fetch with a precise error
    and pins nothing; the trainer's signed fetch (its key, the chain's id, a fresh nonce) is taken, pins the
    dataset for the trainer's DID and reads the corpus; the same header replayed is refused."""
    _, added = add_corpus(go_bins, node, tmp_path)
    full = light_nodes[0]
    with pytest.raises(data.DatasetError, match="takes only signed fetches"):
        data.load_corpus(added["ref"], data.Sources(node_url=full.url))
    assert json.loads(cli(go_bins, "dataset", "ls", "--rpc", full.url, "--format", "json")) == []

    key, src = funded_signer(tmp_path, node, full)
    corpus = data.load_corpus(added["ref"], src)
    data.check_hash(corpus, added["dataset_hash"])
    held = json.loads(cli(go_bins, "dataset", "ls", "--rpc", full.url, "--format", "json"))
    assert [(h["cid"], h["source"], h["owners"]) for h in held] == [(added["cid"], "fetched", [key.did])]

    # One header, one fetch: the node refuses the same (did, nonce) again.
    import requests

    hdr = Client(full.url).dataset_request(key, "fetch", added["cid"])
    url = f"{full.url}/api/dataset/fetch"
    assert requests.post(url, params={"ref": added["ref"]}, headers={"Tenzro-Dataset-Request": hdr}, timeout=60).ok
    again = requests.post(url, params={"ref": added["ref"]}, headers={"Tenzro-Dataset-Request": hdr}, timeout=60)
    assert again.status_code == 401 and "used already" in again.json()["error"]


def helper(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``tenzro-trainer <args>`` in its own process, with exactly the key environment ``env`` describes."""
    import os
    import sys

    full_env = {k: v for k, v in os.environ.items() if k != "TENZRO_KEY"} | env
    return subprocess.run(
        [sys.executable, "-m", "tenzro_trainer", *args], capture_output=True, text=True, timeout=600, env=full_env
    )


def test_eval_export_follow_sign_their_fetch_on_a_network(go_bins, node, light_nodes, tmp_path):
    """``tenzro-trainer eval``/``export`` and ``experiment.follow`` read an ``ipfs://`` corpus through a node off
    --dev: without a key they fail with the precise refusal (naming --key) and the node pins nothing; with
    ``--key``, ``$TENZRO_KEY`` or the experiment's sponsor key they sign the fetch, which pins for that DID."""
    import importlib.util

    from tenzro_trainer import experiment

    csv = tmp_path / "corpus.csv"
    write_corpus(csv)
    added = json.loads(
        cli(go_bins, "dataset", "add", "--rpc", node.url, "--format", "json", "--key", publisher(tmp_path, node.url),
            str(csv))
    )  # fmt: skip
    full = light_nodes[0]
    c, fc = Client(node.url), Client(full.url)
    work = tmp_path / "exp"
    work.mkdir()
    sp = Key.generate("human")
    sp.save(work / "sponsor.json")
    c.faucet(sp.did, 10**21)
    tk = Key.generate("machine")
    tk.save(tmp_path / "trainer0.json")
    c.faucet(tk.did, 10**19)
    ev = Key.generate("machine")
    ev.save(tmp_path / "evaluator.json")
    c.faucet(ev.did, 10**19)
    md = dict(models.tiny_metadata("timesfm"), stride=4)
    task = f"signed-eval-{time.time_ns()}"
    spec = sponsor.make_spec(
        task, sp, metadata=md, fragments=2, trainers=1, quorum=1, inner_steps=2, max_rounds=1,
        dataset_ref=added["ref"], dataset_hash=added["dataset_hash"], reward_pool=str(10**18),
    )  # fmt: skip
    (work / "spec.json").write_text(json.dumps(spec))
    sponsor.post(c, sp, spec, weights.model_to_safetensors(models.build("timesfm", md, seed=0)))
    for k in (sp, tk, ev):
        wait_balance(fc, k.did)
    deadline = time.monotonic() + 120
    while True:  # the follower has the run
        try:
            fc.get_run(task)
            break
        except RpcError:
            assert time.monotonic() < deadline, "the full node never saw the run"
            time.sleep(0.2)

    home = tmp_path / "home"  # no ~/.tenzro/key.json there: no default key
    home.mkdir()
    nokey = {"HOME": str(home)}
    p = helper(["eval", "--rpc", full.url, "--task-id", task], nokey)
    assert p.returncode == 1 and "takes only signed fetches" in p.stderr and "--key" in p.stderr, p.stderr
    assert json.loads(cli(go_bins, "dataset", "ls", "--rpc", full.url, "--format", "json")) == []
    p = helper(["eval", "--rpc", full.url, "--task-id", task, "--key", str(tmp_path / "missing.json")], nokey)
    assert p.returncode == 2 and "--key" in p.stderr and "missing.json" in p.stderr, p.stderr

    p = helper(["eval", "--rpc", full.url, "--task-id", task, "--key", str(tmp_path / "evaluator.json")], nokey)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["round"] == 0 and math.isfinite(out["heldout_mse"])
    held = json.loads(cli(go_bins, "dataset", "ls", "--rpc", full.url, "--format", "json"))
    assert [(h["cid"], h["owners"]) for h in held] == [(added["cid"], [ev.did])]

    cfg = config.parse(trainer_cfg(node, task, 0, tmp_path, ipfs_node=full.url))
    assert run_all([Trainer(cfg, tk, metrics=Metrics(), stop=threading.Event())]) == [EXIT_OK]
    deadline = time.monotonic() + 120
    while fc.get_run(task)["status"] != "sealed":
        assert time.monotonic() < deadline, "the full node never saw the seal"
        time.sleep(0.2)

    e = experiment.Experiment(rpc=full.url, workdir=work, quiet=True)
    rows = experiment.follow(e, fc, task, [], timeout=120)  # signed with the sponsor key in the workdir
    assert len(rows) == 1 and math.isfinite(rows[0].eval_loss)
    (work / "sponsor.json").unlink()
    with pytest.raises(data.DatasetError, match="no key signs"):
        experiment.follow(e, fc, task, [], timeout=120)
    owners = {h["cid"]: set(h["owners"]) for h in json.loads(cli(go_bins, "dataset", "ls", "--rpc", full.url, "--format", "json"))}  # fmt: skip
    assert owners == {added["cid"]: {ev.did, tk.did, sp.did}}

    if importlib.util.find_spec("onnxruntime") is None:
        return  # the [onnx] extra is not installed: export is covered where it is (test_onnx_catalog)
    cat = tmp_path / "catalog"
    p = helper(["export", "--onnx", "--rpc", full.url, "--task-id", task, "--dir", str(cat)], nokey)
    assert p.returncode == 1 and "takes only signed fetches" in p.stderr, p.stderr[-2000:]
    p = helper(["export", "--onnx", "--rpc", full.url, "--task-id", task, "--dir", str(cat)],
               nokey | {"TENZRO_KEY": str(tmp_path / "evaluator.json")})  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert (cat / f"{json.loads(p.stdout)['final_model_hash']}.onnx").is_file()
