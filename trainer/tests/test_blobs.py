"""The upload path: payloads and initial weights go raw with ``PUT /blobs/<hash>`` and the signed requests name them
by hash; against a node without that endpoint the client falls back to the seed's inline base64 form."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tenzro_trainer.binding import bind, canonical_safetensors
from tenzro_trainer.canon import blob_intent_preimage, content_hash
from tenzro_trainer.identity import Key
from tenzro_trainer.rpc import Client, RpcError, UploadNotFunded


def test_blob_intent_preimage_vector():
    # The same bytes as wire.TestBlobIntentPreimageVector in Go.
    pre = blob_intent_preimage("tenzro-dev", bytes(range(32)), 1234, "did:tenzro:human:z6Mkabc", 1764300000, "run-7")
    assert hashlib.sha256(pre).hexdigest() == "6da14de647a4a1ccc0f8fea0569a83a8253b01d892a5e8544cf9b60e63b5a468"


def test_put_blob_against_a_real_node(node):
    c = Client(node.url)
    data = b"\x01\x02" * 50_000
    h = content_hash(data)
    # Issue 22, finding 5: an upload without a signed intent, or from a key the node does not fund, is refused.
    with pytest.raises(RpcError) as e:
        c.put_blob(data)
    assert "Tenzro-Blob-Intent" in e.value.message
    key = Key.generate("machine")
    with pytest.raises(UploadNotFunded):
        c.put_blob(data, key=key)
    c.faucet(key.did, 10**21)  # 1000 TNZO: at the default price of 1 TNZO per GB, far more than this blob
    assert c.put_blob(data, key=key) == {"hash": h.hex(), "size": len(data), "created": True}
    assert c.put_blob(data, key=key)["created"] is False  # already stored: 200
    with pytest.raises(RpcError) as e:
        c.put_blob(data[1:], content_hash(b"other"), key=key)  # bytes that do not hash to the path's hash: 422
    assert "do not match the hash" in e.value.message
    with c._session.head(c.blob_url(content_hash(b"other")), timeout=30) as r:
        assert r.status_code == 404  # nothing kept
    with c._session.get(c.blob_url(h), headers={"Range": "bytes=10-19"}, timeout=30) as r:
        assert r.status_code == 206 and r.content == data[10:20]


class _OldNode(BaseHTTPRequestHandler):
    """A node that predates /blobs: PUT answers 405, JSON-RPC is recorded and accepted."""

    posts: list[dict] = []
    puts = 0

    def do_PUT(self):  # noqa: N802
        type(self).puts += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"HTTP method PUT not allowed"}}'
        self.send_response(405)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).posts.append(req)
        result = {"chain_id": "tenzro-dev"} if req["method"] == "tenzro_node_info" else {"accepted": True}
        body = json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_submit_falls_back_to_base64_against_an_older_node():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _OldNode)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = Client(f"http://127.0.0.1:{srv.server_address[1]}")
        key = Key.generate("machine")
        plain = canonical_safetensors([("w", "F32", [1], b"\x00\x00\x80\x3f")], None)
        payload = bind(plain, key.did, "t", 0, 0)  # what submit stamps and sends
        for _ in range(2):
            assert c.submit(key, "t", 0, 0, plain)["accepted"]
        assert c.blob_uploads is False
        assert _OldNode.puts == 1  # the node said no once; later submissions go inline straight away
        subs = [r for r in _OldNode.posts if r["method"] == "tenzro_training_submitOuterGradient"]
        assert len(subs) == 2
        for req in subs:
            p = req["params"]
            assert base64.b64decode(p["gradient_payload"]) == payload
            assert p["payload_hash"] == content_hash(payload).hex()
    finally:
        srv.shutdown()
