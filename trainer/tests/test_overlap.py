"""sync_strategy (docs/protocol/overlap.md): the eager arithmetic against PyTorch's own outer optimizer, the
streaming schedule and merge, and eager and streaming runs against a real tenzro-node that seal, verify and
replay bit for bit."""

from __future__ import annotations

import pytest
import torch

from tenzro_trainer import config
from tenzro_trainer.loop import EXIT_OK
from tenzro_trainer.overlap import (
    BusyClock,
    check_overlap,
    default_overlap,
    mirror_momentum,
    mix,
    proxy_weights,
    rebase,
    strategy_of,
    sync_offsets,
)
from test_node import make_trainer, post_task, receipt_verifies_and_replays, run_all


def sgd_steps(theta: dict, grads: list[dict], lr: float, mu: float, nesterov: bool) -> list[dict]:
    """The syncer's outer step is torch SGD(lr, momentum, nesterov, dampening=0) (PROTOCOL §6)."""
    ps = {n: torch.nn.Parameter(t.clone()) for n, t in theta.items()}
    opt = torch.optim.SGD(list(ps.values()), lr=lr, momentum=mu, nesterov=nesterov)
    out = []
    for g in grads:
        for n, p in ps.items():
            p.grad = g[n].clone()
        opt.step()
        out.append({n: p.detach().clone() for n, p in ps.items()})
    return out


@pytest.mark.parametrize("nesterov", [True, False])
def test_proxy_and_momentum_mirror_match_the_outer_optimizer(nesterov):
    g = torch.Generator().manual_seed(1)
    theta = {"a": torch.randn(7, 3, generator=g), "b": torch.randn(5, generator=g)}
    grads = [{n: torch.randn(t.shape, generator=g) for n, t in theta.items()} for _ in range(4)]
    lr, mu = 0.7, 0.9
    seq = [theta] + sgd_steps(theta, grads, lr, mu, nesterov)
    buf: dict = {}
    for k, g_k in enumerate(grads):
        # The proxy with the aggregate in place of the trainer's own gradient is the syncer's next weights.
        prox = proxy_weights(seq[k], g_k, buf, lr, mu, nesterov)
        for n in theta:
            torch.testing.assert_close(prox[n], seq[k + 1][n], rtol=1e-5, atol=1e-5)
        mirror_momentum(seq[k], seq[k + 1], buf, lr, mu, nesterov)  # learns the momentum from the commit
    # A fragment whose weights did not move keeps its momentum.
    before = {n: b.clone() for n, b in buf.items()}
    mirror_momentum(seq[-1], {n: t.clone() for n, t in seq[-1].items()}, buf, lr, mu, nesterov)
    assert all(torch.equal(before[n], buf[n]) for n in buf)


def test_rebase_is_the_progress_since_the_proxy():
    """The submission for round r+1 is p − p_after; transplanted onto θ_{r+1} it is the outer gradient the
    syncer applies there: θ_{r+1} − (θ_{r+1} − (p − p_after)) = p − p_after, whatever θ_{r+1} is."""
    g = torch.Generator().manual_seed(2)
    p = torch.randn(64, generator=g)
    p_after = p - 0.01 * torch.randn(64, generator=g)
    theta_next = torch.randn(64, generator=g)
    transplanted = theta_next - (p - p_after)
    torch.testing.assert_close(theta_next - transplanted, p - p_after)


def test_strategy_of_refuses_unknown():
    assert strategy_of({}) == "blocking"
    assert strategy_of({"sync_strategy": "eager"}) == "eager"
    assert strategy_of({"sync_strategy": "streaming"}) == "streaming"
    for bad in ("lazy", "Eager", "Streaming", None, 1):
        with pytest.raises(ValueError, match="sync_strategy"):
            strategy_of({"sync_strategy": bad})


def test_busy_clock():
    c = BusyClock()
    wall, busy = c.round_done(0.0, started=c.mark or 0.0)
    assert wall > 0 and busy == 0.0
    wall, busy = c.round_done(1e9, started=0.0)  # measured from the previous round, capped at 1
    assert busy == 1.0


@pytest.mark.parametrize(
    "h,f,want",
    [
        (12, 4, [3, 6, 9, 12]),
        (12, 1, [12]),
        (10, 4, [3, 5, 8, 10]),
        (3, 2, [2, 3]),
        (2, 4, [1, 1, 2, 2]),  # H < F: fragments share offsets, never offset 0
        (1, 3, [1, 1, 1]),
    ],
)
def test_sync_offsets(h, f, want):
    got = sync_offsets(h, f)
    assert got == want
    assert got[-1] == h and all(1 <= a <= b <= h for a, b in zip(got, got[1:], strict=False))


def test_sync_offsets_refuse_empty_phases():
    for h, f in ((0, 2), (2, 0), (-1, 1)):
        with pytest.raises(ValueError, match="sync offsets"):
            sync_offsets(h, f)


@pytest.mark.parametrize("h,f,want", [(12, 4, 3), (12, 1, 11), (3, 2, 1), (2, 4, 1), (1, 2, 0), (24, 12, 2)])
def test_default_overlap_is_the_sync_spacing_below_a_phase(h, f, want):
    assert default_overlap(h, f) == want


def test_check_overlap():
    assert check_overlap(0, 4) == 0 and check_overlap(3, 4) == 3
    for bad in (4, 5, -1):
        with pytest.raises(ValueError, match="overlap_steps"):
            check_overlap(bad, 4)


def test_mix_replaces_or_blends_and_never_aliases():
    local = {"w": torch.full((3,), 2.0)}
    committed = {"w": torch.full((3,), 4.0, dtype=torch.bfloat16)}
    out = mix(local, committed, 0.0)
    assert torch.equal(out["w"], torch.full((3,), 4.0)) and out["w"].dtype == torch.float32
    out["w"].add_(1)  # the merged tensor is a copy: the committed weights (the next δ's base) stay as they are
    assert torch.equal(committed["w"].float(), torch.full((3,), 4.0))
    torch.testing.assert_close(mix(local, committed, 0.25)["w"], torch.full((3,), 0.25 * 2 + 0.75 * 4))
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            mix(local, committed, bad)


def test_rebase_keeps_the_progress_since_the_sync_point():
    """rebase: the commit plus the local progress since the sync point; the next outer gradient (commit − local
    at the next sync point) is then exactly the local progress between the two sync points."""
    g = torch.Generator().manual_seed(4)
    at_sync = {"w": torch.randn(8, generator=g)}
    local = {"w": at_sync["w"] - 0.1 * torch.randn(8, generator=g)}  # τ' steps after the sync point
    committed = {"w": torch.randn(8, generator=g, dtype=torch.float32).to(torch.bfloat16)}
    merged = rebase(local, at_sync, committed)["w"]
    torch.testing.assert_close(merged - committed["w"].float(), local["w"] - at_sync["w"])
    later = merged - 0.1 * torch.randn(8, generator=g)  # the rest of the phase, to the next sync point
    progress = (at_sync["w"] - local["w"]) + (merged - later)  # before the merge + after it
    torch.testing.assert_close(committed["w"].float() - later, progress)


def test_streaming_config():
    base = {"node_rpc": "http://127.0.0.1:1", "trainer_keypair": "k.json", "task_id": "t"}
    cfg = config.parse(base)
    assert cfg.stream_overlap_steps is None and cfg.stream_alpha == 0.0
    assert cfg.stream_merge == "mix"
    cfg = config.parse(dict(base, streaming={"overlap_steps": 2, "alpha": 0.5, "merge": "rebase"}))
    assert cfg.stream_overlap_steps == 2 and cfg.stream_alpha == 0.5 and cfg.stream_merge == "rebase"
    for bad, msg in (
        ({"overlap_steps": -1}, "overlap_steps"),
        ({"overlap_steps": 1.5}, "overlap_steps"),
        ({"overlap_steps": True}, "overlap_steps"),
        ({"alpha": 1.0}, "alpha"),
        ({"alpha": "x"}, "alpha"),
        ({"tau": 1}, "unknown streaming keys"),
        ({"merge": "average"}, "merge"),
        ([1], "mapping"),
    ):
        with pytest.raises(config.ConfigError, match=msg):
            config.parse(dict(base, streaming=bad))


@pytest.mark.parametrize(
    "compression,f,h,over",
    [
        (None, 2, 4, {}),
        ({"codec": "int4-block", "block": 64}, 3, 6, {"streaming": {"overlap_steps": 3, "alpha": 0.5}}),
        ({"codec": "int4-block", "block": 64}, 2, 5, {"streaming": {"overlap_steps": 4, "merge": "rebase"}}),
    ],
    ids=["f32-F2", "int4-F3-tau3-alpha", "int4-F2-tau4-rebase"],
)
def test_streaming_run_seals_verifies_and_replays(node, go_bins, tmp_path, compression, f, h, over):
    kw = {"compression": compression} if compression else {}
    rounds = 3
    c, keys, task = post_task(node, tmp_path, m=2, k=2, f=f, h=h, rounds=rounds, sync_strategy="streaming", **kw)
    trs = [make_trainer(node, task, key, i, tmp_path, **over) for i, key in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    run = c.get_run(task)
    assert run["status"] == "sealed"
    for key, tr in zip(keys, trs, strict=True):
        assert tr.strategy == "streaming"
        assert [st.round for st in tr.history] == list(range(rounds))
        assert all(st.accepted == f for st in tr.history), [st.rejected for st in tr.history]
        assert all(0 < st.busy <= 1 and st.wall_s > 0 and st.inner_s > 0 for st in tr.history)
        assert tr.metrics.busy._value.get() == tr.history[-1].busy
        assert run["trainer_metrics"][key.did]["accepted"] == rounds * f
        # Every commit but the last round's was merged into the local model mid-loop.
        assert sum(st.merged for st in tr.history) == (rounds - 1) * f, [st.merged for st in tr.history]
    # Every fragment of every round aggregated both trainers' outer gradients (none closed without one).
    transcript = c.call("tenzro_training_getTranscript", {"task_id": task})
    assert len(transcript) == rounds
    for commit in transcript:
        assert all(fc["status"] == "aggregated" and len(fc["inputs"]) == 2 for fc in commit["fragments"]), commit
    receipt_verifies_and_replays(node, go_bins, tmp_path, task)


@pytest.mark.parametrize("compression", [None, {"codec": "int4-block", "block": 64}], ids=["f32", "int4-block"])
def test_eager_run_seals_verifies_and_replays(node, go_bins, tmp_path, compression):
    kw = {"compression": compression} if compression else {}
    c, keys, task = post_task(node, tmp_path, m=2, k=2, f=2, h=3, rounds=3, sync_strategy="eager", **kw)
    trs = [make_trainer(node, task, key, i, tmp_path) for i, key in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    run = c.get_run(task)
    assert run["status"] == "sealed"
    for key, tr in zip(keys, trs, strict=True):
        assert tr.strategy == "eager"
        assert [st.round for st in tr.history] == [0, 1, 2]
        assert all(st.accepted == 2 for st in tr.history), [st.rejected for st in tr.history]
        # Rounds 1 and 2 submitted the progress of an inner phase run ahead from the proxy.
        assert [st.rebased for st in tr.history] == [False, True, True]
        # The last round has nothing to run ahead: its wall time is all upload and commit wait.
        assert [0 < st.busy <= 1 for st in tr.history] == [True, True, False], [st.busy for st in tr.history]
        assert all(st.wall_s > 0 for st in tr.history)
        assert tr.metrics.busy._value.get() == tr.history[-1].busy
        assert run["trainer_metrics"][key.did]["accepted"] == 3 * 2
    receipt_verifies_and_replays(node, go_bins, tmp_path, task)


def test_node_refuses_an_unknown_strategy(node, tmp_path):
    from tenzro_trainer.rpc import RpcError

    with pytest.raises(RpcError, match="sync_strategy"):
        post_task(node, tmp_path, m=1, k=1, f=1, h=1, rounds=1, sync_strategy="lazy")
