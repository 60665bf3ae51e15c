"""Overlapped outer synchronization (docs/protocol/overlap.md): the arithmetic of the eager strategy and the
busy-fraction clock.

Eager (Kale, Douillard, Donchev 2025, one-step overlap): after computing its outer gradient δ_r for round r
from the committed weights θ_r, a trainer does not wait for θ_{r+1}. It applies δ_r to θ_r with the run's outer
step (Nesterov SGD, the same formula the syncer uses, with the trainer's own estimate of the outer momentum) and
runs round r+1's inner phase from that proxy p. When θ_{r+1} arrives, the submission for round r+1 is the inner
progress made since the proxy, p − p_after: transplanted onto θ_{r+1}, it is exactly the outer gradient the
syncer will apply to θ_{r+1}. The syncer's computation is unchanged; only what a trainer's submission is computed
from differs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

SYNC_BLOCKING, SYNC_EAGER = "blocking", "eager"
STRATEGIES = (SYNC_BLOCKING, SYNC_EAGER)


def strategy_of(spec: Mapping) -> str:
    """The spec's sync_strategy (wire.SyncStrategyRef): absent means blocking; anything else this trainer does
    not implement is refused with a ValueError (the node refuses such a spec at posting, so this only guards
    against a node of another version)."""
    if "sync_strategy" not in spec:
        return SYNC_BLOCKING
    v = spec["sync_strategy"]
    if v not in STRATEGIES:
        raise ValueError(f"sync_strategy {v!r} is not implemented by this trainer (want one of {list(STRATEGIES)})")
    return str(v)


def outer_direction(g: torch.Tensor, buf: torch.Tensor | None, momentum: float, nesterov: bool) -> tuple:
    """One outer SGD step's direction d and new momentum buffer for the aggregate g (PROTOCOL §6: first step
    buf = g, later buf = μ·buf + g; d = g + μ·buf with Nesterov, else buf)."""
    nb = g.clone() if buf is None else momentum * buf + g
    d = g + momentum * nb if nesterov else nb
    return d, nb


def proxy_weights(
    theta: Mapping[str, torch.Tensor],
    delta: Mapping[str, torch.Tensor],
    buf: Mapping[str, torch.Tensor],
    lr: float,
    momentum: float,
    nesterov: bool,
) -> dict[str, torch.Tensor]:
    """The eager proxy: θ − lr·d where d is the outer step's direction for the trainer's own outer gradient δ in
    place of the (not yet known) aggregate, with the trainer's momentum estimate ``buf`` (absent names: first
    step). f32, on the CPU; ``theta``'s dtype is not kept (the caller assigns into the model)."""
    out = {}
    for n, t in theta.items():
        d, _ = outer_direction(delta[n].float(), buf.get(n), momentum, nesterov)
        out[n] = t.float() - lr * d
    return out


def mirror_momentum(
    before: Mapping[str, torch.Tensor],
    after: Mapping[str, torch.Tensor],
    buf: dict[str, torch.Tensor],
    lr: float,
    momentum: float,
    nesterov: bool,
) -> None:
    """Updates the trainer's estimate ``buf`` of the syncer's outer momentum from one committed step
    θ_r → θ_{r+1} of one fragment (given as its tensors before and after). u = θ_r − θ_{r+1} = lr·d, and
    d = g + μ·(μ·buf + g) (Nesterov) or μ·buf + g, so g = (u/lr − μ²·buf)/(1+μ) (first step: u/(lr·(1+μ)))
    or buf' = u/lr. A fragment whose weights did not move (no quorum, rule failed) keeps its momentum, as the
    syncer's does."""
    if all(torch.equal(before[n], after[n]) for n in before):
        return
    for n in before:
        u = (before[n].float() - after[n].float()) / lr
        b = buf.get(n)
        if not nesterov:
            buf[n] = u
            continue
        g = u / (1 + momentum) if b is None else (u - momentum * momentum * b) / (1 + momentum)
        buf[n] = g if b is None else momentum * b + g


class BusyClock:
    """Busy fraction = compute time / wall time, per round: the wall time of a round is the time since the
    previous round was done (the first round: since its own start), so the waits between rounds count."""

    def __init__(self) -> None:
        self.mark: float | None = None

    def round_done(self, compute_s: float, started: float) -> tuple[float, float]:
        """Returns (wall_s, busy fraction) for a round whose train_round call started at ``started``."""
        now = time.monotonic()
        wall = now - (self.mark if self.mark is not None else started)
        self.mark = now
        return wall, (min(1.0, compute_s / wall) if wall > 0 else 0.0)
