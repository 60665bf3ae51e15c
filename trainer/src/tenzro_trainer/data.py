"""Timeseries corpora, windowing, deterministic shards and the dataset hash.

``dataset_ref`` forms:

* ``statsmodels://co2,sunspots,elnino,nile,macrodata`` — real public series shipped inside the
  statsmodels wheel (no network): Mauna Loa weekly CO2 (gaps linearly interpolated), yearly sunspot
  numbers, monthly El Niño sea-surface temperatures (rows flattened in time order), yearly Nile flow,
  and twelve quarterly US macro series (``macrodata/<column>``).
* ``file:///path/to/corpus.csv`` — a CSV file whose header names the series, one series per column;
  empty cells are skipped (series may have different lengths).
* ``ipfs://<cid>[/path.csv]`` — the same CSV published with ``tenzro dataset add``: fetched through
  the trainer's own node (which gets it over bitswap, every block checked against its CID, and serves
  it on its IPFS path gateway), or through ``ipfs_gateway:`` (any IPFS gateway, e.g. Kubo's) when set.
* ``https://…`` — the same CSV over HTTPS.

Whatever the source, the bytes are only trusted after ``dataset_hash`` matches (``check_hash``).

The dataset hash (``dataset_hash`` in the task spec; 64 hex digits, optionally ``0x``/``sha256:``
prefixed) is SHA-256 over the canonical encoding of the parsed corpus, the same for both forms:

    Str("tenzro/train/dataset/v1") ‖ U64(number of series) ‖
        for each series in order: Str(name) ‖ Bytes(values as little-endian IEEE-754 float64)

with PROTOCOL §1's length-prefixed fields. ``tenzro-trainer dataset-hash REF`` prints it.
"""

from __future__ import annotations

import csv
import hashlib
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

import numpy as np

from .canon import DOMAIN_DATASET, Canon, parse_hash

STATSMODELS_SETS = ("co2", "sunspots", "elnino", "nile", "macrodata")
MACRO_COLUMNS = (
    "realgdp", "realcons", "realinv", "realgovt", "realdpi", "cpi",
    "m1", "tbilrate", "unemp", "pop", "infl", "realint",
)  # fmt: skip
MAX_CSV_BYTES = 256 << 20


class DatasetError(Exception):
    pass


@dataclass(frozen=True)
class Series:
    name: str
    values: np.ndarray  # float64, 1-D, finite


def _statsmodels_series(name: str) -> list[Series]:
    from statsmodels import datasets as ds

    if name == "co2":
        v = ds.co2.load_pandas().data["co2"].to_numpy(dtype=np.float64)
        idx = np.arange(len(v))
        ok = np.isfinite(v)
        v = np.interp(idx, idx[ok], v[ok])
        return [Series("co2", v)]
    if name == "sunspots":
        return [Series("sunspots", ds.sunspots.load_pandas().data["SUNACTIVITY"].to_numpy(dtype=np.float64))]
    if name == "elnino":
        d = ds.elnino.load_pandas().data.drop(columns=["YEAR"])
        return [Series("elnino", d.to_numpy(dtype=np.float64).reshape(-1))]
    if name == "nile":
        return [Series("nile", ds.nile.load_pandas().data["volume"].to_numpy(dtype=np.float64))]
    if name == "macrodata":
        d = ds.macrodata.load_pandas().data
        return [Series(f"macrodata/{c}", d[c].to_numpy(dtype=np.float64)) for c in MACRO_COLUMNS]
    raise DatasetError(f"statsmodels dataset {name!r} unknown (have {', '.join(STATSMODELS_SETS)})")


def _csv_series(path: Path) -> list[Series]:
    if path.stat().st_size > MAX_CSV_BYTES:
        raise DatasetError(f"{path}: larger than {MAX_CSV_BYTES} bytes")
    with path.open(newline="") as f:
        return csv_series(f.read(), str(path))


def csv_series(text: str, path: str = "<memory>") -> list[Series]:
    """Parses a corpus CSV held in memory (a decrypted Confidential dataset never touches the disk)."""
    if len(text) > MAX_CSV_BYTES:
        raise DatasetError(f"{path}: larger than {MAX_CSV_BYTES} bytes")
    rows = list(csv.reader(text.splitlines()))
    if not rows or not rows[0]:
        raise DatasetError(f"{path}: want a header row naming the series")
    names = [n.strip() for n in rows[0]]
    cols: list[list[float]] = [[] for _ in names]
    for ln, row in enumerate(rows[1:], start=2):
        if len(row) > len(names):
            raise DatasetError(f"{path}:{ln}: {len(row)} cells, header has {len(names)}")
        for j, cell in enumerate(row):
            if cell.strip() == "":
                continue
            try:
                x = float(cell)
            except ValueError as e:
                raise DatasetError(f"{path}:{ln}: column {names[j]!r}: {cell!r} is not a number") from e
            if not math.isfinite(x):
                raise DatasetError(f"{path}:{ln}: column {names[j]!r}: non-finite value")
            cols[j].append(x)
    return [Series(n, np.asarray(c, dtype=np.float64)) for n, c in zip(names, cols, strict=True)]


@dataclass(frozen=True)
class Sources:
    """Where ``ipfs://`` refs are read: the trainer's node (its HTTP address, the ``node_rpc`` URL),
    or an IPFS gateway (``ipfs_gateway:`` in trainer.yaml) when set."""

    node_url: str | None = None
    ipfs_gateway: str | None = None
    timeout: float = 600.0
    # Confidential tier: applied to the fetched bytes before parsing, in memory (e.g.
    # ``lambda b: decrypt_dataset(released_key, task_id, b)`` once the broker released the key).
    decrypt: Callable[[bytes], bytes] | None = None


def _download(url: str, what: str, timeout: float) -> bytes:
    import requests

    try:
        with requests.get(url, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                raise DatasetError(f"{what}: {url}: HTTP {r.status_code}: {r.text[:300]}")
            buf = bytearray()
            for chunk in r.iter_content(1 << 20):
                buf += chunk
                if len(buf) > MAX_CSV_BYTES:
                    raise DatasetError(f"{what}: larger than {MAX_CSV_BYTES} bytes")
            return bytes(buf)
    except requests.RequestException as e:
        raise DatasetError(f"{what}: {url}: {e}") from e


def fetch_ipfs(ref: str, sources: Sources | None) -> bytes:
    """The bytes of ``ipfs://<cid>[/path]``: through the node (it fetches the DAG from its peers,
    verified and pinned, then serves it on ``/ipfs/``), or through ``sources.ipfs_gateway``."""
    import requests

    u = urlparse(ref)
    cid, path = u.netloc, u.path.lstrip("/")
    if not cid or not cid.isalnum() or len(cid) > 128:
        raise DatasetError(f"dataset_ref {ref!r}: want ipfs://<cid>[/path]")
    sources = sources or Sources()
    tail = f"/ipfs/{cid}" + (f"/{quote(path)}" if path else "")
    if sources.ipfs_gateway:
        return _download(sources.ipfs_gateway.rstrip("/") + tail, f"dataset_ref {ref!r}", sources.timeout)
    if not sources.node_url:
        raise DatasetError(f"dataset_ref {ref!r}: ipfs:// needs the trainer's node or ipfs_gateway: in trainer.yaml")
    base = sources.node_url.rstrip("/")
    try:
        # The node stops fetching past what the trainer would accept (the CSV limit plus UnixFS overhead).
        limit = MAX_CSV_BYTES + MAX_CSV_BYTES // 64 + (1 << 20)
        r = requests.post(
            f"{base}/api/dataset/fetch", params={"ref": f"ipfs://{cid}", "max_bytes": limit}, timeout=sources.timeout
        )
    except requests.RequestException as e:
        raise DatasetError(f"dataset_ref {ref!r}: node {base}: {e}") from e
    if r.status_code != 200:
        try:
            msg = r.json().get("error", r.text)
        except ValueError:
            msg = r.text
        raise DatasetError(f"dataset_ref {ref!r}: the node could not fetch it: {msg[:500]}")
    return _download(base + tail, f"dataset_ref {ref!r}", sources.timeout)


def decrypt_dataset(key: bytes, task_id: str, blob: bytes) -> bytes:
    """Decrypts a Confidential dataset in memory (``enclave.EncryptDataset``'s layout); the trainer's
    ``attestation.decrypt_dataset`` with its errors as DatasetError."""
    from .attestation import DecryptError
    from .attestation import decrypt_dataset as _decrypt

    try:
        return _decrypt(key, task_id, blob)
    except DecryptError as e:
        raise DatasetError(f"encrypted dataset: {e}") from e


def fetch_bytes(ref: str, sources: Sources | None = None) -> bytes:
    """The raw bytes of an ``ipfs://`` or ``https://`` ref (a Confidential dataset's ciphertext)."""
    src = sources or Sources()
    u = urlparse(ref)
    if u.scheme == "ipfs":
        return fetch_ipfs(ref, src)
    if u.scheme == "https":
        return _download(ref, f"dataset_ref {ref!r}", src.timeout)
    raise DatasetError(f"dataset_ref {ref!r}: want ipfs:// or https://")


def corpus_from_bytes(name: str, b: bytes) -> list[Series]:
    """Parses CSV bytes (UTF-8) as ``file://`` would."""
    if len(b) > MAX_CSV_BYTES:
        raise DatasetError(f"{name}: larger than {MAX_CSV_BYTES} bytes")
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{name}: not UTF-8 CSV: {e}") from e
    return csv_series(text, name)


def load_corpus(ref: str, sources: Sources | None = None) -> list[Series]:
    u = urlparse(ref)
    if u.scheme == "statsmodels":
        names = [n for n in (u.netloc + u.path).replace("/", ",").split(",") if n]
        if not names:
            raise DatasetError(f"dataset_ref {ref!r}: name at least one of {', '.join(STATSMODELS_SETS)}")
        out: list[Series] = []
        for n in names:
            out.extend(_statsmodels_series(n))
        return out
    if u.scheme == "file":
        return _csv_series(Path(unquote(u.path)))
    src = sources or Sources()
    if u.scheme in ("ipfs", "https"):
        raw = fetch_bytes(ref, src)
        return corpus_from_bytes(ref, src.decrypt(raw) if src.decrypt else raw)
    raise DatasetError(f"dataset_ref {ref!r}: scheme must be ipfs://, https://, file:// or statsmodels://")


def corpus_hash(series: list[Series]) -> bytes:
    c = Canon(DOMAIN_DATASET).u64(len(series))
    for s in series:
        c.str(s.name).bytes(struct.pack(f"<{len(s.values)}d", *s.values.tolist()))
    return c.sum()


def check_hash(series: list[Series], expected: str) -> None:
    got = corpus_hash(series)
    try:
        want = parse_hash(expected)
    except ValueError as e:
        raise DatasetError(f"dataset_hash: {e}") from e
    if got != want:
        raise DatasetError(f"dataset hash mismatch: spec says {want.hex()}, the data hashes to {got.hex()}")


@dataclass
class Windows:
    """Normalized (context, horizon) pairs: x [N, C] and y [N, H], float32."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.x)


def _normalize(ctx: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu = ctx.mean(axis=1, keepdims=True)
    sd = ctx.std(axis=1, keepdims=True)
    sd = np.maximum(sd, 1e-3 * np.maximum(np.abs(mu), 1.0))
    return ((ctx - mu) / sd).astype(np.float32), ((tgt - mu) / sd).astype(np.float32)


def make_windows(
    series: list[Series], context_len: int, horizon: int, stride: int = 1, holdout: float = 0.2
) -> tuple[Windows, Windows]:
    """Splits every series in time: windows whose whole span lies in the first (1-holdout) of the
    series train; windows whose horizon lies wholly in the last part are held out. Each window is
    normalized by its own context mean and standard deviation."""
    w = context_len + horizon
    tr_c, tr_t, ev_c, ev_t = [], [], [], []
    for s in series:
        v = s.values
        n = len(v)
        cut = int(n * (1.0 - holdout))
        for a in range(0, cut - w + 1, stride):
            tr_c.append(v[a : a + context_len])
            tr_t.append(v[a + context_len : a + w])
        for a in range(max(0, cut - context_len), n - w + 1, stride):
            ev_c.append(v[a : a + context_len])
            ev_t.append(v[a + context_len : a + w])
    if not tr_c:
        raise DatasetError(f"no training windows of length {w}: the series are too short")

    def pack(c: list, t: list) -> Windows:
        if not c:
            return Windows(np.zeros((0, context_len), np.float32), np.zeros((0, horizon), np.float32))
        x, y = _normalize(np.stack(c), np.stack(t))
        return Windows(x, y)

    return pack(tr_c, tr_t), pack(ev_c, ev_t)


def shard_indices(n: int, shard: int, shard_count: int) -> np.ndarray:
    """Window i belongs to shard i mod shard_count."""
    if not 0 <= shard < shard_count:
        raise DatasetError(f"shard {shard} out of range 0..{shard_count - 1}")
    return np.arange(shard, n, shard_count)


def round_batches(
    n: int, shards: list[int], shard_count: int, task_id: str, round_: int, steps: int, batch: int
) -> list[np.ndarray]:
    """The window indices of each of ``steps`` batches a trainer with ``shards`` uses in a round.

    Deterministic in (task_id, shards, round): the seed is the first 8 bytes of
    SHA-256(task_id ‖ 0 ‖ shards ‖ round), so a benchmark can replay exactly the same samples."""
    pool = np.concatenate([shard_indices(n, s, shard_count) for s in sorted(shards)])
    if len(pool) == 0:
        raise DatasetError(f"shards {shards} hold no windows")
    h = hashlib.sha256(f"{task_id}\0{sorted(shards)}\0{round_}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "big"))
    out, buf = [], np.empty(0, dtype=np.int64)
    for _ in range(steps):
        while len(buf) < batch:
            buf = np.concatenate([buf, rng.permutation(pool)])
        out.append(buf[:batch])
        buf = buf[batch:]
    return out
