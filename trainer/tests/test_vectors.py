"""Go and Python produce the same bytes: wire/testdata/vectors.json (docs/PROTOCOL.md)."""

from __future__ import annotations

import json

import blake3
import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from tenzro_trainer import weights
from tenzro_trainer.canon import (
    DOMAIN_MODEL,
    Canon,
    content_hash,
    method_fields,
    model_hash,
    parse_hash,
    request_preimage,
    submission_preimage,
)
from tenzro_trainer.identity import Key, parse_did, verify


def _fields(c: Canon, fields: list[dict] | None) -> Canon:
    for f in fields or []:
        ((kind, v),) = f.items()
        if kind == "str":
            c.str(v)
        elif kind == "u64":
            c.u64(int(v))
        elif kind == "hash":
            c.hash(bytes.fromhex(v))
        elif kind == "bytes":
            c.bytes(bytes.fromhex(v))
        else:
            raise AssertionError(f"unknown field kind {kind}")
    return c


def test_keys(vectors):
    assert vectors["keys"]
    for k in vectors["keys"]:
        key = Key.from_seed(k["kind"], bytes.fromhex(k["seed"]))
        assert key.did == k["did"]
        assert key.public_key.hex() == k["public_key"]
        assert parse_did(k["did"]) == (k["kind"], bytes.fromhex(k["public_key"]))
        assert Key.from_json(key.to_json()) == key


def test_canon(vectors):
    assert vectors["canon"]
    for v in vectors["canon"]:
        c = _fields(Canon(v["domain"]), v["fields"])
        assert c.out().hex() == v["hex"]
        assert c.sum().hex() == v["sha256"]


def test_request_preimages_and_signatures(vectors):
    assert vectors["requests"]
    for v in vectors["requests"]:
        key = Key.from_seed(v["signer_kind"], bytes.fromhex(v["signer_seed"]))
        assert key.did == v["signer"]
        pre = request_preimage(
            v["chain_id"], v["method"], v["signer"], int(v["nonce"]), _fields(method_fields(), v["fields"])
        )
        assert pre.hex() == v["preimage_hex"], v["method"]
        assert key.sign(pre).hex() == v["signature_hex"], v["method"]
        assert verify(v["signer"], pre, bytes.fromhex(v["signature_hex"]))


def test_submissions(vectors):
    assert vectors["submissions"]
    for v in vectors["submissions"]:
        payload = bytes.fromhex(v["payload_hex"])
        assert content_hash(payload).hex() == v["payload_hash"]
        pre = submission_preimage(
            v["chain_id"],
            v["task_id"],
            v["trainer_did"],
            int(v["round"]),
            int(v["fragment_index"]),
            bytes.fromhex(v["payload_hash"]),
            v.get("metrics"),
        )
        assert pre.hex() == v["preimage_hex"]
        key = Key.from_seed("machine", bytes.fromhex(v["seed"]))
        assert key.did == v["trainer_did"]
        assert key.sign(pre).hex() == v["signature_hex"]
        # The payload is hashed as opaque bytes. (Its 8-byte length prefix says 16 while the JSON
        # header is 56 bytes, so it is not a parseable safetensors file; reported to the lead.)


def _content_input(v: dict) -> bytes:
    if "input_hex" in v:
        return bytes.fromhex(v["input_hex"])
    return bytes(i % 251 for i in range(int(v["input_len"])))  # the official BLAKE3 test input


def test_content_hash(vectors):
    """payload_hash / weights_hash are BLAKE3-256 (wire.ContentHash), byte for byte."""
    vs = vectors["content_hash"]
    assert {v.get("input_len") for v in vs} >= {0, 1, 1023, 1024, 1025, 8192, 102400}
    for v in vs:
        b = _content_input(v)
        assert content_hash(b).hex() == v["blake3"], v.get("input_len", v.get("input_hex"))
        h = blake3.blake3()
        for i in range(0, len(b), 1000):  # streamed in pieces: the same hash
            h.update(b[i : i + 1000])
        assert h.digest().hex() == v["blake3"]
    # BLAKE3's published vector for the empty input.
    assert content_hash(b"").hex() == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"


def test_model_hash(vectors):
    v = vectors["model_hash"]
    frags = [bytes.fromhex(h) for h in v["fragment_hashes"]]
    c = Canon(DOMAIN_MODEL)
    for h in frags:
        c.hash(h)
    assert c.out().hex() == v["hex"]
    assert c.sum_content().hex() == v["model_hash"]
    assert model_hash(frags).hex() == v["model_hash"]
    assert c.sum().hex() != v["model_hash"]  # not SHA-256


def test_parse_hash_prefixes():
    h = "ab" * 32
    for s in (h, "0x" + h, "sha256:" + h, "blake3:" + h, "0xblake3:" + h):
        assert parse_hash(s) == bytes.fromhex(h)
    for s in ("blake3:sha256:" + h, "md5:" + h, h[:62]):
        with pytest.raises(ValueError):
            parse_hash(s)


def test_submission_metrics_vector_and_rules(vectors):
    with_metrics = [v for v in vectors["submissions"] if v.get("metrics")]
    assert with_metrics, "the vectors carry a submission with a metrics map"
    v = with_metrics[0]
    plain = submission_preimage(
        v["chain_id"],
        v["task_id"],
        v["trainer_did"],
        int(v["round"]),
        int(v["fragment_index"]),
        bytes.fromhex(v["payload_hash"]),
    )
    assert bytes.fromhex(v["preimage_hex"]).startswith(plain) and len(bytes.fromhex(v["preimage_hex"])) > len(plain)
    for bad in ({"Bad": 1.0}, {"x": float("nan")}, {f"m{i}": 1.0 for i in range(17)}):
        with pytest.raises(ValueError, match="metrics"):
            submission_preimage(v["chain_id"], "t", v["trainer_did"], 0, 0, bytes(32), bad)


def test_outer_step_sign_convention(vectors):
    """The trainer sends θ_before − θ_after; the syncer's step is PyTorch SGD(nesterov=True)."""
    v = vectors["outer_sign"]
    before = torch.tensor(v["theta_before"], dtype=torch.float32)
    after = torch.tensor(v["theta_after"], dtype=torch.float32)
    layout = [{"name": "w", "dtype": "F32", "shape": [len(before)]}]
    g = st_load(weights.outer_gradient({"w": before}, {"w": after}, layout))["w"]
    assert g.tolist() == pytest.approx(v["outer_gradient"], abs=0)
    p = torch.nn.Parameter(before.clone())
    opt = torch.optim.SGD([p], lr=v["lr"], momentum=v["momentum"], nesterov=True)
    p.grad = g
    opt.step()
    assert p.detach().tolist() == pytest.approx(v["weights_after_one_outer_step_from_before"], rel=1e-6)


def test_safetensors_layout_the_node_parses():
    """Python's safetensors writes the little-endian header length, the JSON header padded with
    spaces to 8 bytes, then the data — the layout wire/safetensors parses."""
    b = st_save({"w": torch.tensor([1.0])})
    n = int.from_bytes(b[:8], "little")
    assert n % 8 == 0 and b[8 : 8 + n].rstrip(b" ").endswith(b"}")
    assert b[8 + n :] == bytes.fromhex("0000803f")


def test_did_parse_is_strict():
    k = Key.from_seed("machine", bytes(range(32)))
    with pytest.raises(ValueError):
        parse_did(k.did.replace("machine", "robot"))
    with pytest.raises(ValueError):
        parse_did(k.did[:-1])
    with pytest.raises(ValueError):
        parse_did("did:tenzro:machine:" + "z" + "1" * 60)


def test_preimages_name_the_chain(vectors):
    """Issue 22: the chain id is the first field after the domain, so a signature for one chain does not verify
    for another (the node refuses it as signed for another chain)."""
    v = vectors["requests"][0]
    fields = _fields(method_fields(), v["fields"])
    here = request_preimage(v["chain_id"], v["method"], v["signer"], int(v["nonce"]), fields)
    other = request_preimage(v["chain_id"] + "-other", v["method"], v["signer"], int(v["nonce"]), fields)
    assert here == bytes.fromhex(v["preimage_hex"]) and other != here
    s = vectors["submissions"][0]
    args = (s["task_id"], s["trainer_did"], int(s["round"]), int(s["fragment_index"]), bytes.fromhex(s["payload_hash"]))
    assert submission_preimage(s["chain_id"], *args) == bytes.fromhex(s["preimage_hex"])
    assert submission_preimage("another-chain", *args) != bytes.fromhex(s["preimage_hex"])


def test_bindings(vectors):
    """A plain payload stamped with its binding is the same bytes in Go and Python (safetensors.md §6)."""
    from tenzro_trainer.binding import BindingError, bind

    assert vectors["bindings"]
    for v in vectors["bindings"]:
        plain, want = bytes.fromhex(v["plain_hex"]), bytes.fromhex(v["bound_hex"])
        got = bind(plain, v["trainer"], v["task_id"], v["round"], v["fragment"])
        assert got.hex() == want.hex()
        assert content_hash(got).hex() == v["payload_hash"]
        assert bind(got, v["trainer"], v["task_id"], v["round"], v["fragment"]) == got  # already bound: unchanged
        with pytest.raises(BindingError, match="another trainer's or another round's"):
            bind(got, v["trainer"], v["task_id"], v["round"] + 1, v["fragment"])  # a replay in a later round
        assert st_load(got)  # the safetensors library reads it


def test_attest_report_data(vectors):
    """The Verified-tier binding names the payload the evidence goes with (PROTOCOL §11)."""
    assert vectors["attest_report_data"]
    for v in vectors["attest_report_data"]:
        assert v["domain"] == "tenzro/train/attest/v2"
        c = Canon(v["domain"]).hash(parse_hash(v["program_hash"])).u64(v["shard"]).hash(parse_hash(v["model_hash"]))
        c = c.str(v["trainer_did"]).bytes(bytes.fromhex(v["nonce_hex"])).hash(parse_hash(v["payload_hash"]))
        assert c.sum().hex() == v["report_data"]


def test_evidence_digests(vectors):
    """The digest an enrolment signs (PROTOCOL §3) is the same in Go and Python, and the enrolment vector with
    evidence signs it."""
    from tenzro_trainer.canon import evidence_digest

    assert vectors["evidence_digests"]
    for v in vectors["evidence_digests"]:
        assert evidence_digest(json.loads(v["claim"])).hex() == v["digest"]
    assert evidence_digest(None) == bytes(32)
    enrol = [r for r in vectors["requests"] if r["method"] == "tenzro_training_enrollTrainer"]
    assert [f["hash"] for r in enrol for f in r["fields"] if "hash" in f] == [
        "00" * 32,
        vectors["evidence_digests"][0]["digest"],
    ]


def test_dataset_requests(vectors):
    """The trainer's Tenzro-Dataset-Request header is the Go CLI's (dataset.SignRequestAt), byte for byte."""
    from tenzro_trainer.canon import dataset_request_preimage
    from tenzro_trainer.rpc import dataset_request

    assert len(vectors["dataset_requests"]) >= 3
    for v in vectors["dataset_requests"]:
        key = Key.from_seed(v["kind"], bytes.fromhex(v["seed"]))
        assert key.did == v["did"]
        pre = dataset_request_preimage(v["chain_id"], v["op"], v["cid"], v["did"], int(v["expires"]), int(v["nonce"]))
        assert pre.hex() == v["preimage_hex"], v["op"]
        assert key.sign(pre).hex() == v["signature_hex"], v["op"]
        hdr = dataset_request(key, v["chain_id"], v["op"], v["cid"], int(v["expires"]), int(v["nonce"]))
        assert hdr == v["header"], v["op"]
    k = Key.from_seed("machine", bytes(32))
    for op, cid, exp, nonce in [("pin", "bafk", 1, 1), ("fetch", "ipfs://x", 1, 1), ("fetch", "", 1, 1),
                                ("fetch", "bafk", -1, 1), ("fetch", "bafk", 1, 1 << 64)]:  # fmt: skip
        with pytest.raises(ValueError):
            dataset_request(k, "c", op, cid, exp, nonce)
