"""The Python checker of proven reads against the Go vector (chain/testdata/stateproof_vector.json)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest

from tenzro_trainer.stateproof import StateProofError, verify_state_proof

VECTOR = Path(__file__).resolve().parents[2] / "chain" / "testdata" / "stateproof_vector.json"


def _load() -> tuple[list[dict], bytes, bytes, int, bytes]:
    v = json.loads(VECTOR.read_text())
    ops = [
        {"type": o["type"], "key": base64.b64decode(o["key"] or ""), "data": base64.b64decode(o["data"])}
        for o in v["ops"]
    ]
    return ops, base64.b64decode(v["key"]), base64.b64decode(v["value"]), v["height"], bytes.fromhex(v["app_hash"])


def test_vector_verifies() -> None:
    ops, key, value, height, app = _load()
    verify_state_proof(ops, key, value, height, app)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("flipped proof byte", "state proof"),
        ("other value", "does not prove"),
        ("other key", "proves key"),
        ("wrong header", "recomputes app hash"),
        ("other height", "for height"),
        ("forged run log", "recomputes app hash"),
        ("one op", "want 2 proof operations"),
    ],
)
def test_refused(name: str, want: str) -> None:
    ops, key, value, height, app = _load()
    ops = copy.deepcopy(ops)
    if name == "flipped proof byte":
        d = bytearray(ops[0]["data"])
        d[-3] ^= 1
        ops[0]["data"] = bytes(d)
    elif name == "other value":
        value = b"1000000"
    elif name == "other key":
        key = b"ledger/bal/issuer"
    elif name == "wrong header":
        app = bytes(32)
    elif name == "other height":
        height += 1
    elif name == "forged run log":
        step = json.loads(ops[1]["data"])
        step["log_size"] += 1
        ops[1]["data"] = json.dumps(step).encode()
    elif name == "one op":
        ops = ops[:1]
    with pytest.raises(StateProofError, match=want):
        verify_state_proof(ops, key, value, height, app)
