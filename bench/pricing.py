"""Issue 22, finding 5: what a blob flood costs an attacker and the node. A real tenzro-node --dev (small quota and
cap so the run stays short) is flooded over PUT /blobs for about 150 s by four clients in turn: without an intent,
with intents of an unfunded key, and with intents of funded keys (past the per-DID quota, then past the disk cap).
The node's blob-store bytes and RSS are sampled every 0.5 s. Run: ``$(scripts/venv.sh)/bin/python bench/pricing.py``."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from common import build_bins, node, write
from tenzro_trainer.canon import content_hash
from tenzro_trainer.identity import Key
from tenzro_trainer.rpc import Client, NoBlobEndpoint, NodeUnavailable, RpcError

BLOB = 8 << 20
PHASE_S = {"no intent": 30, "unfunded key": 30, "funded keys": 90}
QUOTA = 256 << 20
CAP = 1 << 30
PRICE = 10**9  # attoTNZO per byte (the default): 1 TNZO per GB


def store_bytes(d: Path) -> int:
    n = 0
    for root, _, files in os.walk(d):
        for f in files:
            if len(f) == 64:
                n += os.path.getsize(os.path.join(root, f))
    return n


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    bins = build_bins()
    os.environ.setdefault(
        "TENZRO_BENCH_NODE_LABEL", f"tenzro-node --dev --blob-did-quota {QUOTA} --blob-disk-cap {CAP}"
    )
    import common

    orig = common.subprocess.Popen

    def popen(args, **kw):  # the bench's own limits, kept small so the flood reaches them in minutes
        return orig([*args, "--blob-did-quota", str(QUOTA), "--blob-disk-cap", str(CAP)], **kw)

    common.subprocess.Popen = popen
    with node(bins) as (url, d, p):
        blobs = d / "data" / "blobs"
        samples: list[tuple[float, int, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.time(), store_bytes(blobs), rss_kb(p.pid)))
                time.sleep(0.5)

        threading.Thread(target=sample, daemon=True).start()
        time.sleep(2)
        base_rss = max(s[2] for s in samples)
        rows, raw = [], {"phases": {}}
        seed = [0]

        def flood(phase: str, keys: list[Key | None]) -> dict:
            out = {"sent": 0, "stored": 0, "refused": {}}
            lock = threading.Lock()
            end = time.time() + PHASE_S[phase]
            d0 = store_bytes(blobs)

            def worker(i: int) -> None:
                c = Client(url, timeout=60)
                k = 0
                while time.time() < end:
                    with lock:
                        seed[0] += 1
                        s = seed[0]
                    data = s.to_bytes(8, "big") * (BLOB // 8)
                    key = keys[(i + k) % len(keys)]
                    k += 1
                    try:
                        c.put_blob(data, content_hash(data), key=key)
                        with lock:
                            out["sent"] += len(data)
                            out["stored"] += len(data)
                    except (RpcError, NoBlobEndpoint, NodeUnavailable) as e:
                        # RpcError: its JSON-RPC code; UploadNotFunded: 402; NodeUnavailable: the 5xx status (507).
                        code = getattr(e, "code", None) or str(e).rsplit("HTTP ", 1)[-1][:3]
                        with lock:
                            out["sent"] += len(data)
                            out["refused"][str(code)] = out["refused"].get(str(code), 0) + 1

            ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            out["disk_growth"] = store_bytes(blobs) - d0
            return out

        admin = Client(url)
        funded = [Key.generate("machine") for _ in range(5)]
        for k in funded:
            admin.faucet(k.did, 10 * 10**18)  # 10 TNZO: allowance min(10 GB, quota)
        for phase, keys in (
            ("no intent", [None]),
            ("unfunded key", [Key.generate("machine")]),
            ("funded keys", funded),
        ):
            t0 = time.time()
            r = flood(phase, keys)
            rss = max(s[2] for s in samples if s[0] >= t0)
            raw["phases"][phase] = {**r, "peak_rss_kb": rss, "seconds": PHASE_S[phase]}
            rows.append([phase, PHASE_S[phase], f"{r['sent'] / 2**20:.0f}", f"{r['stored'] / 2**20:.0f}",
                         f"{r['disk_growth'] / 2**20:.0f}", ", ".join(f"{k}×{v}" for k, v in sorted(r["refused"].items())) or "-",
                         f"{rss / 1024:.0f} ({rss / base_rss:.2f}×)"])  # fmt: skip
        stop.set()
        peak_disk = max(s[1] for s in samples)
        raw.update(base_rss_kb=base_rss, peak_disk=peak_disk, cap=CAP, quota=QUOTA, price=PRICE, blob=BLOB)
    write(
        "pricing",
        "Blob flood against PUT /blobs (issue 22, finding 5)",
        [
            "phase",
            "seconds",
            "MiB sent",
            "MiB stored",
            "store growth MiB",
            "refusals (code×count)",
            "peak RSS MiB (× idle)",
        ],
        rows,
        [
            f"Four clients upload {BLOB >> 20} MiB random blobs as fast as they can; idle RSS {base_rss / 1024:.0f} MiB;"
            f" peak blob-store size {peak_disk / 2**20:.0f} MiB with --blob-disk-cap {CAP >> 20} MiB and"
            f" --blob-did-quota {QUOTA >> 20} MiB (5 funded keys × {QUOTA >> 20} MiB would exceed the cap).",
            "Refusal codes: -32002 no or bad intent (401), 402 the key's balance or quota does not fund it (-32004),"
            " -32010 disk cap (507) or per-peer budget (429).",
            f"Attacker cost: each unreferenced byte needs {PRICE} attoTNZO of balance, i.e. 1 TNZO held per GB kept;"
            f" at most {QUOTA >> 20} MiB per DID, collected after --blob-ttl (24 h) unless a record references it;"
            " a record costs a fee-paying transaction (and enrolment stake for a payload).",
            "Command: `$(scripts/venv.sh)/bin/python bench/pricing.py` (TENZRO_BIN_DIR=bin to reuse `make build`).",
        ],
        raw,
    )


if __name__ == "__main__":
    main()
