"""Overlapped outer synchronization (docs/protocol/overlap.md): the arithmetic of the eager strategy, the
streaming schedule and merge, and the busy-fraction clock.

Eager (Kale, Douillard, Donchev 2025, one-step overlap): after computing its outer gradient δ_r for round r
from the committed weights θ_r, a trainer does not wait for θ_{r+1}. It applies δ_r to θ_r with the run's outer
step (Nesterov SGD, the same formula the syncer uses, with the trainer's own estimate of the outer momentum) and
runs round r+1's inner phase from that proxy p. When θ_{r+1} arrives, the submission for round r+1 is the inner
progress made since the proxy, p − p_after: transplanted onto θ_{r+1}, it is exactly the outer gradient the
syncer will apply to θ_{r+1}. The syncer's computation is unchanged; only what a trainer's submission is computed
from differs.

Streaming (Douillard et al. 2025): fragment f is synchronised at inner-step offset s_f of every phase
(``sync_offsets``); its submission for round r is θ_{r,f} − θ_f^local at step s_f of phase r, where θ_{r,f} are
the committed weights of fragment f the trainer merged last; the commit of round r, fragment f is merged into the
local model (``mix``) at the first step boundary after it arrives, and the trainer blocks for it after at most
τ steps (``default_overlap``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

SYNC_BLOCKING, SYNC_EAGER, SYNC_STREAMING = "blocking", "eager", "streaming"
STRATEGIES = (SYNC_BLOCKING, SYNC_EAGER, SYNC_STREAMING)


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


def sync_offsets(h: int, f: int) -> list[int]:
    """Streaming: the inner-step offset s_k = ⌈(k+1)·H/F⌉ (1 ≤ s_k ≤ H) of each fragment k in a phase of H steps:
    fragment k's outer gradient is taken after step s_k of the phase; the last fragment's at the phase's end (as
    under blocking). Non-decreasing; with H < F several fragments share an offset."""
    if h < 1 or f < 1:
        raise ValueError(f"sync offsets: want H ≥ 1 and F ≥ 1, got H={h}, F={f}")
    return [-(-(k + 1) * h // f) for k in range(f)]


def default_overlap(h: int, f: int) -> int:
    """Streaming: τ, the steps a fragment's commit may overlap compute before the trainer blocks for it. The
    default is the spacing of the sync points, ⌊H/F⌋ (at least 1), never more than H − 1: the commit of round r
    must be merged before the same fragment's next sync point (H steps later)."""
    return max(0, min(h - 1, max(1, h // f)))


def check_overlap(tau: int, h: int) -> int:
    """A configured τ: 0 ≤ τ ≤ H − 1 (τ = H would merge the commit at the very step the next outer gradient is
    taken, which would then be the committed weights minus themselves)."""
    if not 0 <= tau <= h - 1:
        raise ValueError(f"streaming.overlap_steps {tau}: want 0 ≤ τ ≤ H−1 = {h - 1}")
    return tau


def mix(
    local: Mapping[str, torch.Tensor], committed: Mapping[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """Streaming merge of one fragment: α·θ^local + (1−α)·θ^committed (f32). α = 0 replaces the local fragment
    with the commit (the default); the paper's mixing factor."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"streaming.alpha {alpha}: want 0 ≤ α < 1")
    if alpha == 0.0:
        return {n: committed[n].float().clone() for n in committed}
    return {n: alpha * local[n].float() + (1.0 - alpha) * committed[n].float() for n in committed}


def rebase(
    local: Mapping[str, torch.Tensor], at_sync: Mapping[str, torch.Tensor], committed: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Streaming merge ``rebase`` of one fragment: θ^committed + (θ^local − θ^local at the sync point), i.e. the
    local progress made since the fragment's outer gradient was taken, transplanted onto the commit (the
    trainer's own, not yet outer-stepped contribution is replaced by the aggregate). The next outer gradient then
    spans the H steps between consecutive sync points. f32."""
    return {n: committed[n].float() + (local[n].float() - at_sync[n].float()) for n in committed}


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
