"""The two-holder shard deal (scoring.md §3.1), recomputed from its text with the trainer's canon, gives the bytes
Go's machine.DealShards gives (machine/deal_test.go dealGolden): the rule is stated exactly enough to re-execute."""

from __future__ import annotations

import hashlib
import json

from tenzro_trainer.canon import Canon

DEAL_GOLDEN = "b9bcc5cbb6274ece2f1484649c0cf4bb40ff60d147bfbbc6201fac072e926332"


def deal(task: str, round_: int, anchor: bytes, active: list[str], shards: int) -> list[list[int]]:
    key = {d: Canon("tenzro/train/shard-deal/v1").str(task).u64(round_).bytes(anchor).str(d).sum() for d in active}
    ring = sorted(range(len(active)), key=lambda i: (key[active[i]], active[i]))
    out: list[list[int]] = [[] for _ in active]
    n = len(active)
    for s in range(shards):
        out[ring[s % n]].append(s)
        if n >= 2:
            out[ring[(s + 1) % n]].append(s)
    return out


def test_deal_matches_go() -> None:
    d = deal("t", 7, b"anchor", [f"did:t:{i:02d}" for i in range(12)], 12)
    raw = json.dumps(d, separators=(",", ":")).encode()
    assert hashlib.sha256(raw).hexdigest() == DEAL_GOLDEN, raw
    assert all(sum(s in x for x in d) == 2 for s in range(12))


def test_trainer_draws_with_its_did_only_under_two_holders() -> None:
    """The inner loop's batches (Trainer._batches): with ``shard_holders`` 2 the trainer's DID is in the draw's seed,
    without it the draw is the one every earlier run used; any other value is refused."""
    from types import SimpleNamespace

    import numpy as np
    import pytest

    from tenzro_trainer import data
    from tenzro_trainer.loop import Trainer

    n, gap = 4000, 79
    w = SimpleNamespace(n=n, shard_gap=gap, series_counts=None)

    def batches(spec: dict, did: str) -> list[np.ndarray]:
        me = SimpleNamespace(spec=spec, train_w=w, cfg=SimpleNamespace(task_id="t", inner=SimpleNamespace(batch_size=8)),
                             key=SimpleNamespace(did=did))  # fmt: skip
        return Trainer._batches(me, 2, [1, 3], 4)  # type: ignore[arg-type]

    base = {"trainer_count": 6}
    plain = data.round_batches(n, [1, 3], 6, "t", 2, 4, 8, gap)
    same = lambda a, b: all((x == y).all() for x, y in zip(a, b, strict=True))  # noqa: E731
    assert same(batches(base, "did:a"), plain) and same(batches(base, "did:b"), plain)
    a, b = batches({**base, "shard_holders": 2}, "did:a"), batches({**base, "shard_holders": 2}, "did:b")
    assert same(a, data.round_batches(n, [1, 3], 6, "t", 2, 4, 8, gap, None, "did:a"))
    assert not any((x == y).all() for x, y in zip(a, b, strict=True))
    with pytest.raises(data.DatasetError, match="shard_holders 3"):
        batches({**base, "shard_holders": 3}, "did:a")
