"""Canonical length-prefixed encoding (docs/PROTOCOL.md §1) and the signed preimages (§3, §4).

Each field is u64be(len(bytes)) ‖ bytes; the first field is a domain tag. Integers are a field of 8
bytes holding the big-endian value; hashes are a field of 32 raw bytes; strings are UTF-8.

Hashes (docs/PROTOCOL.md, "Hashes"): bytes of model or gradient content (payload_hash, weights_hash,
the initial weights' hash) are BLAKE3-256, ``content_hash`` here, the one place the trainer chooses;
canonical preimages (``Canon.sum``) are SHA-256, like wire.Canon.Sum in Go.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct

import blake3

DOMAIN_REQUEST = "tenzro/train/request/v2"
DOMAIN_SUBMISSION = "tenzro/train/submission/v2"
DOMAIN_SPEC = "tenzro/train/spec/v1"
DOMAIN_DATASET = "tenzro/train/dataset/v1"
DOMAIN_MODEL = "tenzro/train/model/v1"
DOMAIN_EVIDENCE = "tenzro/train/attest/evidence/v1"
DOMAIN_BLOB_INTENT = "tenzro/train/blob-intent/v1"
DOMAIN_DATASET_REQUEST = "tenzro/train/dataset-request/v1"

ZERO_HASH = bytes(32)


def content_hash(b: bytes) -> bytes:
    """BLAKE3-256 of ``b`` (wire.ContentHash): the hash of payloads, fragment weights and initial weights."""
    return blake3.blake3(b).digest()


class Canon:
    """Builds a canonical preimage; mirrors wire.Canon in Go."""

    def __init__(self, domain: str) -> None:
        self._parts: list[bytes] = []
        self.str(domain)

    def bytes(self, p: bytes) -> Canon:
        self._parts.append(struct.pack(">Q", len(p)))
        self._parts.append(bytes(p))
        return self

    def str(self, s: str) -> Canon:
        return self.bytes(s.encode("utf-8"))

    def u64(self, v: int) -> Canon:
        if not 0 <= v < 1 << 64:
            raise ValueError(f"u64 out of range: {v}")
        return self.bytes(struct.pack(">Q", v))

    def hash(self, h: bytes) -> Canon:
        if len(h) != 32:
            raise ValueError(f"hash field must be 32 bytes, got {len(h)}")
        return self.bytes(h)

    def out(self) -> bytes:
        return b"".join(self._parts)

    def sum(self) -> bytes:
        """SHA-256 of the encoding (wire.Canon.Sum): the hash of a structured preimage."""
        return hashlib.sha256(self.out()).digest()

    def sum_content(self) -> bytes:
        """BLAKE3-256 of the encoding (wire.Canon.SumContent): used by the model hash only."""
        return content_hash(self.out())


def model_hash(fragment_hashes: list[bytes]) -> bytes:
    """PROTOCOL §5 (wire.ModelHash): BLAKE3-256(Str(DOMAIN_MODEL) ‖ Hash(fragment_0) ‖ …)."""
    c = Canon(DOMAIN_MODEL)
    for h in fragment_hashes:
        c.hash(h)
    return c.sum_content()


def request_preimage(chain_id: str, method: str, signer: str, nonce: int, fields: Canon | None = None) -> bytes:
    """PROTOCOL §3: Str(domain) ‖ Str(chain_id) ‖ Str(method) ‖ Str(signer) ‖ U64(nonce) ‖ method fields.

    ``chain_id`` is the chain the request is signed for (``tenzro_node_info``'s ``chain_id``); ``fields`` is a
    Canon whose domain field is dropped (build it with ``method_fields()``).
    """
    c = Canon(DOMAIN_REQUEST).str(chain_id).str(method).str(signer).u64(nonce)
    head = c.out()
    return head + (fields.out() if fields is not None else b"")


def evidence_digest(claim: dict | None) -> bytes:
    """The evidence digest an enrolment signs (wire.ClaimEvidenceDigest, PROTOCOL §3): SHA-256 of
    Str(DOMAIN_EVIDENCE) ‖ Str(vendor) ‖ Bytes(evidence) [‖ Str(gpu vendor) ‖ Bytes(gpu report)] of the
    claim's envelope; 32 zero bytes without a claim (Open tier)."""
    if claim is None:
        return bytes(32)
    env = claim["envelope"]
    if not isinstance(env, dict) or not env.get("vendor") or not env.get("evidence"):
        raise ValueError("attestation claim: envelope needs a vendor and evidence")
    c = Canon(DOMAIN_EVIDENCE).str(env["vendor"]).bytes(base64.b64decode(env["evidence"]))
    gpu = env.get("gpu")
    if gpu is not None:
        c.str(gpu["vendor"]).bytes(base64.b64decode(gpu["report"]))
    return c.sum()


class _Fields(Canon):
    """A field list without a leading domain tag."""

    def __init__(self) -> None:
        self._parts = []


def method_fields() -> Canon:
    return _Fields()


MAX_METRICS = 16
MAX_METRIC_NAME = 32
_METRIC_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def check_metrics(metrics: dict[str, float]) -> None:
    """The node's rules for a submission's metrics map (wire.SubmissionMetrics.Validate)."""
    if len(metrics) > MAX_METRICS:
        raise ValueError(f"metrics: {len(metrics)} entries, limit {MAX_METRICS}")
    for k, v in metrics.items():
        if not 0 < len(k) <= MAX_METRIC_NAME or not set(k) <= _METRIC_NAME_CHARS:
            raise ValueError(f"metrics: name {k!r}: want [a-z0-9_]{{1,{MAX_METRIC_NAME}}}")
        if not math.isfinite(float(v)):
            raise ValueError(f"metrics: {k} is {v}, want a finite number")


def submission_preimage(
    chain_id: str,
    task_id: str,
    trainer_did: str,
    round_: int,
    fragment: int,
    payload_hash: bytes,
    metrics: dict[str, float] | None = None,
) -> bytes:
    """PROTOCOL §4: Str(domain) ‖ Str(chain_id) ‖ Str(task_id) ‖ Str(trainer_did) ‖ U64(round) ‖ U64(fragment) ‖
    Hash(payload_hash); with metrics, docs/protocol/metrics.md: Str("metrics") ‖ U64(n) ‖ per name in bytewise
    order Str(name) ‖ U64(IEEE-754 binary64 bits). No metrics: nothing more."""
    c = (
        Canon(DOMAIN_SUBMISSION)
        .str(chain_id)
        .str(task_id)
        .str(trainer_did)
        .u64(round_)
        .u64(fragment)
        .hash(payload_hash)
    )
    if metrics:
        check_metrics(metrics)
        c.str("metrics").u64(len(metrics))
        for k in sorted(metrics, key=lambda n: n.encode("utf-8")):
            c.str(k).u64(struct.unpack(">Q", struct.pack(">d", float(metrics[k])))[0])
    return c.out()


def parse_hash(s: str) -> bytes:
    """Accepts 64 hex digits with or without a ``0x``, ``sha256:`` or ``blake3:`` prefix (like wire.ParseHash)."""
    t = s.removeprefix("0x")
    t = t.removeprefix("sha256:") if t.startswith("sha256:") else t.removeprefix("blake3:")
    if len(t) != 64:
        raise ValueError(f"hash {s[:80]!r}: want 64 hex digits, got {len(t)}")
    return bytes.fromhex(t)


def blob_intent_preimage(chain_id: str, h: bytes, size: int, did: str, expires: int, task: str) -> bytes:
    """docs/protocol/blobs.md (wire.BlobIntentPreimage): Str(DOMAIN_BLOB_INTENT) ‖ Str(chain_id) ‖ Hash(blob) ‖
    U64(size) ‖ Str(did) ‖ U64(expires) ‖ Str(task)."""
    return Canon(DOMAIN_BLOB_INTENT).str(chain_id).hash(h).u64(size).str(did).u64(expires).str(task).out()


def dataset_request_preimage(chain_id: str, op: str, cid: str, did: str, expires: int, nonce: int) -> bytes:
    """docs/protocol/datasets.md §Requests (wire.DatasetRequestPreimage): Str(DOMAIN_DATASET_REQUEST) ‖
    Str(chain_id) ‖ Str(op) ‖ Str(cid) ‖ Str(did) ‖ U64(expires) ‖ U64(nonce)."""
    return Canon(DOMAIN_DATASET_REQUEST).str(chain_id).str(op).str(cid).str(did).u64(expires).u64(nonce).out()
