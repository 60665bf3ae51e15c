"""Attestation verification throughput, before (a git ref, default main) and after (this clone).

Builds the attest package's test binary from both trees and runs each Go benchmark on one goroutine (-cpu 1),
alternating before/after, over several rounds. The machine is shared, and wall-clock ns/op moves with everyone
else's load; so the primary figure is the CPU time of one verification: each benchmark runs twice, with N and N/10
iterations, and the difference of the two processes' CPU time (user + system, from getrusage) divided by the
difference of the iteration counts is the CPU time per operation (setup and process start cancel out). Each figure
is also a multiple of one ECDSA P-384 verification measured the same way by the same binary in the same round
(BenchmarkP384Verify; the "before" tree gets that baseline benchmark added if it lacks it), and as verifications per
core per second. Median and range over the rounds; go test's own wall-clock ns/op is kept beside. Writes
bench/results/attestation.md and .json.

    python3 bench/attestation.py [--before main] [--rounds 5] [--cpu-seconds 0.5]

Standard library only; needs go and git.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

BASELINE = """package attest

import (
\t"crypto"
\t"crypto/ecdsa"
\t"crypto/elliptic"
\t"crypto/rand"
\t_ "crypto/sha256"
\t_ "crypto/sha512"
\t"testing"
)

func BenchmarkP384Verify(b *testing.B) { benchECDSABaseline(b, elliptic.P384(), crypto.SHA384) }

func BenchmarkP256Verify(b *testing.B) { benchECDSABaseline(b, elliptic.P256(), crypto.SHA256) }

func benchECDSABaseline(b *testing.B, curve elliptic.Curve, h crypto.Hash) {
\tk, err := ecdsa.GenerateKey(curve, rand.Reader)
\tif err != nil {
\t\tb.Fatal(err)
\t}
\td := h.New()
\td.Write([]byte("tenzro attestation baseline"))
\tdigest := d.Sum(nil)
\tsig, err := ecdsa.SignASN1(rand.Reader, k, digest)
\tif err != nil {
\t\tb.Fatal(err)
\t}
\tfor i := 0; i < b.N; i++ {
\t\tif !ecdsa.VerifyASN1(&k.PublicKey, digest, sig) {
\t\t\tb.Fatal("signature does not verify")
\t\t}
\t}
}
"""

LINE = re.compile(r"^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op")
P384, P256 = "BenchmarkP384Verify", "BenchmarkP256Verify"
BENCHES = {
    "before": [P384, P256, "BenchmarkVerifySNP", "BenchmarkVerifyNitro", "BenchmarkVerifyTDX"],
    "after": [P384, P256]
    + [f"BenchmarkVerify{v}/{m}" for v in ("SNP", "Nitro", "TDX") for m in ("cached", "uncached")]
    + [f"BenchmarkVerifyPolicy/{v}" for v in ("snp", "nitro", "tdx")],
}

# (vendor, which code, benchmark name), in table order.
ROWS = [
    ("SEV-SNP", "before", "BenchmarkVerifySNP"),
    ("SEV-SNP", "after, uncached", "BenchmarkVerifySNP/uncached"),
    ("SEV-SNP", "after, cached", "BenchmarkVerifySNP/cached"),
    ("SEV-SNP", "after, cached, with policy", "BenchmarkVerifyPolicy/snp"),
    ("Nitro", "before", "BenchmarkVerifyNitro"),
    ("Nitro", "after, uncached", "BenchmarkVerifyNitro/uncached"),
    ("Nitro", "after, cached", "BenchmarkVerifyNitro/cached"),
    ("Nitro", "after, cached, with policy", "BenchmarkVerifyPolicy/nitro"),
    ("TDX", "before", "BenchmarkVerifyTDX"),
    ("TDX", "after, uncached", "BenchmarkVerifyTDX/uncached"),
    ("TDX", "after, cached", "BenchmarkVerifyTDX/cached"),
    ("TDX", "after, cached, with policy", "BenchmarkVerifyPolicy/tdx"),
]
GOALS = {"SEV-SNP": 500, "Nitro": 300, "TDX": 1000}


def sh(*cmd: str, cwd: Path) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def build(tree: Path, out: Path) -> None:
    """Builds the attest test binary of tree (adding the P-384/P-256 baselines to a tree without them)."""
    has = subprocess.run(["grep", "-rq", "--include=*_test.go", "func BenchmarkP384Verify", "attest"], cwd=tree)
    if has.returncode != 0:
        (tree / "attest" / "zz_baseline_bench_test.go").write_text(BASELINE)
    subprocess.run(["go", "test", "-c", "-o", str(out), "./attest"], cwd=tree, check=True)


def run_once(binary: Path, tree: Path, name: str, n: int) -> tuple[float, float]:
    """Runs one benchmark for n iterations; returns (go test's ns/op, CPU seconds of the process)."""
    pattern = "/".join(f"^{part}$" for part in name.split("/"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [str(binary), "-test.run", "^$", "-test.bench", pattern, "-test.cpu", "1", "-test.benchtime", f"{n}x"],
        cwd=tree / "attest",
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "GOMAXPROCS": "1"},
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    for line in out.splitlines():
        if (m := LINE.match(line)) and m.group(1) == name:
            return float(m.group(2)), cpu
    raise SystemExit(f"{binary}: {name} not in\n{out}")


def measure(binary: Path, tree: Path, name: str, cpu_seconds: float) -> dict[str, float]:
    """CPU ns per operation from two runs of N/10 and N iterations (N sized for about cpu_seconds)."""
    ns, _ = run_once(binary, tree, name, 5)
    big = max(20, int(cpu_seconds * 1e9 / ns))
    small = max(2, big // 10)
    _, cpu_small = run_once(binary, tree, name, small)
    wall, cpu_big = run_once(binary, tree, name, big)
    return {"cpu_ns": (cpu_big - cpu_small) / (big - small) * 1e9, "wall_ns": wall}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="git ref of the 'before' tree (default main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu-seconds", type=float, default=0.5, help="CPU time of the longer run of each benchmark")
    args = ap.parse_args()

    before_rev = sh("git", "rev-parse", "--short", args.before, cwd=ROOT)
    after_rev = sh("git", "rev-parse", "--short", "HEAD", cwd=ROOT)
    # Only the code measured counts (the README and results change with every run).
    dirty = bool(sh("git", "status", "--porcelain", "--", "attest", "go.mod", "go.sum", cwd=ROOT))
    tmp = Path(tempfile.mkdtemp(prefix="tenzro-bench-attest-"))
    try:
        measure_and_write(args, tmp, before_rev, after_rev, dirty)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure_and_write(args: argparse.Namespace, tmp: Path, before_rev: str, after_rev: str, dirty: bool) -> None:
    before_tree = tmp / "before"
    before_tree.mkdir()
    archive = tmp / "before.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True, stdout=f)
    with tarfile.open(archive) as t:
        t.extractall(before_tree, filter="data")
    build(before_tree, tmp / "before.test")
    build(ROOT, tmp / "after.test")
    trees = {"before": (tmp / "before.test", before_tree), "after": (tmp / "after.test", ROOT)}

    load = [loadavg()]
    rounds: list[dict[str, dict[str, dict[str, float]]]] = []
    for i in range(args.rounds):
        r: dict[str, dict[str, dict[str, float]]] = {"before": {}, "after": {}}
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            binary, tree = trees[side]
            for name in BENCHES[side]:
                r[side][name] = measure(binary, tree, name, args.cpu_seconds)
        rounds.append(r)
        load.append(loadavg())
        print(
            f"round {i + 1}/{args.rounds}: P-384 {r['after'][P384]['cpu_ns'] / 1e6:.3f} ms CPU, "
            f"{r['after'][P384]['wall_ns'] / 1e6:.3f} ms wall, load {load[-1]}",
            flush=True,
        )

    def series(side: str, name: str, key: str = "cpu_ns") -> list[float]:
        return [r[side][name][key] for r in rounds if name in r[side]]

    def ratios(side: str, name: str) -> list[float]:
        return [r[side][name]["cpu_ns"] / r[side][P384]["cpu_ns"] for r in rounds if name in r[side]]

    def med_range(xs: list[float], fmt: str) -> str:
        return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"

    rows = []
    for vendor, what, name in ROWS:
        side = "before" if what == "before" else "after"
        cpu = series(side, name)
        if not cpu:
            continue
        rows.append(
            {
                "vendor": vendor,
                "what": what,
                "benchmark": name,
                "cpu_ns_per_op": cpu,
                "wall_ns_per_op": series(side, name, "wall_ns"),
                "p384_ratio": ratios(side, name),
                "per_core_per_s": [1e9 / x for x in cpu],
            }
        )

    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    go = sh("go", "version", cwd=ROOT)
    after = f"{after_rev}{' + uncommitted changes' if dirty else ''}"
    md = [
        "# Attestation verification throughput, before and after the verification caches",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores, shared with other engineers' builds and tests (load average "
        f"{load[0]} at the start, {' / '.join(load[1:])} after each round). Wall-clock times move with that load, so "
        "the figures are CPU time per verification (two runs of N/10 and N iterations per benchmark, the difference "
        "of their CPU time over the difference of N), also as a multiple of one ECDSA P-384 verification measured "
        f"the same way by the same binary in the same round. {go}. Date: {date}. Before: `{args.before}` "
        f"({before_rev}); after: {after}.",
        "",
        f"One goroutine (`-cpu 1`, GOMAXPROCS=1), {args.rounds} rounds alternating before and after; median "
        "(min–max) over the rounds. Authenticity verification of the real fixtures through `attest.Checker.Verify`: "
        'envelope parse, evidence parse, signatures, chain, collateral, debug ("with policy": plus a policy that '
        "accepts them). *uncached*: `Options.CacheEntries: -1` (everything verified every call); *cached*: the steady "
        "state after the first call. Command: `python3 bench/attestation.py`.",
        "",
        "| vendor | code | CPU ms / verification | × one P-384 verify | verifications / core / s | goal | wall ms "
        "(go test) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        goal = GOALS[r["vendor"]]
        med = statistics.median(r["per_core_per_s"])
        mark = f"≥ {goal}" + (" ✓" if r["what"].startswith("after, cached") and med >= goal else "")
        md.append(
            f"| {r['vendor']} | {r['what']} | {med_range([x / 1e6 for x in r['cpu_ns_per_op']], '{:.3f}')} | "
            f"{med_range(r['p384_ratio'], '{:.2f}')} | {med_range(r['per_core_per_s'], '{:.0f}')} | {mark} | "
            f"{statistics.median(r['wall_ns_per_op']) / 1e6:.3f} |"
        )
    floor = {
        "SEV-SNP": "one P-384 verify (the report signature)",
        "Nitro": "one P-384 verify (the COSE signature)",
        "TDX": "two P-256 verifies (quote, QE report)",
    }
    md += [
        "",
        "Where the cached figures stand against their floor, and up to which P-384 time the goal holds (the "
        "ratio carries over to a faster or slower core; absolute times do not):",
        "",
    ]
    for r in rows:
        if r["what"] != "after, cached":
            continue
        ratio = statistics.median(r["p384_ratio"])
        md.append(
            f"- {r['vendor']}: floor {floor[r['vendor']]}; {ratio:.2f} × P-384 per verification, so "
            f"{GOALS[r['vendor']]}/s holds while one P-384 verify takes at most "
            f"{1e3 / (GOALS[r['vendor']] * ratio):.2f} ms."
        )
    p384 = {side: [x / 1e6 for x in series(side, P384)] for side in ("before", "after")}
    p256 = [x / 1e6 for x in series("after", P256)]
    md += [
        "",
        f"Baselines: one P-384 verify {med_range(p384['after'], '{:.3f}')} ms CPU (after binary), "
        f"{med_range(p384['before'], '{:.3f}')} ms (before binary); one P-256 verify {med_range(p256, '{:.3f}')} ms.",
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "attestation.json").write_text(
        json.dumps(
            {
                "date": date,
                "go": go,
                "cpu": cpu_model(),
                "cores": os.cpu_count(),
                "load": load,
                "before": args.before,
                "before_rev": before_rev,
                "after_rev": after_rev,
                "dirty": dirty,
                "rounds": rounds,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    (RESULTS / "attestation.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
