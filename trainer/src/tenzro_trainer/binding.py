"""Outer-gradient payloads bound to their author (docs/protocol/safetensors.md §6) and the canonical safetensors
form (§3), byte for byte what Go's ``wire/safetensors`` writes. Standard library only (the RPC client uses it)."""

from __future__ import annotations

import json
import struct

MAX_HEADER = 100 << 20


class BindingError(ValueError):
    pass


# The __metadata__ keys that bind an outer-gradient payload to its author (docs/protocol/safetensors.md §6).
META_TRAINER, META_TASK, META_ROUND, META_FRAGMENT = "tenzro.trainer", "tenzro.task", "tenzro.round", "tenzro.fragment"
BINDING_KEYS = (META_TRAINER, META_TASK, META_ROUND, META_FRAGMENT)


def binding_metadata(trainer: str, task: str, round_: int, fragment: int) -> dict[str, str]:
    """The binding as a payload's ``__metadata__``: exactly the four keys, integers in shortest decimal."""
    return {META_TRAINER: trainer, META_TASK: task, META_ROUND: str(int(round_)), META_FRAGMENT: str(int(fragment))}


def _json_str(s: str) -> str:
    # RFC 8785 string form, as the Go encoder writes it: raw UTF-8, short escapes, \u00xx below U+0020.
    return json.dumps(s, ensure_ascii=False)


def canonical_safetensors(entries: list[tuple[str, str, list[int], bytes]], metadata: dict[str, str] | None) -> bytes:
    """The canonical form of docs/protocol/safetensors.md §3 (byte for byte what Go's Encode writes):
    ``__metadata__`` first with keys sorted, tensors sorted bytewise by name, compact JSON, the header padded with
    spaces to a multiple of 8, data in name order."""
    parts = []
    if metadata:
        md = ",".join(f"{_json_str(k)}:{_json_str(metadata[k])}" for k in sorted(metadata, key=lambda k: k.encode()))
        parts.append(f'"__metadata__":{{{md}}}')
    off, data = 0, []
    for name, dtype, shape, raw in sorted(entries, key=lambda e: e[0].encode()):
        shp = ",".join(str(int(d)) for d in shape)
        parts.append(
            f'{_json_str(name)}:{{"dtype":{_json_str(dtype)},"shape":[{shp}],"data_offsets":[{off},{off + len(raw)}]}}'
        )
        off += len(raw)
        data.append(raw)
    h = ("{" + ",".join(parts) + "}").encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(data)


def bind(payload: bytes, trainer: str, task: str, round_: int, fragment: int) -> bytes:
    """``payload`` bound to (trainer, task, round, fragment), as Go's ``safetensors.Bind``: a payload already bound to
    exactly this comes back unchanged; an unbound one is re-encoded canonically with the binding as its only
    metadata (other metadata is dropped); one bound to anything else raises BindingError (signing it would be a
    copy, which every node refuses)."""
    h = header(payload)
    (n,) = struct.unpack("<Q", payload[:8])
    data = payload[8 + n :]
    md = h.pop("__metadata__", None) or {}
    want = binding_metadata(trainer, task, round_, fragment)
    if any(k in md for k in BINDING_KEYS):
        if md != want:
            have = {k: md.get(k) for k in BINDING_KEYS}
            raise BindingError(f"payload is bound to {have}, not to {want}: it is another trainer's or another round's")
        return payload
    entries = []
    for name, e in h.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise BindingError(f"safetensors: entry {name!r} is not {{dtype, shape, data_offsets}}")
        b, end = e["data_offsets"]
        if not 0 <= b <= end <= len(data):
            raise BindingError(f"safetensors: {name!r} data_offsets {e['data_offsets']} outside the data")
        entries.append((name, e["dtype"], list(e["shape"]), data[b:end]))
    return canonical_safetensors(entries, want)


def header(payload: bytes) -> dict:
    if len(payload) < 8:
        raise BindingError("safetensors: shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", payload[:8])
    if n > MAX_HEADER or 8 + n > len(payload):
        raise BindingError(f"safetensors: header length {n} out of range")
    try:
        h = json.loads(payload[8 : 8 + n])
    except ValueError as e:
        raise BindingError(f"safetensors: header is not JSON: {e}") from e
    if not isinstance(h, dict):
        raise BindingError("safetensors: header is not a JSON object")
    return h
