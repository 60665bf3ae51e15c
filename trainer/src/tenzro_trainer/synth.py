"""KernelSynth with TSMixup: a synthetic pretraining corpus that does not run out.

KernelSynth (Ansari et al., 2024, "Chronos", Algorithm 2): draw j ~ U{1..J} kernels with replacement
from a bank of Gaussian-process kernels (constant, white noise, linear, RBF, rational quadratic,
periodic with the usual seasonal periods), fold them together with a random ``+`` or ``×`` each, and
sample one series of the GP prior with that kernel. TSMixup (same paper, Algorithm 1): a convex
combination, with Dirichlet(1.5) weights, of k ~ U{2..K} series each scaled by its mean absolute value.

``synth://kernelsynth/v1?seed=S[&max_kernels=J][&mixup=P][&eval=N]`` names one corpus. Every window
is a pure function of (generator version, seed, split, index) — ``window(ref, split, index, length)``
— so any node or evaluator regenerates any batch from its indices without holding anything:

* the random stream of a window is PCG64 seeded with the first 16 bytes of
  SHA-256(Canon("tenzro/train/dataset/kernelsynth/window/v1") ‖ U64(version) ‖ U64(seed) ‖
  Str(split) ‖ U64(index)); ``split`` is ``"train"`` (indices 0 … 2^63−1, unbounded) or ``"eval"``
  (indices 0 … eval−1, never used for training);
* the series has ``length`` = context_len + horizon points on the time grid t_i = i / 1024 (the
  periods are in points, as in Chronos' 1024-point draws), so longer windows are the same process.

The dataset hash of a synth ref (``dataset_hash`` in the spec) is SHA-256 over the canonical encoding of
the generator's definition: Canon("tenzro/train/dataset/synth/v1") ‖ Str(generator) ‖ U64(version) ‖
U64(seed) ‖ U64(max_kernels) ‖ U64(mixup in permille) ‖ U64(eval windows). The Go node computes the
same (``dataset.SynthHash``) and refuses a posting whose hash does not match its ref.

Reproducibility: the random draws are bit-identical on every machine (PCG64 and numpy's Generator on
the pinned numpy); the GP sample goes through LAPACK's Cholesky in float64 and is rounded to float32,
so two BLAS builds may differ in the last bit of a value (relative 1e-7), never in which series,
kernels, or mixture a window is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from .canon import Canon

GENERATOR = "kernelsynth"
VERSION = 1
DOMAIN_SYNTH = "tenzro/train/dataset/synth/v1"
DOMAIN_WINDOW = "tenzro/train/dataset/kernelsynth/window/v1"
SPLITS = ("train", "eval")
MAX_TRAIN_INDEX = (1 << 63) - 1
MAX_LENGTH = 1 << 16  # points per window (context + horizon): the Cholesky is O(L^3)
MAX_EVAL = 1 << 20
L_SYN = 1024.0  # time unit of the kernel bank (Chronos draws 1024 points)

# The kernel bank (Chronos' KernelSynth, sklearn's parameterizations on t in units of L_SYN points).
PERIODS = (24, 48, 96, 168, 336, 672, 7, 14, 30, 60, 365, 730, 4, 26, 52, 6, 12, 40, 10)
BANK: tuple[tuple[str, float], ...] = (
    (("const", 1.0),)
    + tuple(("white", s) for s in (0.1, 1.0))
    + tuple(("linear", c) for c in (0.0, 1.0, 10.0))
    + tuple(("rbf", ls) for ls in (0.1, 1.0, 10.0))
    + tuple(("rq", a) for a in (0.1, 1.0, 10.0))
    + tuple(("periodic", float(p)) for p in PERIODS)
)

_REF = re.compile(r"synth://kernelsynth/v([0-9]{1,6})(?:\?(.*))?", re.DOTALL)
_INT = re.compile(r"0|[1-9][0-9]{0,18}")


class SynthError(ValueError):
    pass


@dataclass(frozen=True)
class SynthRef:
    seed: int
    version: int = VERSION
    max_kernels: int = 5
    mixup_permille: int = 500  # probability a window is a TSMixup of 2..3 draws, in 1/1000
    eval_windows: int = 512

    def canonical(self) -> str:
        return (
            f"synth://kernelsynth/v{self.version}?seed={self.seed}&max_kernels={self.max_kernels}"
            f"&mixup={self.mixup_permille}&eval={self.eval_windows}"
        )

    def hash(self) -> bytes:
        c = Canon(DOMAIN_SYNTH).str(GENERATOR).u64(self.version).u64(self.seed)
        return c.u64(self.max_kernels).u64(self.mixup_permille).u64(self.eval_windows).sum()


def parse_ref(ref: str) -> SynthRef:
    """Strict: the only keys are seed (required), max_kernels (1..8), mixup (permille, 0..1000) and
    eval (1..2^20), each at most once, decimal without leading zeros."""
    if len(ref) > 256:
        raise SynthError("synth ref: longer than 256 characters")
    m = _REF.fullmatch(ref)
    if not m:
        raise SynthError(f"synth ref {ref!r}: want synth://kernelsynth/v1?seed=<n>[&max_kernels=J][&mixup=P][&eval=N]")
    version = int(m.group(1))
    if version != VERSION:
        raise SynthError(f"synth ref {ref!r}: generator version {version} unknown (have {VERSION})")
    vals: dict[str, int] = {}
    for part in m.group(2).split("&") if m.group(2) is not None else []:
        k, sep, v = part.partition("=")
        if not sep or k not in ("seed", "max_kernels", "mixup", "eval"):
            raise SynthError(f"synth ref {ref!r}: unknown parameter {k!r}")
        if k in vals:
            raise SynthError(f"synth ref {ref!r}: {k} given twice")
        if not _INT.fullmatch(v):
            raise SynthError(f"synth ref {ref!r}: {k}={v!r} is not a decimal integer")
        vals[k] = int(v)
    if "seed" not in vals:
        raise SynthError(f"synth ref {ref!r}: seed= is required")
    r = SynthRef(
        seed=vals["seed"],
        version=version,
        max_kernels=vals.get("max_kernels", 5),
        mixup_permille=vals.get("mixup", 500),
        eval_windows=vals.get("eval", 512),
    )
    if r.seed >= 1 << 64:
        raise SynthError(f"synth ref {ref!r}: seed out of range")
    if not 1 <= r.max_kernels <= 8:
        raise SynthError(f"synth ref {ref!r}: max_kernels must be 1..8")
    if not 0 <= r.mixup_permille <= 1000:
        raise SynthError(f"synth ref {ref!r}: mixup must be 0..1000 (permille)")
    if not 1 <= r.eval_windows <= MAX_EVAL:
        raise SynthError(f"synth ref {ref!r}: eval must be 1..{MAX_EVAL}")
    return r


def _rng(r: SynthRef, split: str, index: int) -> np.random.Generator:
    if split not in SPLITS:
        raise SynthError(f"split {split!r}: want one of {SPLITS}")
    limit = MAX_TRAIN_INDEX if split == "train" else r.eval_windows - 1
    if not 0 <= index <= limit:
        raise SynthError(f"{split} window {index} out of range 0..{limit}")
    h = Canon(DOMAIN_WINDOW).u64(r.version).u64(r.seed).str(split).u64(index).sum()
    return np.random.Generator(np.random.PCG64(int.from_bytes(h[:16], "big")))


def _stationary(name: str, p: float, lag: np.ndarray) -> np.ndarray:
    if name == "rbf":
        return np.exp(-(lag * lag) / (2.0 * p * p))
    if name == "rq":
        return (1.0 + (lag * lag) / (2.0 * p)) ** (-p)
    if name == "periodic":
        return np.exp(-2.0 * np.sin(math.pi * lag / (p / L_SYN)) ** 2)
    raise AssertionError(name)


def _kernel(name: str, p: float, t: np.ndarray, lags: np.ndarray) -> np.ndarray:
    """The kernel's covariance on the grid ``t``; ``lags`` is the |i-j| index matrix (stationary
    kernels are evaluated once per lag and gathered)."""
    n = len(t)
    if name == "const":
        return np.full((n, n), p)
    if name == "white":
        return np.eye(n) * p
    if name == "linear":
        return p * p + np.outer(t, t)
    return _stationary(name, p, t)[lags]


def _gp_sample(cov: np.ndarray, z: np.ndarray) -> np.ndarray:
    n = len(cov)
    scale = float(np.mean(np.diag(cov))) or 1.0
    jitter = 1e-6 * scale
    for _ in range(8):
        try:
            chol = np.linalg.cholesky(cov + jitter * np.eye(n))
            return chol @ z
        except np.linalg.LinAlgError:
            jitter *= 10.0
    w, v = np.linalg.eigh(cov)  # never reached for the bank's kernels; kept so a draw cannot fail
    return v @ (np.sqrt(np.clip(w, 0.0, None)) * z)


def kernelsynth(rng: np.random.Generator, length: int, max_kernels: int) -> np.ndarray:
    """One KernelSynth draw of ``length`` points (float64)."""
    t = np.arange(length, dtype=np.float64) / L_SYN
    i = np.arange(length)
    d = np.abs(i[:, None] - i[None, :])
    j = int(rng.integers(1, max_kernels + 1))
    picks = rng.integers(0, len(BANK), size=j)
    ops = rng.integers(0, 2, size=j)  # op i folds kernel i in: 0 = +, 1 = ×
    z = rng.standard_normal(length)
    cov = _kernel(*BANK[int(picks[0])], t, d)
    for i in range(1, j):
        k = _kernel(*BANK[int(picks[i])], t, d)
        cov = cov + k if ops[i] == 0 else cov * k
    return _gp_sample(cov, z)


def series(r: SynthRef, split: str, index: int, length: int) -> np.ndarray:
    """Window ``index`` of ``split``: ``length`` points (float64), a KernelSynth draw or, with
    probability mixup/1000, a TSMixup of 2..3 independent draws from the same random stream."""
    if not 2 <= length <= MAX_LENGTH:
        raise SynthError(f"window length {length} out of range 2..{MAX_LENGTH}")
    rng = _rng(r, split, index)
    if int(rng.integers(0, 1000)) >= r.mixup_permille:
        return kernelsynth(rng, length, r.max_kernels)
    k = int(rng.integers(2, 4))
    w = rng.dirichlet(np.full(k, 1.5))
    out = np.zeros(length)
    for i in range(k):
        s = kernelsynth(rng, length, r.max_kernels)
        out += w[i] * s / max(float(np.mean(np.abs(s))), 1e-8)
    return out
