"""JSON-RPC 2.0 client for a Tenzro Train node (method names and fields: wire/api.go)."""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests

from .binding import bind
from .canon import (
    ZERO_HASH,
    blob_intent_preimage,
    content_hash,
    dataset_request_preimage,
    evidence_digest,
    method_fields,
    request_preimage,
    submission_preimage,
)
from .identity import Key

MAX_RESPONSE = 512 << 20  # a getWeights answer carries a whole fragment


class NodeUnavailable(Exception):
    """The node could not be reached or answered with a transport-level failure (retry later)."""


class RpcError(Exception):
    """The node refused a call with a JSON-RPC error object (a precise refusal: it changed nothing)."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data

    def mentions(self, *words: str) -> bool:
        m = self.message.lower()
        return any(w in m for w in words)


class NoBlobEndpoint(Exception):
    """The node does not serve ``PUT /blobs/<hash>`` (HTTP 404/405: an older node, or one without a blob
    store): send payloads inline (base64) in the JSON-RPC request instead."""


class UploadNotFunded(NoBlobEndpoint):
    """The node does not fund uploads from this key (HTTP 402: no balance covering its price per byte and no
    enrolment in the run the intent names): send this payload inline instead."""


BLOB_INTENT_HEADER = "Tenzro-Blob-Intent"
INTENT_LIFETIME_S = 600  # the node accepts intents expiring up to 15 minutes ahead
DATASET_REQUEST_HEADER = "Tenzro-Dataset-Request"
DATASET_OPS = ("import", "fetch", "remove")


def dataset_request(key: Key, chain_id: str, op: str, cid: str, expires: int, nonce: int) -> str:
    """The ``Tenzro-Dataset-Request`` header value (docs/protocol/datasets.md §Requests; the Go CLI's
    ``dataset.SignRequestAt``, byte for byte: wire/testdata/vectors.json ``dataset_requests``):
    ``v1 <did> <op> <cid> <expires> <nonce> <signature hex>``."""
    if op not in DATASET_OPS:
        raise ValueError(f"dataset request op {op!r}: want one of {', '.join(DATASET_OPS)}")
    if not cid or not cid.isalnum() or not cid.isascii() or len(cid) > 128:
        raise ValueError(f"dataset request cid {cid[:140]!r}: want 1..128 letters and digits")
    for name, n in (("expires", expires), ("nonce", nonce)):
        if not 0 <= n < 1 << 64:
            raise ValueError(f"dataset request {name} {n}: want an unsigned 64-bit integer")
    sig = key.sign(dataset_request_preimage(chain_id, op, cid, key.did, expires, nonce))
    return f"v1 {key.did} {op} {cid} {expires} {nonce} {sig.hex()}"


class _Nonces:
    """Unix-nanosecond nonces, strictly increasing per process (PROTOCOL §3)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return self._last


NONCES = _Nonces()


class Client:
    def __init__(self, url: str, timeout: float = 60.0) -> None:
        self.url = url
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._session = requests.Session()
        self.bytes_sent = 0
        # None: not tried yet; False: the node answered PUT /blobs with 404/405 (payloads go inline).
        self.blob_uploads: bool | None = None
        self._chain_id: str | None = None

    def dataset_request(self, key: Key, op: str, cid: str) -> str:
        """A ``Tenzro-Dataset-Request`` by ``key`` for ``op`` on ``cid`` for this node's chain, valid for
        INTENT_LIFETIME_S, with a random nonce (the node refuses a (did, nonce) it saw before)."""
        import secrets

        return dataset_request(
            key, self.chain_id(), op, cid, int(time.time()) + INTENT_LIFETIME_S, secrets.randbits(64)
        )

    def dataset_signer(self, key: Key) -> Callable[[str, str], str]:
        """``data.Sources.sign`` for ``key`` on this node: each fetch gets a fresh request (own nonce)."""
        return lambda op, cid: self.dataset_request(key, op, cid)

    def blob_intent(self, key: Key, h: bytes, size: int, task: str = "") -> str:
        """The ``Tenzro-Blob-Intent`` header value: ``v1 <did> <size> <expires> <task or -> <signature hex>``."""
        expires = int(time.time()) + INTENT_LIFETIME_S
        sig = key.sign(blob_intent_preimage(self.chain_id(), h, size, key.did, expires, task))
        return f"v1 {key.did} {size} {expires} {task or '-'} {sig.hex()}"

    def blob_url(self, h: bytes) -> str:
        """``<endpoint path>/blobs/<64 hex>`` on the node's RPC port."""
        u = urlsplit(self.url)
        return urlunsplit((u.scheme, u.netloc, u.path.rstrip("/") + "/blobs/" + h.hex(), "", ""))

    def put_blob(self, data: bytes, h: bytes | None = None, key: Key | None = None, task: str = "") -> dict:
        """Upload ``data`` raw with ``PUT /blobs/<content hash>``: the node hashes it as it arrives and keeps it
        only if it matches. ``key`` signs the upload intent (for the run ``task``), which nodes that price uploads
        require. Returns ``{"hash", "size", "created"}``; raises NoBlobEndpoint against a node without the
        endpoint, UploadNotFunded when the node does not fund uploads from ``key`` (402), and RpcError for a
        refusal (413 too large, 422 hash mismatch, 401 bad intent)."""
        h = h if h is not None else content_hash(data)
        op = f"PUT /blobs/{h.hex()}"
        headers = {"Content-Type": "application/octet-stream"}
        if key is not None:
            headers[BLOB_INTENT_HEADER] = self.blob_intent(key, h, len(data), task)
        try:
            r = self._session.put(self.blob_url(h), data=data, headers=headers, timeout=self.timeout)
        except requests.RequestException as e:
            raise NodeUnavailable(f"{op}: {e}") from e
        self.bytes_sent += len(data)
        if r.status_code in (404, 405):
            try:
                msg = r.json().get("error", {}).get("message", "")
            except ValueError:
                msg = ""
            if r.status_code == 405 or not msg or "no blob store" in msg:
                raise NoBlobEndpoint(f"{op}: HTTP {r.status_code} {msg}".strip())
        if r.status_code == 402:
            raise UploadNotFunded(f"{op}: HTTP 402 {r.text[:300]}")
        if r.status_code in (200, 201):
            res = r.json()
            if res.get("hash") != h.hex() or res.get("size") != len(data):
                raise NodeUnavailable(f"{op}: node stored {res!r}")
            return res
        if r.status_code >= 500:
            raise NodeUnavailable(f"{op}: HTTP {r.status_code}")
        try:
            err = r.json()["error"]
        except (ValueError, KeyError, TypeError) as e:
            raise NodeUnavailable(f"{op}: HTTP {r.status_code}, body is not a JSON error") from e
        raise RpcError(op, int(err.get("code", 0)), str(err.get("message", "")), err.get("data"))

    def _by_reference(self, data: bytes, h: bytes, key: Key, task: str = "") -> bool:
        """Upload ``data`` for a by-reference request (intent signed by ``key`` for ``task``); False when the node
        takes it inline only (no /blobs endpoint, or uploads from ``key`` not funded)."""
        if self.blob_uploads is False:
            return False
        try:
            self.put_blob(data, h, key, task)
        except UploadNotFunded:
            return False
        except NoBlobEndpoint:
            self.blob_uploads = False
            return False
        self.blob_uploads = True
        return True

    def call(self, method: str, params: Any = None) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            body["params"] = params
        data = json.dumps(body).encode()
        try:
            r = self._session.post(
                self.url, data=data, headers={"Content-Type": "application/json"}, timeout=self.timeout
            )
        except requests.RequestException as e:
            raise NodeUnavailable(f"{method}: {e}") from e
        self.bytes_sent += len(data)
        if r.status_code >= 500 or r.status_code in (404, 502, 503):
            raise NodeUnavailable(f"{method}: HTTP {r.status_code}")
        if len(r.content) > MAX_RESPONSE:
            raise NodeUnavailable(f"{method}: response of {len(r.content)} bytes exceeds {MAX_RESPONSE}")
        try:
            msg = r.json()
        except ValueError as e:
            raise NodeUnavailable(f"{method}: HTTP {r.status_code}, body is not JSON") from e
        if not isinstance(msg, dict):
            raise NodeUnavailable(f"{method}: answer is not a JSON-RPC object")
        if msg.get("error") is not None:
            err = msg["error"]
            raise RpcError(method, int(err.get("code", 0)), str(err.get("message", "")), err.get("data"))
        return msg.get("result")

    # --- reads -----------------------------------------------------------------------------
    def node_info(self) -> dict:
        return self.call("tenzro_node_info")

    def chain_id(self) -> str:
        """The chain this node follows, which every request and submission is signed for (asked once)."""
        if self._chain_id is None:
            cid = self.node_info().get("chain_id")
            if not isinstance(cid, str) or not cid:
                raise RpcError("tenzro_node_info", 0, "the node did not say which chain it follows (no chain_id)")
            self._chain_id = cid
        return self._chain_id

    def get_run(self, task_id: str) -> dict:
        return self.call("tenzro_training_getRun", {"task_id": task_id})

    def list_runs(self, status: str = "") -> list:
        return self.call("tenzro_training_listRuns", {"status": status} if status else {})

    def get_weights(self, task_id: str, fragment: int) -> dict:
        """Returns the answer with ``payload`` decoded to bytes and checked against ``weights_hash``
        (the content hash, BLAKE3-256, of the payload bytes)."""
        w = self.call("tenzro_training_getWeights", {"task_id": task_id, "fragment_index": fragment})
        w["payload"] = base64.b64decode(w["payload"])
        wh = w.get("weights_hash")
        if wh and content_hash(w["payload"]).hex() != wh:
            raise RpcError("tenzro_training_getWeights", 0, f"weights_hash {wh} does not match the payload")
        return w

    def get_receipt(self, task_id: str) -> dict:
        return self.call("tenzro_training_getReceipt", {"task_id": task_id})

    def get_balance(self, did: str) -> dict:
        return self.call("tenzro_ledger_getBalance", {"did": did})

    # --- writes ----------------------------------------------------------------------------
    def faucet(self, did: str, amount: int | str) -> dict:
        return self.call("tenzro_ledger_faucet", {"did": did, "amount": str(amount)})

    def enroll(self, key: Key, task_id: str, stake: int | str, attestation: dict | None = None) -> dict:
        nonce = NONCES.next()
        cid = self.chain_id()
        fields = method_fields().str(task_id).str(str(stake)).hash(evidence_digest(attestation))
        pre = request_preimage(cid, "tenzro_training_enrollTrainer", key.did, nonce, fields)
        return self.call(
            "tenzro_training_enrollTrainer",
            {
                "task_id": task_id,
                "trainer_did": key.did,
                "stake": str(stake),
                "chain_id": cid,
                "nonce": nonce,
                "signature": key.sign(pre).hex(),
                **({"attestation": attestation} if attestation is not None else {}),
            },
        )

    def leave(self, key: Key, task_id: str) -> dict:
        nonce = NONCES.next()
        cid = self.chain_id()
        pre = request_preimage(cid, "tenzro_training_leaveRun", key.did, nonce, method_fields().str(task_id))
        return self.call(
            "tenzro_training_leaveRun",
            {
                "task_id": task_id,
                "trainer_did": key.did,
                "chain_id": cid,
                "nonce": nonce,
                "signature": key.sign(pre).hex(),
            },
        )

    def post_task(
        self,
        key: Key,
        spec_canonical: bytes,
        spec_hash: bytes,
        init_weights: bytes | None,
        dataset_key: bytes | None = None,
        score_corpus: bytes | None = None,
    ) -> dict:
        """``spec_canonical`` must already be RFC 8785 JSON and ``spec_hash`` its spec hash. ``dataset_key`` is a
        Confidential sponsor's own 32-byte dataset key (the broker makes one when it is absent). ``score_corpus``
        is a scored spec's CSV corpus (its content hash is the spec's ``scoring.corpus``), sent before the
        posting (docs/protocol/scoring.md §6.4)."""
        nonce = NONCES.next()
        wh = content_hash(init_weights) if init_weights else ZERO_HASH
        cid = self.chain_id()
        pre = request_preimage(
            cid, "tenzro_training_postTask", key.did, nonce, method_fields().hash(spec_hash).hash(wh)
        )
        params: dict[str, Any] = {
            "spec": json.loads(spec_canonical),
            "chain_id": cid,
            "nonce": nonce,
            "signature": key.sign(pre).hex(),
        }
        if init_weights:
            # Raw with PUT /blobs first, then named by hash; inline (base64) against an older node.
            if self._by_reference(init_weights, wh, key):
                params["init_weights_hash"] = wh.hex()
            else:
                params["init_weights"] = base64.b64encode(init_weights).decode()
        if dataset_key is not None:
            params["dataset_key"] = base64.b64encode(dataset_key).decode()
        if score_corpus and not self._by_reference(score_corpus, content_hash(score_corpus), key):
            params["score_corpus"] = base64.b64encode(score_corpus).decode()
        return self.call("tenzro_training_postTask", params)

    def submit(
        self,
        key: Key,
        task_id: str,
        round_: int,
        fragment: int,
        payload: bytes,
        attestation: dict | None = None,
        metrics: dict[str, float] | None = None,
    ) -> dict:
        """Submit one outer gradient (uploaded first with ``PUT /blobs``, then referenced by hash; inline base64
        against a node without that endpoint); attestation is the claim of Verified/Confidential tiers; metrics
        (train_loss, eval_loss, samples, step_time_ms, ...) are signed with it and plotted by the node's
        dashboard."""
        # The payload names its trainer, task, round and fragment (docs/protocol/safetensors.md §6); one without
        # is stamped here, one bound to anything else is refused (as ``tenzro train submit-gradient`` does).
        payload = bind(payload, key.did, task_id, round_, fragment)
        ph = content_hash(payload)
        metrics = {k: float(v) for k, v in (metrics or {}).items()}
        cid = self.chain_id()
        sig = key.sign(submission_preimage(cid, task_id, key.did, round_, fragment, ph, metrics))
        params = {
            "chain_id": cid,
            "task_id": task_id,
            "trainer_did": key.did,
            "round": round_,
            "fragment_index": fragment,
            "payload_hash": ph.hex(),
            "signature": sig.hex(),
        }
        # The payload goes raw with PUT /blobs/<payload_hash> and the submission names it by hash (the signed
        # preimage is the same); against a node without /blobs it goes inline, base64, as in the seed's form.
        if not self._by_reference(payload, ph, key, task_id):
            params["gradient_payload"] = base64.b64encode(payload).decode()
        if attestation is not None:
            params["attestation"] = attestation
        if metrics:
            params["metrics"] = metrics
        return self.call("tenzro_training_submitOuterGradient", params)

    def finalize_round(self, key: Key, task_id: str, round_: int) -> dict:
        """Signed by the run's elected syncer (``key``); the node commits only what the round's rules allow
        now and never closes a grace window early (PROTOCOL §3, §6)."""
        nonce = NONCES.next()
        cid = self.chain_id()
        pre = request_preimage(
            cid, "tenzro_training_finalizeRound", key.did, nonce, method_fields().str(task_id).u64(round_)
        )
        return self.call(
            "tenzro_training_finalizeRound",
            {
                "task_id": task_id,
                "syncer_did": key.did,
                "round": round_,
                "chain_id": cid,
                "nonce": nonce,
                "signature": key.sign(pre).hex(),
            },
        )
