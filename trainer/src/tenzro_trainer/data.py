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
* ``synth://kernelsynth/v1?seed=…`` — KernelSynth + TSMixup, a synthetic corpus that does not run
  out (``tenzro_trainer.synth``): every window is generated from (version, seed, split, index).

``file://``, ``ipfs://`` and ``https://`` corpora may also be Parquet or Arrow IPC files (one series
per numeric column, nulls skipped), recognized by their magic bytes. ``open_corpus`` streams any of them
(``ipfs://``/``https://`` downloaded to a temporary file, then parsed in record batches) into one
float64 file per series, memory-mapped: nothing holds the whole corpus in memory, whatever its size
(up to ``MAX_STREAM_BYTES``). Training windows are cut from those series on demand (``SeriesWindows``).

Whatever the source, the bytes are only trusted after ``dataset_hash`` matches (``check_hash``).

Batches by index (what an evaluator calls to regenerate a trainer's batch): ``round_batches`` gives the
window indices of every inner step of a round from (task_id, shards, shard_count, round, steps, batch);
``WindowSet.get(indices)`` gives the normalized (x, y) arrays of those windows. Both are pure functions
of their arguments and the corpus.

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
MAX_CSV_BYTES = 256 << 20  # a corpus parsed in memory (statsmodels, Confidential plaintext)
MAX_STREAM_BYTES = 64 << 30  # a corpus streamed through a local spill directory
SPILL_CELLS = 1 << 20  # values buffered before they are appended to the spill files


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
    # Signs the node fetch of ``ipfs://`` refs: ``sign(op, cid)`` is a ``Tenzro-Dataset-Request`` header value
    # (e.g. ``lambda op, cid: client.dataset_request(key, op, cid)``). A node on a network (not --dev) refuses
    # unsigned fetches; a signed fetch pins the dataset for, and charges it to, the signing DID.
    sign: Callable[[str, str], str] | None = None


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
    # The node stops fetching past what the trainer would accept (the CSV limit plus UnixFS overhead).
    url = _ipfs_url(ref, sources, MAX_CSV_BYTES + MAX_CSV_BYTES // 64 + (1 << 20))
    return _download(url, f"dataset_ref {ref!r}", (sources or Sources()).timeout)


def _ipfs_url(ref: str, sources: Sources | None, limit: int = MAX_STREAM_BYTES + MAX_STREAM_BYTES // 64) -> str:
    """The gateway URL of ``ipfs://<cid>[/path]`` once the node holds the whole DAG (or on the
    configured gateway)."""
    import requests

    u = urlparse(ref)
    cid, path = u.netloc, u.path.lstrip("/")
    if not cid or not cid.isalnum() or len(cid) > 128:
        raise DatasetError(f"dataset_ref {ref!r}: want ipfs://<cid>[/path]")
    sources = sources or Sources()
    tail = f"/ipfs/{cid}" + (f"/{quote(path)}" if path else "")
    if sources.ipfs_gateway:
        return sources.ipfs_gateway.rstrip("/") + tail
    if not sources.node_url:
        raise DatasetError(f"dataset_ref {ref!r}: ipfs:// needs the trainer's node or ipfs_gateway: in trainer.yaml")
    base = sources.node_url.rstrip("/")
    headers: dict[str, str] = {}
    if sources.sign is not None:
        from .rpc import DATASET_REQUEST_HEADER, RpcError

        try:
            headers[DATASET_REQUEST_HEADER] = sources.sign("fetch", cid)
        except (RpcError, requests.RequestException, ValueError) as e:
            raise DatasetError(f"dataset_ref {ref!r}: signing the fetch for node {base}: {e}") from e
    try:
        r = requests.post(
            f"{base}/api/dataset/fetch",
            params={"ref": f"ipfs://{cid}", "max_bytes": limit},
            headers=headers,
            timeout=sources.timeout,
        )
    except requests.RequestException as e:
        raise DatasetError(f"dataset_ref {ref!r}: node {base}: {e}") from e
    if r.status_code != 200:
        try:
            msg = r.json().get("error", r.text)
        except ValueError:
            msg = r.text
        if r.status_code == 401 and sources.sign is None:
            raise DatasetError(
                f"dataset_ref {ref!r}: node {base} takes only signed fetches (it is not a --dev node) and no key "
                f"signs this one: give a funded key (--key FILE, $TENZRO_KEY or ~/.tenzro/key.json; the trainer "
                f"signs with its trainer_keypair): {msg[:500]}"
            )
        raise DatasetError(f"dataset_ref {ref!r}: the node could not fetch it: {msg[:500]}")
    return base + tail


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


def dataset_hash(ref: str, sources: Sources | None = None) -> bytes:
    """The ``dataset_hash`` of any ref: a synth:// ref's definition hash, else the corpus hash of the
    parsed data (statsmodels in memory; file/ipfs/https streamed)."""
    u = urlparse(ref)
    if u.scheme == "synth":
        from . import synth

        try:
            return synth.parse_ref(ref).hash()
        except synth.SynthError as e:
            raise DatasetError(str(e)) from e
    if u.scheme == "statsmodels":
        return corpus_hash(load_corpus(ref, sources))
    return open_corpus(ref, sources).hash()


def check_hash(series: list[Series], expected: str) -> None:
    _check(corpus_hash(series), expected)


def _check(got: bytes, expected: str) -> None:
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

    @property
    def n(self) -> int:
        return len(self.x)

    def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[idx], self.y[idx]


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


def shard_gap(window_len: int, stride: int) -> int:
    """Windows left out at the start of every shard but the first: ceil(window_len / stride) - 1, so that no
    window of one shard shares a point with a window of another (Go: syncer.ShardGap)."""
    if window_len < 1 or stride < 1:
        return 0
    return (window_len - 1) // stride


def shard_range(n: int, shard: int, shard_count: int, gap: int = 0) -> tuple[int, int]:
    """The windows [lo, hi) of ``shard``: the contiguous block floor(s*n/S) .. floor((s+1)*n/S) of the
    enumeration, less its first g windows when s > 0, g = ``gap`` capped at floor(n/S) - 1 (a small corpus
    keeps a window in every shard when n >= S, its shards touching). Windows in a gap belong to no shard
    (Go: syncer.ShardRange; docs/protocol/scoring.md §3)."""
    if not 0 <= shard < shard_count:
        raise DatasetError(f"shard {shard} out of range 0..{shard_count - 1}")
    if gap < 0:
        raise DatasetError(f"shard gap {gap}: want >= 0")
    lo, hi = shard * n // shard_count, (shard + 1) * n // shard_count
    gap = min(gap, max(n // shard_count - 1, 0))
    if shard > 0:
        lo += gap
    return lo, hi


def shard_indices(n: int, shard: int, shard_count: int, gap: int = 0) -> np.ndarray:
    """The windows of ``shard`` of a finite corpus of ``n`` windows: a contiguous block (``shard_range``)."""
    lo, hi = shard_range(n, shard, shard_count, gap)
    return np.arange(lo, hi, dtype=np.int64)


SHARD_SPLITS = ("", "series")  # the spec's shard_split: absent (contiguous blocks of the enumeration) or "series"


def series_shard_blocks(counts: list[int], shard_count: int, gap: int) -> list[list[tuple[int, int]]]:
    """Series-balanced shards (spec ``"shard_split": "series"``; Go: syncer.SeriesShardBlocks; scoring.md §3):
    the blocks [lo, hi) of the enumeration each shard holds, ascending. Series after series, with ``counts[i]``
    training windows in series i: a series with ⌊counts[i]/S⌋ > gap is cut into S contiguous time blocks, block
    s to shard s (``shard_range`` over that series' windows, so each block but the first loses its first ``gap``
    windows and no two shards share a point); a shorter series is dealt whole to the shard holding the fewest
    windows so far (ties: the lowest shard), because cutting it would leave some shard no window of it or make
    shards share points. Every shard then holds a time block of every long series."""
    if shard_count < 1:
        raise DatasetError(f"shard_count {shard_count}: want >= 1")
    if gap < 0:
        raise DatasetError(f"shard gap {gap}: want >= 0")
    out: list[list[tuple[int, int]]] = [[] for _ in range(shard_count)]
    size = [0] * shard_count
    base = 0
    for n in counts:
        if n < 0:
            raise DatasetError(f"series window count {n}: want >= 0")
        if n // shard_count > gap:
            for s in range(shard_count):
                lo, hi = shard_range(n, s, shard_count, gap)
                out[s].append((base + lo, base + hi))
                size[s] += hi - lo
        elif n > 0:
            s = min(range(shard_count), key=lambda k: (size[k], k))
            out[s].append((base, base + n))
            size[s] += n
        base += n
    return out


def round_batches(
    n: int | None,
    shards: list[int],
    shard_count: int,
    task_id: str,
    round_: int,
    steps: int,
    batch: int,
    gap: int = 0,
    series_counts: list[int] | None = None,
    trainer: str = "",
) -> list[np.ndarray]:
    """The window indices of each of ``steps`` batches a trainer with ``shards`` uses in a round.

    A finite corpus (``n`` windows): shard s is a contiguous block of windows with ``gap`` windows left out
    between shards (``shard_range``; a loader passes its windows' ``shard_gap``); the batches are drawn
    from a permutation of the shards' windows seeded with the first 8 bytes of
    SHA-256(task_id ‖ 0 ‖ shards ‖ round). With ``series_counts`` (the windows of each series, spec
    ``"shard_split": "series"``) a shard is instead its ``series_shard_blocks``; the draw is the same. With
    ``trainer`` (its DID; spec ``"shard_holders": 2``, scoring.md §3.1) the seed is SHA-256(task_id ‖ 0 ‖ shards ‖
    0 ‖ round ‖ 0 ‖ trainer): two holders of a shard draw different batches, so honest co-holders are not copies.

    An unbounded corpus (``n`` None, a synth:// corpus): every window is used once. Sample b of step h
    comes from shard S[b mod m] (S the sorted shards, m their number) at position
    k = (round·steps + h)·⌈batch/m⌉ + ⌊b/m⌋ of that shard's stream, i.e. window k·shard_count + S[b mod m].
    """
    if n is None:
        if trainer:
            raise DatasetError("a per-trainer draw (shard_holders 2) needs a finite corpus")
        s = sorted(shards)
        if not s:
            raise DatasetError("no shards")
        for x in s:
            if not 0 <= x < shard_count:
                raise DatasetError(f"shard {x} out of range 0..{shard_count - 1}")
        m = len(s)
        per = -(-batch // m)
        b = np.arange(batch, dtype=np.int64)
        sh = np.asarray(s, dtype=np.int64)[b % m]
        out = []
        for h in range(steps):
            k = (round_ * steps + h) * per + b // m
            out.append(k * shard_count + sh)
        return out
    for x in shards:
        if not 0 <= x < shard_count:
            raise DatasetError(f"shard {x} out of range 0..{shard_count - 1}")
    if series_counts is not None:
        if sum(series_counts) != n:
            raise DatasetError(f"series window counts sum to {sum(series_counts)}, the corpus has {n} windows")
        blocks = series_shard_blocks(series_counts, shard_count, gap)
        parts = [np.arange(lo, hi, dtype=np.int64) for s in sorted(shards) for lo, hi in blocks[s]]
        pool = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    else:
        pool = np.concatenate([shard_indices(n, s, shard_count, gap) for s in sorted(shards)])
    if len(pool) == 0:
        raise DatasetError(f"shards {shards} hold no windows")
    seed = f"{task_id}\0{sorted(shards)}\0{round_}" + (f"\0{trainer}" if trainer else "")
    h = hashlib.sha256(seed.encode()).digest()
    rng = np.random.default_rng(int.from_bytes(h[:8], "big"))
    out, buf = [], np.empty(0, dtype=np.int64)
    for _ in range(steps):
        while len(buf) < batch:
            buf = np.concatenate([buf, rng.permutation(pool)])
        out.append(buf[:batch])
        buf = buf[batch:]
    return out


# ---------------------------------------------------------------------------------------------- windows


class WindowSet:
    """Normalized (context, horizon) windows addressed by index; ``n`` is None when unbounded."""

    n: int | None
    # windows left out between shards (shard_gap); 0 for an unbounded set, whose shards interleave
    shard_gap: int = 0
    # training windows per series, in enumeration order (a series-balanced split needs them); None: unknown
    series_counts: list[int] | None = None

    def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def __len__(self) -> int:
        if self.n is None:
            raise TypeError("an unbounded window set has no length")
        return self.n


class SeriesWindows(WindowSet):
    """The windows ``make_windows`` would cut (same order, same normalization), computed on demand from
    series that may be memory-mapped files: nothing but the per-series window counts is held."""

    def __init__(
        self, series: list[np.ndarray], context_len: int, horizon: int, stride: int, holdout: float, split: str
    ) -> None:
        if stride < 1:
            raise DatasetError(f"stride {stride}: want >= 1")
        self.series, self.c, self.h, self.stride = series, context_len, horizon, stride
        w = context_len + horizon
        self.shard_gap = shard_gap(w, stride)
        starts, counts = [], []
        for v in series:
            cut = int(len(v) * (1.0 - holdout))
            lo, hi = (0, cut - w) if split == "train" else (max(0, cut - context_len), len(v) - w)
            starts.append(lo)
            counts.append(max(0, (hi - lo) // stride + 1) if hi >= lo else 0)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.cum = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))])
        self.n = int(self.cum[-1])
        self.series_counts = [int(c) for c in counts]

    def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.n):
            raise DatasetError(f"window index out of range 0..{self.n - 1}")
        j = np.searchsorted(self.cum, idx, side="right") - 1
        a = self.starts[j] + (idx - self.cum[j]) * self.stride
        w = self.c + self.h
        ctx = np.empty((len(idx), self.c), np.float64)
        tgt = np.empty((len(idx), self.h), np.float64)
        for r, (jj, aa) in enumerate(zip(j.tolist(), a.tolist(), strict=True)):
            v = np.asarray(self.series[jj][aa : aa + w], dtype=np.float64)
            ctx[r], tgt[r] = v[: self.c], v[self.c :]
        if len(idx) == 0:
            return ctx.astype(np.float32), tgt.astype(np.float32)
        return _normalize(ctx, tgt)


class SynthWindows(WindowSet):
    """A synth:// corpus: train windows unbounded, eval windows the ref's ``eval`` count."""

    def __init__(self, ref: str, context_len: int, horizon: int, split: str) -> None:
        from . import synth

        try:
            self.ref = synth.parse_ref(ref)
        except synth.SynthError as e:
            raise DatasetError(str(e)) from e
        self.c, self.h, self.split = context_len, horizon, split
        self.n = None if split == "train" else self.ref.eval_windows

    def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        from . import synth

        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        ctx = np.empty((len(idx), self.c), np.float64)
        tgt = np.empty((len(idx), self.h), np.float64)
        try:
            for r, i in enumerate(idx.tolist()):
                v = synth.series(self.ref, self.split, i, self.c + self.h)
                ctx[r], tgt[r] = v[: self.c], v[self.c :]
        except synth.SynthError as e:
            raise DatasetError(str(e)) from e
        if len(idx) == 0:
            return ctx.astype(np.float32), tgt.astype(np.float32)
        return _normalize(ctx, tgt)


def batch(
    windows: WindowSet,
    shards: list[int],
    shard_count: int,
    task_id: str,
    round_: int,
    step: int,
    steps: int,
    size: int,
    shard_split: str = "",
    trainer: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) batch a trainer with ``shards`` trains on at inner step ``step`` of round ``round_``
    (what a node or an evaluator regenerates to re-run that step); ``trainer``: its DID under shard_holders 2."""
    if not 0 <= step < steps:
        raise DatasetError(f"step {step} out of range 0..{steps - 1}")
    idx = round_batches(
        windows.n, shards, shard_count, task_id, round_, steps, size, windows.shard_gap,
        windows.series_counts if shard_split == "series" else None, trainer,
    )[step]  # fmt: skip
    return windows.get(idx)


# ---------------------------------------------------------------------------------------------- streaming


class _Spill:
    """Appends each series' values to its own float64 file in ``dir``."""

    def __init__(self, dir_: Path, names: list[str], what: str) -> None:
        if not names or any(n == "" for n in names):
            raise DatasetError(f"{what}: want a header naming every series")
        self.dir, self.names, self.what = dir_, names, what
        self.files = [open(dir_ / f"s{j}.f64", "wb") for j in range(len(names))]  # noqa: SIM115

    def add(self, j: int, v: np.ndarray | list[float]) -> None:
        a = np.asarray(v, dtype=np.float64)
        if not np.isfinite(a).all():
            raise DatasetError(f"{self.what}: column {self.names[j]!r}: non-finite value")
        self.files[j].write(a.astype("<f8").tobytes())

    def close(self) -> list[Path]:
        for f in self.files:
            f.close()
        return [self.dir / f"s{j}.f64" for j in range(len(self.names))]


def _stream_csv(path: Path, spill_dir: Path, what: str) -> list[str]:
    with path.open(newline="") as f:
        rd = csv.reader(f)
        header = next(rd, None)
        if not header:
            raise DatasetError(f"{what}: want a header row naming the series")
        names = [n.strip() for n in header]
        sp = _Spill(spill_dir, names, what)
        bufs: list[list[float]] = [[] for _ in names]
        cells = 0
        for ln, row in enumerate(rd, start=2):
            if len(row) > len(names):
                raise DatasetError(f"{what}:{ln}: {len(row)} cells, header has {len(names)}")
            for j, cell in enumerate(row):
                if cell.strip() == "":
                    continue
                try:
                    x = float(cell)
                except ValueError as e:
                    raise DatasetError(f"{what}:{ln}: column {names[j]!r}: {cell!r} is not a number") from e
                if not math.isfinite(x):
                    raise DatasetError(f"{what}:{ln}: column {names[j]!r}: non-finite value")
                bufs[j].append(x)
                cells += 1
            if cells >= SPILL_CELLS:
                for j, b in enumerate(bufs):
                    sp.add(j, b)
                bufs, cells = [[] for _ in names], 0
        for j, b in enumerate(bufs):
            sp.add(j, b)
        sp.close()
        return names


def _stream_arrow(batches, schema, spill_dir: Path, what: str) -> list[str]:  # noqa: ANN001 — pyarrow types
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [f.name.strip() for f in schema]
    for f in schema:
        if not (pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)):
            raise DatasetError(f"{what}: column {f.name!r} has type {f.type}, want a numeric column per series")
    sp = _Spill(spill_dir, names, what)
    for rb in batches:
        for j in range(rb.num_columns):
            col = pc.drop_null(rb.column(j)).cast(pa.float64())
            sp.add(j, col.to_numpy(zero_copy_only=False))
    sp.close()
    return names


def _sniff(path: Path) -> str:
    with path.open("rb") as f:
        head = f.read(8)
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1":
        return "arrow"
    if head[:4] == b"\xff\xff\xff\xff":
        return "arrow-stream"
    return "csv"


def _download_to(url: str, dst: Path, what: str, timeout: float, limit: int = MAX_STREAM_BYTES) -> None:
    import requests

    try:
        with requests.get(url, stream=True, timeout=timeout) as r, dst.open("wb") as f:
            if r.status_code != 200:
                raise DatasetError(f"{what}: {url}: HTTP {r.status_code}: {r.text[:300]}")
            got = 0
            for chunk in r.iter_content(1 << 20):
                got += len(chunk)
                if got > limit:
                    raise DatasetError(f"{what}: larger than {limit} bytes")
                f.write(chunk)
    except requests.RequestException as e:
        raise DatasetError(f"{what}: {url}: {e}") from e


class StreamedCorpus:
    """A corpus streamed into one memory-mapped float64 file per series (in a temporary directory that
    lives as long as this object). ``series`` are read-only memmaps; ``hash()`` streams the files."""

    def __init__(self, names: list[str], files: list[Path], tmp: object) -> None:
        self.names, self.files, self._tmp = names, files, tmp
        self.series = [
            np.memmap(p, dtype="<f8", mode="r") if p.stat().st_size else np.zeros(0, np.float64) for p in files
        ]

    def hash(self) -> bytes:
        h = hashlib.sha256()

        def field(b: bytes) -> None:
            h.update(struct.pack(">Q", len(b)))
            h.update(b)

        field(DOMAIN_DATASET.encode())
        field(struct.pack(">Q", len(self.names)))
        for name, p in zip(self.names, self.files, strict=True):
            field(name.encode("utf-8"))
            h.update(struct.pack(">Q", p.stat().st_size))
            with p.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        return h.digest()

    def check_hash(self, expected: str) -> None:
        _check(self.hash(), expected)

    def as_series(self) -> list[Series]:
        return [Series(n, s) for n, s in zip(self.names, self.series, strict=True)]


def _parse_file(path: Path, spill: Path, what: str) -> list[str]:
    kind = _sniff(path)
    if kind == "csv":
        return _stream_csv(path, spill, what)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if kind == "parquet":
            pf = pq.ParquetFile(path)
            return _stream_arrow(pf.iter_batches(batch_size=65536), pf.schema_arrow, spill, what)
        src = pa.memory_map(str(path), "r")
        rd = pa.ipc.open_file(src) if kind == "arrow" else pa.ipc.open_stream(src)
        if kind == "arrow":
            return _stream_arrow((rd.get_batch(i) for i in range(rd.num_record_batches)), rd.schema, spill, what)
        return _stream_arrow(rd, rd.schema, spill, what)
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{what}: not a readable {kind} file: {e}") from e


def open_corpus(ref: str, sources: Sources | None = None) -> StreamedCorpus:
    """Streams a ``file://``, ``ipfs://`` or ``https://`` corpus (CSV, Parquet or Arrow) to disk."""
    import tempfile

    u = urlparse(ref)
    src = sources or Sources()
    tmp = tempfile.TemporaryDirectory(prefix="tenzro-corpus-")
    d = Path(tmp.name)
    if u.scheme == "file":
        path = Path(unquote(u.path))
        if not path.is_file():
            raise DatasetError(f"dataset_ref {ref!r}: no such file")
        if path.stat().st_size > MAX_STREAM_BYTES:
            raise DatasetError(f"{path}: larger than {MAX_STREAM_BYTES} bytes")
    elif u.scheme in ("ipfs", "https"):
        path = d / "download"
        if u.scheme == "https":
            _download_to(ref, path, f"dataset_ref {ref!r}", src.timeout)
        else:
            _download_to(_ipfs_url(ref, src), path, f"dataset_ref {ref!r}", src.timeout)
    else:
        raise DatasetError(f"dataset_ref {ref!r}: open_corpus streams file://, ipfs:// or https://")
    names = _parse_file(path, d, ref if u.scheme != "file" else str(path))
    if u.scheme != "file":
        path.unlink()
    return StreamedCorpus(names, [d / f"s{j}.f64" for j in range(len(names))], tmp)
