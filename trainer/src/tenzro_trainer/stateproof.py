"""Check a proven chain read (docs/protocol/chain.md §7) against a trusted app hash.

A node answers ``abci_query`` with ``prove=true`` with two proof operations:
``ics23:iavl`` (an ics23 CommitmentProof, protobuf, of the state key in the IAVL
state tree) and ``tenzro:apphash`` (``{height, log_size, log_root}``: the rest of the
app-hash preimage). This module checks **existence** proofs exactly as the Go checker
(``chain.VerifyStateProof``: ics23 ``IavlSpec``, then ``AppHash``); a non-existence
proof (an absent key) is refused here with a clear error, use the Go client for those.
No maintained ics23 package exists on PyPI, hence this small checker; the
cross-language vector ``chain/testdata/stateproof_vector.json`` keeps it identical.

The app hash must come from a header the caller trusts (block ``height + 1``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

PROOF_OP_IAVL = "ics23:iavl"
PROOF_OP_APPHASH = "tenzro:apphash"
DOMAIN_APP_HASH = "tenzro/train/app-hash/v1"
MAX_PROOF_BYTES = 64 << 10

# ics23 enums (proofs.proto) and IavlSpec.
_SHA256 = 1
_NO_HASH = 0
_VAR_PROTO = 1
_MIN_PREFIX = 4
_MAX_PREFIX = 12
_CHILD_SIZE = 33


class StateProofError(ValueError):
    """A proof that does not prove the answer against the app hash."""


@dataclass
class _Op:
    hash: int = 0
    prehash_key: int = 0
    prehash_value: int = 0
    length: int = 0
    prefix: bytes = b""
    suffix: bytes = b""


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    v = 0
    shift = 0
    while True:
        if i >= len(b) or shift > 63:
            raise StateProofError("ics23 proof: truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7


def _fields(b: bytes) -> list[tuple[int, int | bytes]]:
    """Protobuf fields of a message: (field number, varint or bytes)."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(b):
        tag, i = _uvarint(b, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _uvarint(b, i)
            out.append((num, v))
        elif wt == 2:
            n, i = _uvarint(b, i)
            if i + n > len(b):
                raise StateProofError("ics23 proof: truncated field")
            out.append((num, b[i : i + n]))
            i += n
        else:
            raise StateProofError(f"ics23 proof: wire type {wt}")
    return out


def _op(b: bytes, leaf: bool) -> _Op:
    op = _Op()
    for num, v in _fields(b):
        if isinstance(v, int):
            if num == 1:
                op.hash = v
            elif leaf and num == 2:
                op.prehash_key = v
            elif leaf and num == 3:
                op.prehash_value = v
            elif leaf and num == 4:
                op.length = v
        elif leaf and num == 5 or not leaf and num == 2:
            op.prefix = v
        elif not leaf and num == 3:
            op.suffix = v
    return op


def _zigzag_varints(prefix: bytes, n: int) -> tuple[list[int], int]:
    vals = []
    i = 0
    for _ in range(n):
        u, i = _uvarint(prefix, i)
        vals.append((u >> 1) ^ -(u & 1))
    return vals, len(prefix) - i


def _check_iavl_prefix(op: _Op, layer: int) -> None:
    vals, rest = _zigzag_varints(op.prefix, 3)
    if any(v < 0 for v in vals) or vals[0] < layer:
        raise StateProofError("ics23 proof: wrong value in an IAVL op prefix")
    if layer == 0 and rest != 0:
        raise StateProofError("ics23 proof: IAVL leaf prefix has extra bytes")
    if layer > 0 and (rest not in (1, 34) or op.hash != _SHA256):
        raise StateProofError("ics23 proof: invalid IAVL inner op")


def _len_prefixed(b: bytes) -> bytes:
    out = bytearray()
    n = len(b)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + b


def app_hash(height: int, state_root: bytes, log_size: int, log_root: bytes) -> bytes:
    """SHA-256(Str(domain) ‖ U64(height) ‖ Hash(state root) ‖ U64(log size) ‖ Hash(log root))."""

    def field(b: bytes) -> bytes:  # the canonical preimage's fields (PROTOCOL §3): U64 length ‖ bytes
        return len(b).to_bytes(8, "big") + b

    pre = field(DOMAIN_APP_HASH.encode()) + field(height.to_bytes(8, "big")) + field(state_root)
    pre += field(log_size.to_bytes(8, "big")) + field(log_root)
    return hashlib.sha256(pre).digest()


def verify_state_proof(ops: list[dict], key: bytes, value: bytes, height: int, trusted_app_hash: bytes) -> None:
    """Raise StateProofError unless ``ops`` prove ``key = value`` after ``height``.

    ``ops`` are CometBFT's ``proofOps.ops`` with ``key``/``data`` already decoded to
    bytes (``{"type", "key", "data"}``).
    """
    if len(ops) != 2:
        raise StateProofError(f"state proof: want 2 proof operations ({PROOF_OP_IAVL}, {PROOF_OP_APPHASH})")
    iv, ah = ops
    if iv["type"] != PROOF_OP_IAVL or ah["type"] != PROOF_OP_APPHASH:
        raise StateProofError(f"state proof: operations {iv['type']!r}, {ah['type']!r}")
    if bytes(iv["key"]) != key:
        raise StateProofError(f"state proof: proves key {bytes(iv['key'])!r}, the answer's key is {key!r}")
    if len(iv["data"]) > MAX_PROOF_BYTES or len(ah["data"]) > MAX_PROOF_BYTES:
        raise StateProofError(f"state proof: operation of more than {MAX_PROOF_BYTES} bytes")
    top = _fields(bytes(iv["data"]))
    exist = [v for n, v in top if n == 1 and isinstance(v, bytes)]
    if len(top) != 1 or len(exist) != 1:
        raise StateProofError("state proof: not an existence proof (absent keys are checked by the Go client only)")
    p_key = p_value = b""
    leaf: _Op | None = None
    path: list[_Op] = []
    for num, v in _fields(exist[0]):
        if not isinstance(v, bytes):
            continue
        if num == 1:
            p_key = v
        elif num == 2:
            p_value = v
        elif num == 3:
            leaf = _op(v, leaf=True)
        elif num == 4:
            path.append(_op(v, leaf=False))
    if p_key != key or p_value != value:
        raise StateProofError(f"state proof: the existence proof does not prove {key!r} = the answer's value")
    if leaf is None or not key or not value:
        raise StateProofError("state proof: leaf op, key and value are required")
    _check_iavl_prefix(leaf, 0)
    if (leaf.hash, leaf.prehash_key, leaf.prehash_value, leaf.length) != (_SHA256, _NO_HASH, _SHA256, _VAR_PROTO):
        raise StateProofError("state proof: leaf op is not IAVL's")
    if not leaf.prefix.startswith(b"\x00"):
        raise StateProofError("state proof: leaf prefix does not start with 00")
    h = hashlib.sha256(leaf.prefix + _len_prefixed(key) + _len_prefixed(hashlib.sha256(value).digest())).digest()
    for layer, op in enumerate(path, start=1):
        if op.hash != _SHA256:
            raise StateProofError("state proof: inner op hash is not SHA-256")
        _check_iavl_prefix(op, layer)
        if op.prefix.startswith(b"\x00") or not _MIN_PREFIX <= len(op.prefix) <= _MAX_PREFIX + _CHILD_SIZE:
            raise StateProofError(f"state proof: inner op prefix of {len(op.prefix)} bytes")
        if len(op.suffix) % _CHILD_SIZE:
            raise StateProofError("state proof: inner op suffix malformed")
        h = hashlib.sha256(op.prefix + h + op.suffix).digest()
    try:
        step = json.loads(bytes(ah["data"]))
        if set(step) != {"height", "log_size", "log_root"}:
            raise ValueError(f"members {sorted(step)}")
        s_height, log_size, log_root = int(step["height"]), int(step["log_size"]), bytes.fromhex(step["log_root"])
    except (ValueError, TypeError) as e:
        raise StateProofError(f"state proof: {PROOF_OP_APPHASH}: {e}") from e
    if s_height != height:
        raise StateProofError(f"state proof: for height {s_height}, the answer is at height {height}")
    got = app_hash(height, h, log_size, log_root)
    if got != trusted_app_hash:
        raise StateProofError(
            f"state proof: state root {h.hex()} recomputes app hash {got.hex()} at height {height}, "
            f"the header says {trusted_app_hash.hex()}"
        )
