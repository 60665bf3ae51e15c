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
