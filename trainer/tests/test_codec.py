"""Compressed outer gradients: the encoder, the reference decoder, error feedback, and the
cross-language vectors that plugins/codec_vectors_test.go decodes with the Wasm codecs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from tenzro_trainer.codec import Codec, CodecError, Compressor, make_vectors

VECTORS = Path(__file__).resolve().parents[2] / "plugins" / "testdata" / "codec_vectors.json"


def test_vectors_match_the_committed_file():
    """The committed payloads decode (reference decoder) to the committed bytes, and re-encoding
    the seeded inputs gives the same tensors: the Go test holds the Wasm codecs to these bytes."""
    committed = json.loads(VECTORS.read_text())["vectors"]
    fresh = make_vectors()
    assert len(committed) == len(fresh) >= 7
    for c, f in zip(committed, fresh, strict=True):
        assert (c["codec"], c["params"], c["n"], c["dtype"]) == (f["codec"], f["params"], f["n"], f["dtype"])
        a, b = st_load(bytes.fromhex(c["payload"])), st_load(bytes.fromhex(f["payload"]))
        assert a.keys() == b.keys()
        for k in a:
            assert a[k].dtype == b[k].dtype and torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)), k
        assert c["decoded"] == f["decoded"], c["codec"]


@pytest.mark.parametrize("name,params,qmax", [("int8-block", {}, 127), ("int4-block", {"block": 32}, 7)])
def test_block_codecs_round_within_half_a_step(name, params, qmax):
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(1024).astype(np.float32))
    c = Codec.from_spec({"compression": {"codec": name, **params}})
    block = int(c.params["block"])
    d = torch.from_numpy(c.decode(1024, c.encode(x)))
    step = x.reshape(-1, block).abs().amax(dim=1, keepdim=True) / qmax
    assert ((d - x).reshape(-1, block).abs() <= step * 0.5001).all()


def test_round_half_to_even():
    c = Codec("int8-block", {"block": 4})
    x = torch.tensor([127.0, 0.5, 1.5, -2.5])  # scale 1: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2
    q = c.encode(x)["q"].tolist()
    assert q == [127, 0, 2, -2]


def _payload(c: Codec, n: int) -> dict[str, torch.Tensor]:
    return c.encode(torch.from_numpy(np.random.default_rng(3).standard_normal(n).astype(np.float32)))


def test_refusals():
    c = Codec("int4-block", {"block": 64})
    t = _payload(c, 100)
    with pytest.raises(CodecError, match="has 49 values, want 50"):
        c.decode(100, {"q": t["q"][:49], "scale": t["scale"]})
    with pytest.raises(CodecError, match="NaN"):
        c.decode(100, {"q": t["q"], "scale": torch.tensor([1.0, float("nan")])})
    k = Codec("topk", {"k": 0.1, "values": 0})
    t = _payload(k, 100)
    with pytest.raises(CodecError, match="not strictly increasing"):
        k.decode(100, {"indices": t["indices"].flip(0), "values": t["values"]})
    bad = t["indices"].clone()
    bad[-1] = 100
    with pytest.raises(CodecError, match="out of range"):
        k.decode(100, {"indices": bad, "values": t["values"]})


def test_from_spec():
    assert Codec.from_spec({}) is None
    assert Codec.from_spec({"compression": {"codec": "none"}}) is None
    c = Codec.from_spec({"compression": {"codec": "topk", "k": 0.02}})
    assert c.params == {"k": 0.02, "values": 0} and c.error_feedback
    with pytest.raises(CodecError):
        Codec.from_spec({"compression": {"codec": "int3-block"}})
    with pytest.raises(CodecError):
        Codec.from_spec({"compression": {"codec": "int4-block", "blocks": 64}})


@pytest.mark.parametrize("name", ["topk", "sign1"])
def test_error_feedback_is_kept_and_survives_a_restart(name, tmp_path):
    c = Codec(name, {"k": 0.05, "values": 0} if name == "topk" else {"block": 16})
    rng = np.random.default_rng(5)
    xs = [torch.from_numpy(rng.standard_normal(200).astype(np.float32)) for _ in range(4)]
    path = str(tmp_path / "ef.safetensors")
    a = Compressor(c, path)
    sent = torch.zeros(200, dtype=torch.float64)
    for x in xs[:3]:
        p = a.encode(2, x)
        sent += torch.from_numpy(c.decode(200, st_load(p))).double()
    # Error feedback: what was sent plus what is kept equals what was computed.
    total = sum(x.double() for x in xs[:3])
    assert torch.allclose(sent + a.residual[2].double(), total, atol=1e-5)
    a.save()
    b = Compressor(c, path)  # a restarted trainer
    assert torch.equal(b.residual[2], a.residual[2])
    assert a.encode(2, xs[3]) == b.encode(2, xs[3])
    assert a.sent_bytes < a.raw_bytes


def test_int_codecs_keep_no_residual(tmp_path):
    a = Compressor(Codec("int4-block", {"block": 64}), str(tmp_path / "ef.safetensors"))
    a.encode(0, torch.ones(10))
    a.save()
    assert a.residual == {} and not (tmp_path / "ef.safetensors").exists()


def test_payload_is_plain_safetensors():
    c = Codec("sign1", {"block": 64})
    p = st_save(_payload(c, 100))
    hdr = json.loads(p[8 : 8 + int.from_bytes(p[:8], "little")])
    assert {k: (v["dtype"], v["shape"]) for k, v in hdr.items() if k != "__metadata__"} == {
        "bits": ("U8", [13]),
        "scale": ("F32", [2]),
    }
