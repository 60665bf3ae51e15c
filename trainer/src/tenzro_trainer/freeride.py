"""BENCHMARKS ONLY: free riders for ``bench/freeriders.py`` (issue 23's table). Nothing here is used unless a
trainer config carries ``attack:``; an honest trainer never imports it.

Each kind is what a dishonest trainer could do through an ordinary node with ordinary requests:

==============  =====================================================================================
kind            what the trainer submits for each fragment of each round
==============  =====================================================================================
zeros           an all-zeros outer gradient (no training)
noise_norm      trains honestly, then sends Gaussian noise scaled to its own per-tensor L2 norms
copy            another trainer's (``victim``) tensors, byte for byte, re-encoded with its own binding,
                fetched with ``GET /blobs/<hash>`` once the victim's record is in a block (no training)
copy_hash       signs the victim's ``payload_hash`` and uploads nothing (the node reads the victim's blob)
copy_scaled     the victim's tensors × ``scale`` (default 1.0001), re-bound
copy_noise      the victim's tensors + ``sigma``·rms Gaussian noise per tensor (default 1e-4), re-bound
replay          its own first round's outer gradients, re-bound to each later round (trains only once)
cycle3          trains in its first three rounds, then cycles through those rounds' outer gradients (its k-th
                free round sends its (k mod 3)-th trained round's), re-bound: beyond the stale rule's r−1, r−2
wrong_data      trains on Gaussian windows instead of its assigned shard
sign_flip       honest × −``scale`` (robustness benchmark, bench/byzantine.py)
gaussian        pure noise of std ``sigma`` (robustness benchmark, bench/byzantine.py)
==============  =====================================================================================

The victim's record is found the way anyone can: the chain's blocks (the node's CometBFT RPC, named in
``tenzro_node_info``) carry every submission record with its trainer, round, fragment and payload hash.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import requests
import torch
from safetensors.torch import save as st_save

from . import weights
from .binding import canonical_safetensors, header
from .canon import submission_preimage
from .identity import Key
from .rpc import Client, NodeUnavailable

# kind -> (needs a victim, trains every round)
KINDS: dict[str, tuple[bool, bool]] = {
    "zeros": (False, False),
    "noise_norm": (False, True),
    "copy": (True, False),
    "copy_hash": (True, False),
    "copy_scaled": (True, False),
    "copy_noise": (True, False),
    "replay": (False, False),  # trains in its first round only
    "cycle3": (False, False),  # trains in its first CYCLE rounds only
    "wrong_data": (False, True),
    "sign_flip": (False, True),
    "gaussian": (False, True),
}
COPIES = ("copy", "copy_hash", "copy_scaled", "copy_noise")
CYCLE = 3  # cycle3's stored gradients
MAX_BLOB = 1 << 30


class FreeRideError(RuntimeError):
    pass


def check(attack: Any) -> str | None:
    """None when ``attack`` is a valid attack config, else what is wrong with it."""
    if not isinstance(attack, dict):
        return "attack must be a mapping"
    kind = attack.get("kind")
    if kind not in KINDS:
        return f"attack.kind must be one of {', '.join(KINDS)}"
    unknown = set(attack) - {"kind", "victim", "scale", "sigma", "wait_s"}
    if unknown:
        return f"attack: unknown keys {sorted(unknown)}"
    if KINDS[kind][0] and not (isinstance(attack.get("victim"), str) and attack["victim"].startswith("did:")):
        return f"attack.kind {kind} needs victim: <the copied trainer's DID>"
    for k in ("scale", "sigma", "wait_s"):
        if k in attack and (not isinstance(attack[k], int | float) or not math.isfinite(attack[k])):
            return f"attack.{k} must be a finite number"
    return None


def trains(attack: dict, first_round: bool, stored: int = 0) -> bool:
    """Whether this free rider runs the inner loop this round (``stored``: cycle3's rounds stored so far)."""
    kind = attack["kind"]
    return KINDS[kind][1] or (kind == "replay" and first_round) or (kind == "cycle3" and stored < CYCLE)


# ---------------------------------------------------------------------------------------------- payloads


def _tensors(payload: bytes, layout: list[dict]) -> dict[str, torch.Tensor]:
    return weights.load_fragment(payload, layout, "outer gradient")


def _save(tensors: dict[str, torch.Tensor], layout: list[dict]) -> bytes:
    return st_save({t["name"]: tensors[t["name"]].to(weights.torch_dtype(t["dtype"])).contiguous() for t in layout})


def zeros(layout: list[dict]) -> bytes:
    return _save({t["name"]: torch.zeros(t["shape"]) for t in layout}, layout)


def noise_like(payload: bytes, layout: list[dict], rng: np.random.Generator) -> bytes:
    """Gaussian noise with each tensor's L2 norm (a zero tensor stays zero)."""
    out = {}
    for name, g in _tensors(payload, layout).items():
        g = g.float()
        z = torch.from_numpy(rng.standard_normal(g.numel()).astype(np.float32)).view_as(g)
        zn = float(z.norm())
        out[name] = z * (float(g.norm()) / zn) if zn > 0 else torch.zeros_like(g)
    return _save(out, layout)


def unbind(payload: bytes) -> bytes:
    """The payload's tensors, byte for byte, in the canonical form without metadata (what the client then binds
    to the free rider: only the header changes)."""
    h = header(payload)
    n = int.from_bytes(payload[:8], "little")
    data = payload[8 + n :]
    h.pop("__metadata__", None)
    entries = []
    for name, e in h.items():
        b, end = e["data_offsets"]
        entries.append((name, e["dtype"], list(e["shape"]), data[b:end]))
    return canonical_safetensors(entries, None)


def perturb(payload: bytes, layout: list[dict], attack: dict, rng: np.random.Generator) -> bytes:
    """A near copy: ``copy_scaled`` multiplies by ``scale``; ``copy_noise`` adds ``sigma``·rms Gaussian noise."""
    out = {}
    for name, g in _tensors(payload, layout).items():
        g = g.float()
        if attack["kind"] == "copy_scaled":
            out[name] = g * float(attack.get("scale", 1.0001))
        else:
            rms = float(g.pow(2).mean().sqrt()) if g.numel() else 0.0
            z = torch.from_numpy(rng.standard_normal(g.numel()).astype(np.float32)).view_as(g)
            out[name] = g + z * (float(attack.get("sigma", 1e-4)) * rms)
    return _save(out, layout)


def transform(payload: bytes, layout: list[dict], attack: dict, rng: np.random.Generator) -> bytes:
    """The trained-then-altered kinds: what is sent instead of the honest outer gradient ``payload``."""
    kind = attack["kind"]
    if kind == "noise_norm":
        return noise_like(payload, layout, rng)
    if kind == "sign_flip":
        t = _tensors(payload, layout)
        return _save({n: -float(attack.get("scale", 10.0)) * g.float() for n, g in t.items()}, layout)
    if kind == "gaussian":
        sigma = float(attack.get("sigma", 1.0))
        out = {}
        for t in layout:
            n = math.prod(t["shape"])
            out[t["name"]] = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).view(t["shape"]) * sigma
        return _save(out, layout)
    return payload  # wrong_data, replay, cycle3: the payload is what training produced


def gaussian_batch(
    x_shape: tuple[int, ...], y_shape: tuple[int, ...], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``wrong_data``: windows of standard Gaussian noise shaped like the real batch (contexts, horizons)."""
    return rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(y_shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------- the victim


class Records:
    """Submission records in the chain's blocks, read from the node's CometBFT RPC (``/block?height=h``)."""

    def __init__(self, comet: str, timeout: float = 10.0) -> None:
        self.comet = comet if "://" in comet else "http://" + comet.removeprefix("tcp://")
        self.timeout = timeout
        self.next_height = 1
        self.seen: dict[tuple[str, str, int, int], str] = {}  # (task, did, round, fragment) -> payload hash hex
        self._s = requests.Session()

    @classmethod
    def of_node(cls, client: Client) -> Records:
        info = client.node_info()
        addr = (info.get("chain") or {}).get("rpc_addr")
        if not addr:
            raise FreeRideError("the node names no CometBFT RPC address (tenzro_node_info.chain.rpc_addr)")
        return cls(addr)

    def _get(self, path: str) -> dict:
        try:
            r = self._s.get(self.comet + path, timeout=self.timeout)
            r.raise_for_status()
            return r.json()["result"]
        except (requests.RequestException, ValueError, KeyError) as e:
            raise NodeUnavailable(f"CometBFT {path}: {e}") from e

    def poll(self) -> None:
        """Reads every block not read yet."""
        top = int(self._get("/status")["sync_info"]["latest_block_height"])
        self.next_height = max(self.next_height, top - 200)  # a late joiner reads the recent blocks only
        while self.next_height <= top:
            blk = self._get(f"/block?height={self.next_height}")
            for tx in (blk.get("block") or {}).get("data", {}).get("txs") or []:
                self._record(base64.b64decode(tx))
            self.next_height += 1

    def _record(self, raw: bytes) -> None:
        try:
            env = json.loads(raw)
        except ValueError:
            return
        if not isinstance(env, dict) or env.get("type") != "tenzro_training_submitOuterGradient":
            return
        p = env.get("params") or {}
        try:
            k = (str(p["task_id"]), str(p["trainer_did"]), int(p["round"]), int(p["fragment_index"]))
            self.seen.setdefault(k, str(p["payload_hash"]))
        except (KeyError, TypeError, ValueError):
            return

    def wait(self, task: str, did: str, round_: int, fragment: int, still_open: Callable[[], bool],
             timeout: float, stop: Callable[[], bool] = lambda: False) -> str | None:  # fmt: skip
        """The payload hash of ``did``'s record for (task, round, fragment) once it is in a block; None when the
        round moves on, ``stop`` says so, or ``timeout`` passes first."""
        end = time.monotonic() + timeout
        k = (task, did, round_, fragment)
        while time.monotonic() < end and not stop():
            with contextlib.suppress(NodeUnavailable):
                self.poll()
            if k in self.seen:
                return self.seen[k]
            if not still_open():
                return None
            time.sleep(0.2)
        return None


def fetch_blob(client: Client, payload_hash: str) -> bytes:
    """``GET /blobs/<hash>`` from the node, checked against the hash."""
    from .canon import content_hash

    h = bytes.fromhex(payload_hash)
    try:
        r = requests.get(client.blob_url(h), timeout=client.timeout, stream=True)
        data = r.raw.read(MAX_BLOB + 1, decode_content=True)
    except requests.RequestException as e:
        raise NodeUnavailable(f"GET /blobs/{payload_hash}: {e}") from e
    if r.status_code != 200:
        raise FreeRideError(f"GET /blobs/{payload_hash}: HTTP {r.status_code}")
    if len(data) > MAX_BLOB or content_hash(data) != h:
        raise FreeRideError(f"GET /blobs/{payload_hash}: the node sent other bytes")
    return data


def submit_by_hash(client: Client, key: Key, task: str, round_: int, fragment: int, payload_hash: str) -> dict:
    """``copy_hash``: a submission that names someone else's payload hash and uploads nothing."""
    cid = client.chain_id()
    h = bytes.fromhex(payload_hash)
    sig = key.sign(submission_preimage(cid, task, key.did, round_, fragment, h, None))
    params = {"chain_id": cid, "task_id": task, "trainer_did": key.did, "round": round_, "fragment_index": fragment,
              "payload_hash": payload_hash, "signature": sig.hex()}  # fmt: skip
    return client.call("tenzro_training_submitOuterGradient", params)


__all__ = [
    "COPIES",
    "KINDS",
    "FreeRideError",
    "Records",
    "check",
    "fetch_blob",
    "gaussian_batch",
    "noise_like",
    "perturb",
    "submit_by_hash",
    "trains",
    "transform",
    "unbind",
    "zeros",
]
