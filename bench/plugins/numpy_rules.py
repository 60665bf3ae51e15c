"""numpy versions of the built-in rules, timed on K x N float32 data.
Prints {rule: milliseconds} as JSON. Usage: numpy_rules.py K N"""
import json, sys, time
import numpy as np

k, n = int(sys.argv[1]), int(sys.argv[2])
x = np.random.default_rng(1).standard_normal((k, n), dtype=np.float32)


def timed(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1000


def krum(x, f=1):
    d = ((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1) if x.shape[1] < 1 << 16 else np.array(
        [[np.dot(a - b, a - b) for b in x] for a in x], dtype=np.float64)
    nb = max(1, len(x) - f - 2)
    s = np.sort(d, axis=1)[:, 1:nb + 1].sum(1)
    return x[int(np.argmin(s))]


def geomed(x, iters=4, nu=1e-6):
    z = x.mean(0, dtype=np.float64)
    for _ in range(iters):
        w = 1 / np.maximum(nu, np.sqrt(((x - z) ** 2).sum(1)))
        z = (w[:, None] * x).sum(0) / w.sum()
    return z


t = 2000 * k // 10000
res = {
    "Mean": timed(lambda: x.mean(0, dtype=np.float64).astype(np.float32)),
    "TrimmedMean{alpha_bps=2000}": timed(lambda: np.sort(x, 0)[t:k - t].mean(0, dtype=np.float64)),
    "CoordinateMedian": timed(lambda: np.median(x, 0)),
    "Krum{f=1}": timed(lambda: krum(x)),
    "GeometricMedian{iterations=4}": timed(lambda: geomed(x)),
}
print(json.dumps(res))
