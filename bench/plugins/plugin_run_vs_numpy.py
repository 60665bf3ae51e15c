"""`tenzro plugin run` against numpy aggregators, end to end (issue 21 item 2).

Both sides start as a fresh process, read K safetensors files of N f32 from
disk (page cache warm), aggregate with the rule and write the F32 result;
runs alternate, one rule at a time. Peak memory: the largest resident set of
any process the run started (RUSAGE_CHILDREN ru_maxrss of that run alone,
measured in a fresh helper process so earlier runs do not count); the plugin
worker is a child of the CLI, so it is included. The numpy side is
bench/plugins/numpy_rules.py's formulas on the loaded arrays.

    V=$(scripts/venv.sh); make build
    $V/bin/python bench/plugins/plugin_run_vs_numpy.py --k 6 --n 16777216 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np

NUMPY_SIDE = r"""
import json, struct, sys
import numpy as np
rule, out, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        a, b = h["w"]["data_offsets"]
        f.seek(8 + n + a)
        return np.frombuffer(f.read(b - a), dtype="<f4")
x = np.stack([load(p) for p in paths])
k = len(x)
if rule == "Mean":
    y = x.mean(0, dtype=np.float64).astype(np.float32)
elif rule.startswith("TrimmedMean"):
    t = 2000 * k // 10000
    y = np.sort(x, 0)[t:k - t].mean(0, dtype=np.float64).astype(np.float32)
elif rule == "CoordinateMedian":
    y = np.median(x, 0).astype(np.float32)
elif rule.startswith("Krum"):
    d = np.array([[np.dot(a - b, a - b) for b in x] for a in x], dtype=np.float64)
    nb = max(1, k - 1 - 2)
    s = np.sort(d, axis=1)[:, 1:nb + 1].sum(1)
    y = x[int(np.argmin(s))]
h = json.dumps({"w": {"dtype": "F32", "shape": [int(y.size)], "data_offsets": [0, int(y.nbytes)]}}, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); f.write(y.tobytes())
"""

MEASURE = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True)
dt = time.perf_counter() - t
print(json.dumps({"rc": p.returncode, "s": dt, "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "err": p.stderr.decode()[-600:]}))
"""


def write_input(path: str, y: np.ndarray) -> None:
    """Write y (f32) as a one-tensor ("w") F32 safetensors file without metadata: a benchmark input."""
    n = int(y.size)
    h = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(y.tobytes())


def measure(cmd: list[str]) -> dict:
    """Run cmd as a fresh process: its rc, wall seconds, peak RSS of its process tree (KB) and stderr's tail."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def ms(rs: list[dict]) -> list[int]:
    return [
        round(1e3 * statistics.median(r["s"] for r in rs)),
        round(1e3 * min(r["s"] for r in rs)),
        round(1e3 * max(r["s"] for r in rs)),
    ]


def mb(rs: list[dict]) -> int:
    return round(max(r["maxrss_kb"] for r in rs) / 1024)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=6)
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bin", default=os.environ.get("TENZRO_BIN_DIR", os.path.join(os.getcwd(), "bin")))
    ap.add_argument("--rules", default="Mean,TrimmedMean{alpha_bps=2000},CoordinateMedian,Krum{f=1}")
    a = ap.parse_args()
    t = tempfile.mkdtemp(prefix="plugin-run-bench-")
    try:
        rng = np.random.default_rng(3)
        paths = []
        for i in range(a.k):
            p = os.path.join(t, f"in{i}.safetensors")
            write_input(p, rng.standard_normal(a.n, dtype=np.float32))
            paths.append(p)
        np_script = os.path.join(t, "np_side.py")
        with open(np_script, "w") as f:
            f.write(NUMPY_SIDE)

        def measured(cmd: list[str]) -> dict:
            r = measure(cmd)
            if r["rc"] != 0:
                raise RuntimeError("{}: {}".format(cmd[:3], r["err"]))
            return r

        tenzro = os.path.join(a.bin, "tenzro")
        # One run first: it fills the compilation cache on disk, as any
        # earlier run of the tool would have.
        measured(
            [
                tenzro,
                "plugin",
                "run",
                "--rule",
                "Mean",
                "--inputs",
                ",".join(paths),
                "--out",
                os.path.join(t, "warm.safetensors"),
            ]
        )
        res = {"k": a.k, "n": a.n, "input_bytes": a.k * 4 * a.n, "load_avg_start": os.getloadavg(), "rules": {}}
        for rule in a.rules.split(","):
            tz, npy = [], []
            for _ in range(a.reps):
                tz.append(
                    measured(
                        [
                            tenzro,
                            "plugin",
                            "run",
                            "--rule",
                            rule,
                            "--inputs",
                            ",".join(paths),
                            "--out",
                            os.path.join(t, "o1.safetensors"),
                        ]
                    )
                )
                npy.append(measured([sys.executable, np_script, rule, os.path.join(t, "o2.safetensors"), *paths]))
            res["rules"][rule] = {
                "tenzro_ms": ms(tz),
                "numpy_ms": ms(npy),
                "tenzro_peak_mb": mb(tz),
                "numpy_peak_mb": mb(npy),
                "speed_ratio_numpy_over_tenzro": round(
                    statistics.median(r["s"] for r in npy) / statistics.median(r["s"] for r in tz), 2
                ),
            }
            print(rule, json.dumps(res["rules"][rule]), file=sys.stderr, flush=True)
        res["load_avg_end"] = os.getloadavg()
        print(json.dumps(res, indent=1))
    finally:
        shutil.rmtree(t, ignore_errors=True)


if __name__ == "__main__":
    _ = resource
    main()
