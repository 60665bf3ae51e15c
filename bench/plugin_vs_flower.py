"""`tenzro plugin run` against Flower's numpy aggregators, every rule, black box (issue 21 item 2).

For K inputs of N f32 (safetensors files on disk, page cache warm), each rule
runs as a fresh subprocess on both sides: `bin/tenzro plugin run` (the rule
author's tool: a plugin worker runs the built-in Wasm module) and a Python
process that imports `flwr.server.strategy.aggregate`, loads the same files
(np.fromfile, as a server would deserialize the clients' arrays), calls
Flower's function and writes the result as an F32 safetensors file. Each side
is timed end to end (process start to exit, wall clock) and its peak memory
is the largest resident set of any process it started (RUSAGE_CHILDREN
ru_maxrss, read in a fresh helper process per run, so the plugin worker, a
child of the CLI, counts and earlier runs do not). Runs alternate
(tenzro first on even repetitions, Flower first on odd ones); figures are
medians of --reps runs, and only runs that exited 0 count. The outputs of
the two sides are compared (max |a-b| and the largest relative difference).

Flower is installed, pinned, into its own venv under ~/.cache (never the
trainer venv); the driver re-executes itself in that venv (numpy for the
inputs and the comparison comes with flwr). Not part of CI: it downloads flwr.

    make build
    python3 bench/plugin_vs_flower.py --ks 4,6,16 --n 4194304 --reps 3

Results: bench/results/plugin-vs-flower.md (and .json beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

FLWR_VERSION = "1.41.0"
VENV = os.path.expanduser(f"~/.cache/tenzro-flwr/flwr-{FLWR_VERSION}")
REEXEC = "TENZRO_FLWR_BENCH_IN_VENV"

# Built-in aggregation rules, their parameters for K inputs, and Flower's
# counterpart (None: flwr.server.strategy.aggregate has none).
#   Krum / MultiKrum: f = (K-3)//2 (the largest f with K >= 2f+3).
#   Bulyan: f = (K-3)//4 (the largest f with K >= 4f+3).


def rules_for(k: int) -> list[tuple[str, str, str | None]]:
    fk, fb = (k - 3) // 2, (k - 3) // 4
    return [
        ("Mean", "Mean", "aggregate(R)"),
        ("TrimmedMean", "TrimmedMean{alpha_bps=2000}", "aggregate_trimmed_avg(R, 0.2)"),
        ("CoordinateMedian", "CoordinateMedian", "aggregate_median(R)"),
        ("Krum", f"Krum{{f={fk}}}", f"aggregate_krum(R, {fk}, 0)"),
        ("MultiKrum", f"MultiKrum{{f={fk}}}", f"aggregate_krum(R, {fk}, {k - fk})"),
        ("Bulyan", f"Bulyan{{f={fb}}}", f"aggregate_bulyan(R, {fb}, aggregate_krum, to_keep=0)"),
        ("GeometricMedian", "GeometricMedian", None),
        ("CenteredClipping", "CenteredClipping", None),
    ]


# Flower's side: a fresh interpreter imports Flower, loads the K inputs,
# calls the function (argv[1] is the call, R the results list) and writes
# the F32 result. It reports its import and compute times on stderr.
FLOWER_SIDE = r"""
import json, struct, sys, time
t0 = time.perf_counter()
import numpy as np
from flwr.server.strategy.aggregate import (aggregate, aggregate_trimmed_avg, aggregate_median,
    aggregate_krum, aggregate_bulyan)
t1 = time.perf_counter()
call, out, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        a, b = h["w"]["data_offsets"]
        f.seek(8 + n + a)
        return np.fromfile(f, dtype="<f4", count=(b - a) // 4)
R = [([load(p)], 1) for p in paths]
t2 = time.perf_counter()
y = np.asarray(eval(call)[0], dtype=np.float32)
t3 = time.perf_counter()
h = json.dumps({"w": {"dtype": "F32", "shape": [int(y.size)], "data_offsets": [0, int(y.nbytes)]}},
               separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h); f.write(y.tobytes())
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "aggregate_s": t3 - t2, "write_s": t4 - t3}), file=sys.stderr)
"""


def ensure_venv() -> None:
    """Re-execute in the pinned Flower venv, creating it on first use."""
    if os.environ.get(REEXEC) == VENV:
        return
    py = os.path.join(VENV, "bin", "python")
    if not os.path.exists(py):
        os.makedirs(os.path.dirname(VENV), exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", f"flwr=={FLWR_VERSION}"], check=True)
    os.environ[REEXEC] = VENV
    os.execv(py, [py, *sys.argv])


def read_output(path: str):  # noqa: ANN201
    import numpy as np

    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        (name,) = [k for k in h if k != "__metadata__"]
        a, b = h[name]["data_offsets"]
        f.seek(8 + n + a)
        return np.fromfile(f, dtype="<f4", count=(b - a) // 4)


def med(rs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rs)


def compare(a_path: str, b_path: str) -> dict:
    import numpy as np

    a, b = read_output(a_path).astype(np.float64), read_output(b_path).astype(np.float64)
    if a.shape != b.shape:
        return {"shape": [list(a.shape), list(b.shape)]}
    d = np.abs(a - b)
    return {
        "max_abs": float(d.max()),
        # Relative to the output's scale (an elementwise ratio is unbounded
        # where an output coordinate is near 0).
        "max_rel": float(d.max() / max(float(np.abs(b).max()), 1e-30)),
        "identical_fraction": float(np.mean(d == 0)),
        "allclose": bool(np.allclose(a, b, rtol=1e-5, atol=1e-6)),
    }


def run(a: argparse.Namespace) -> dict:
    import numpy as np

    # The inputs and the process measure are plugin_run_vs_numpy's (imported
    # here, in Flower's venv: it needs numpy).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins"))
    from plugin_run_vs_numpy import measure, write_input

    tenzro = os.path.join(a.bin, "tenzro")
    if not os.access(tenzro, os.X_OK):
        sys.exit(f"{tenzro}: not built (make build)")
    import flwr  # noqa: F401 (the version is recorded)

    res: dict = {
        "command": " ".join(["python3", "bench/plugin_vs_flower.py", *sys.argv[1:]]),
        "flwr": flwr.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "nproc": os.cpu_count(),
        "n": a.n,
        "reps": a.reps,
        "results": [],
    }
    only = set(a.rules.split(",")) if a.rules else None
    for k in [int(x) for x in a.ks.split(",")]:
        t = tempfile.mkdtemp(prefix="plugin-vs-flower-", dir=a.tmp)
        try:
            rng = np.random.default_rng(k)
            paths = []
            for i in range(k):
                p = os.path.join(t, f"in{i}.safetensors")
                write_input(p, rng.standard_normal(a.n, dtype=np.float32) * np.float32(1 + 0.1 * i))
                paths.append(p)
            fl_script = os.path.join(t, "flower_side.py")
            with open(fl_script, "w") as f:
                f.write(FLOWER_SIDE)
            ours_out, fl_out = os.path.join(t, "tenzro.safetensors"), os.path.join(t, "flower.safetensors")
            # One run first fills the compiled-module cache on disk, as any
            # earlier run of the tool would have; the files are then warm.
            measure([tenzro, "plugin", "run", "--rule", "Mean", "--inputs", ",".join(paths), "--out", ours_out])
            for name, rule, call in rules_for(k):
                if only and name not in only:
                    continue
                row: dict = {
                    "k": k,
                    "rule": name,
                    "tenzro_rule": rule,
                    "flower_call": call,
                    "load_avg_start": os.getloadavg(),
                }
                ours_cmd = [tenzro, "plugin", "run", "--rule", rule, "--inputs", ",".join(paths), "--out", ours_out]
                fl_cmd = [sys.executable, fl_script, call or "", fl_out, *paths]
                tz, fl, fl_parts, failures = [], [], [], []
                for rep in range(a.reps):
                    order = [("tenzro", ours_cmd), ("flower", fl_cmd)]
                    if rep % 2:
                        order.reverse()
                    for side, cmd in order:
                        if side == "flower" and call is None:
                            continue
                        r = measure(cmd)
                        if r["rc"] != 0:
                            failures.append({"side": side, "rc": r["rc"], "err": r["err"]})
                            continue
                        if side == "tenzro":
                            tz.append(r)
                        else:
                            fl.append(r)
                            fl_parts.append(json.loads(r["err"].strip().splitlines()[-1]))
                row["failures"] = failures
                if tz:
                    row["tenzro_ms"] = [
                        round(1e3 * x) for x in (med(tz, "s"), min(r["s"] for r in tz), max(r["s"] for r in tz))
                    ]
                    row["tenzro_peak_mb"] = round(med(tz, "maxrss_kb") / 1024)
                if fl:
                    row["flower_ms"] = [
                        round(1e3 * x) for x in (med(fl, "s"), min(r["s"] for r in fl), max(r["s"] for r in fl))
                    ]
                    row["flower_peak_mb"] = round(med(fl, "maxrss_kb") / 1024)
                    row["flower_parts_ms"] = {
                        p: round(1e3 * statistics.median(x[p] for x in fl_parts)) for p in fl_parts[0]
                    }
                if tz and fl:
                    row["time_ratio_tenzro_over_flower"] = round(med(tz, "s") / med(fl, "s"), 3)
                    # Against Flower's work alone (load, aggregate, write;
                    # no interpreter start, no import), as in a server that
                    # imported Flower once.
                    work = statistics.median(x["load_s"] + x["aggregate_s"] + x["write_s"] for x in fl_parts)
                    row["time_ratio_tenzro_over_flower_work"] = round(med(tz, "s") / work, 3)
                    row["rss_ratio_tenzro_over_flower"] = round(med(tz, "maxrss_kb") / med(fl, "maxrss_kb"), 3)
                    row["agreement"] = compare(ours_out, fl_out)
                row["load_avg_end"] = os.getloadavg()
                res["results"].append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(t, ignore_errors=True)
    return res


def fmt_ms(v: list[int] | None) -> str:
    return "–" if not v else f"{v[0]} ({v[1]}–{v[2]})"


def markdown(res: dict) -> str:
    out = [
        "# `tenzro plugin run` vs Flower's numpy aggregators (issue 21 item 2)",
        "",
        f"**Command**: `make build && {res['command']}` — flwr {res['flwr']} (numpy {res['numpy']}, "
        f"Python {res['python']}) in its own venv; N = {res['n']:,} f32 per input; median of {res['reps']} "
        "runs per side, alternating; wall time of the whole process (start to exit) and the largest resident "
        "set of any process of the run (RUSAGE_CHILDREN maxrss). Ratios are tenzro ÷ Flower "
        "(time < 1: tenzro faster; RSS < 1: tenzro smaller). \"Flower's work alone\" is the Flower process's "
        "load + aggregate + write (its own timers), without the interpreter start and `import flwr`: what a "
        "Flower server that imported Flower once spends per call; tenzro's side is always the whole process.",
        "",
        "| K | rule (tenzro) | Flower function | tenzro ms, median (range) | Flower ms, median (range) "
        "| time ratio | time ratio vs Flower's work alone | tenzro / Flower peak MB | RSS ratio "
        "| outputs: max abs diff, ÷ max abs output |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["results"]:
        ag = r.get("agreement")
        agree = (
            "–" if not ag else f"{ag['max_abs']:.3g}, {ag['max_rel']:.3g}" + (" (allclose)" if ag["allclose"] else "")
        )
        out.append(
            "| {k} | `{rule}` | {call} | {tz} | {fl} | {tr} | {tw} | {tp} / {fp} | {rr} | {agree} |".format(
                k=r["k"],
                rule=r["tenzro_rule"],
                call=f"`{r['flower_call']}`" if r["flower_call"] else "none",
                tz=fmt_ms(r.get("tenzro_ms")),
                fl=fmt_ms(r.get("flower_ms")),
                tr=r.get("time_ratio_tenzro_over_flower", "–"),
                tw=r.get("time_ratio_tenzro_over_flower_work", "–"),
                tp=r.get("tenzro_peak_mb", "–"),
                fp=r.get("flower_peak_mb", "–"),
                rr=r.get("rss_ratio_tenzro_over_flower", "–"),
                agree=agree,
            )
        )
    out += ["", "Flower's side, split (median ms: import of flwr, load of the K files, the aggregate call, write):", ""]
    for r in res["results"]:
        if "flower_parts_ms" in r:
            out.append(f"* K={r['k']} {r['rule']}: {r['flower_parts_ms']}")
    fails = [r for r in res["results"] if r["failures"]]
    if fails:
        out += ["", "Failed runs (not counted):", ""]
        for r in fails:
            out.append(f"* K={r['k']} {r['rule']}: {r['failures']}")
    out += [
        "",
        f"Load average at the first and last row: {res['results'][0]['load_avg_start']}, "
        f"{res['results'][-1]['load_avg_end']} ({res['nproc']} CPUs).",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="4,6,16")
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rules", default="", help="comma-separated rule names (default: all)")
    ap.add_argument("--bin", default=os.environ.get("TENZRO_BIN_DIR", os.path.join(os.getcwd(), "bin")))
    ap.add_argument("--tmp", default=None, help="directory for the inputs (default: the system temp dir)")
    ap.add_argument("--out", default="bench/results/plugin-vs-flower", help="results path without extension")
    a = ap.parse_args()
    ensure_venv()
    t0 = time.time()
    res = run(a)
    res["wall_s"] = round(time.time() - t0)
    with open(a.out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    md = markdown(res)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
