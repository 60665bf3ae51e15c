"""Sponsor-side helpers used by the demo, benchmarks and tests: build a task spec, canonicalize it,
and post it with initial weights. (The Go CLI ``tenzro train post-task`` does the same.)"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from .canon import DOMAIN_SPEC, Canon
from .identity import Key
from .rpc import Client


def canonical_json(v: Any) -> bytes:
    """RFC 8785 (JCS) for the values a task spec holds: objects with string keys, strings, bools,
    null, integers of magnitude ≤ 2^53 and finite floats in [1e-6, 1e21) (whose ES6 rendering is
    Python's shortest repr). Anything else is refused rather than encoded differently from Go."""

    def enc(x: Any) -> str:
        if x is None or isinstance(x, bool):
            return json.dumps(x)
        if isinstance(x, int):
            if abs(x) > 2**53:
                raise ValueError(f"integer {x} is beyond 2^53: write it as a string")
            return str(x)
        if isinstance(x, float):
            if not math.isfinite(x):
                raise ValueError("non-finite number")
            if x == int(x) and abs(x) <= 2**53:
                return str(int(x))
            if not 1e-6 <= abs(x) < 1e21:
                raise ValueError(f"float {x!r}: exponent notation is not supported here")
            return repr(x)
        if isinstance(x, str):
            return json.dumps(x, ensure_ascii=False)
        if isinstance(x, list | tuple):
            return "[" + ",".join(enc(i) for i in x) + "]"
        if isinstance(x, dict):
            items = sorted(x.items(), key=lambda kv: kv[0].encode("utf-16-be"))
            return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + enc(val) for k, val in items) + "}"
        raise ValueError(f"cannot encode {type(x).__name__}")

    return enc(v).encode("utf-8")


def spec_hash(canonical: bytes) -> bytes:
    """SHA-256(Str("tenzro/train/spec/v1") ‖ Bytes(canonical spec JSON)) — wire.SpecHash."""
    return Canon(DOMAIN_SPEC).bytes(canonical).sum()


def make_spec(
    task_id: str,
    sponsor: Key,
    *,
    family: str = "timesfm",
    metadata: dict | None = None,
    param_count: int = 0,
    fragments: int = 4,
    trainers: int = 8,
    quorum: int = 6,
    inner_steps: int = 24,
    max_rounds: int = 10,
    aggregation: str = "Mean",
    aggregation_params: dict | None = None,
    dataset_ref: str = "statsmodels://co2,sunspots,elnino,nile,macrodata",
    dataset_hash: str = "",
    reward_pool: str = "1000000000000000000",  # 1 TNZO: the default min_reward_pool
    grace_window_ms: int = 2000,
    round_deadline_ms: int = 0,
    dtype: str = "f32",
    **extra: Any,
) -> dict:
    spec: dict[str, Any] = {
        "task_id": task_id,
        "sponsor_did": sponsor.did,
        "sponsor_address": "0x0",
        "architecture": {
            "family": family,
            "param_count": param_count,
            "modality": "Timeseries",
            "fragment_count": fragments,
            "dtype": dtype,
            "metadata": metadata or {},
        },
        "tier": "Open",
        "aggregation": aggregation,
        "trainer_count": trainers,
        "quorum": quorum,
        "inner_steps": inner_steps,
        "max_rounds": max_rounds,
        "grace_window_ms": grace_window_ms,
        "reward_pool": reward_pool,
        "dataset_ref": dataset_ref,
        "dataset_hash": dataset_hash,
        "min_throughput": None,
        "created_at": int(time.time()),
    }
    if aggregation_params is not None:
        spec["aggregation_params"] = aggregation_params
    if round_deadline_ms:
        spec["round_deadline_ms"] = round_deadline_ms
    spec.update(extra)
    return spec


def param_count_of(safetensors_bytes: bytes) -> int:
    """The element count of a safetensors file, from its header alone."""
    import json
    import struct

    (n,) = struct.unpack("<Q", safetensors_bytes[:8])
    hdr = json.loads(safetensors_bytes[8 : 8 + n])
    total = 0
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        c = 1
        for d in v["shape"]:
            c *= int(d)
        total += c
    return total


def post(
    client: Client,
    sponsor: Key,
    spec: dict,
    init_weights: bytes | None,
    dataset_key: bytes | None = None,
    score_corpus: bytes | None = None,
) -> dict:
    """Posts ``spec`` with ``init_weights``. A spec whose ``param_count`` is 0 (``make_spec``'s default)
    gets the weights' element count filled in: the node refuses a count that differs from the weights'."""
    arch = spec.get("architecture") or {}
    if init_weights is not None and not arch.get("param_count"):
        spec = {**spec, "architecture": {**arch, "param_count": param_count_of(init_weights)}}
    c = canonical_json(spec)
    return client.post_task(sponsor, c, spec_hash(c), init_weights, dataset_key, score_corpus)
