"""The benchmark-only free riders (tenzro_trainer/freeride.py, bench/freeriders.py): each kind produces what it
claims, and the copiers and the replayer go through a real node like an honest trainer."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from tenzro_trainer import config, freeride, weights
from tenzro_trainer.binding import BindingError, bind, header
from tenzro_trainer.canon import content_hash
from tenzro_trainer.loop import EXIT_OK
from test_node import make_trainer, post_task, run_all

LAYOUT = [
    {"name": "a.weight", "dtype": "F32", "shape": [4, 3]},
    {"name": "b.bias", "dtype": "BF16", "shape": [5]},
]


def honest(seed: int = 0) -> bytes:
    g = torch.Generator().manual_seed(seed)
    return st_save(
        {
            "a.weight": torch.randn(4, 3, generator=g) * 0.01,
            "b.bias": (torch.randn(5, generator=g) * 0.02).to(torch.bfloat16),
        }
    )


def tensors(p: bytes) -> dict[str, torch.Tensor]:
    return {k: v.float() for k, v in st_load(p).items()}


def data_section(p: bytes) -> bytes:
    return p[8 + int.from_bytes(p[:8], "little") :]


@pytest.mark.parametrize(
    ("attack", "why"),
    [
        ({"kind": "zeros"}, None),
        ({"kind": "copy", "victim": "did:tenzro:machine:x"}, None),
        ({"kind": "copy_scaled", "victim": "did:tenzro:machine:x", "scale": 1.0001}, None),
        ({"kind": "copy"}, "needs victim"),
        ({"kind": "copy_hash", "victim": "not-a-did"}, "needs victim"),
        ({"kind": "nope"}, "attack.kind must be one of"),
        ({"kind": "zeros", "extra": 1}, "unknown keys"),
        ({"kind": "copy_noise", "victim": "did:x", "sigma": float("nan")}, "finite"),
        ("zeros", "mapping"),
    ],
)
def test_attack_config_is_checked(attack: object, why: str | None) -> None:
    got = freeride.check(attack)
    assert (got is None) if why is None else (why in (got or "")), got
    d = {"node_rpc": "http://127.0.0.1:1", "trainer_keypair": "k.json", "task_id": "t", "attack": attack}
    if why is None:
        assert config.parse(d).attack == attack
    else:
        with pytest.raises(config.ConfigError, match="attack"):
            config.parse(d)


def test_zeros_have_the_fragment_layout() -> None:
    t = st_load(freeride.zeros(LAYOUT))
    weights.check_layout(t, LAYOUT, "zeros")
    assert all(float(v.float().abs().sum()) == 0.0 for v in t.values())


def test_noise_has_the_honest_per_tensor_norm_and_nothing_else_in_common() -> None:
    h = honest()
    n = freeride.transform(h, LAYOUT, {"kind": "noise_norm"}, np.random.default_rng(1))
    th, tn = tensors(h), tensors(n)
    weights.check_layout(st_load(n), LAYOUT, "noise")
    for k in th:
        tol = 1e-5 if k == "a.weight" else 1e-2  # BF16 rounding of the noise
        assert math.isclose(float(tn[k].norm()), float(th[k].norm()), rel_tol=tol), k
        cos = float((tn[k] * th[k]).sum() / (tn[k].norm() * th[k].norm()))
        assert abs(cos) < 0.9, (k, cos)


def test_byte_copy_keeps_the_tensor_bytes_and_takes_the_copiers_binding() -> None:
    victim = bind(honest(), "did:tenzro:machine:victim", "t", 3, 1)
    with pytest.raises(BindingError):  # what an honest client refuses: signing another trainer's payload
        bind(victim, "did:tenzro:machine:copier", "t", 3, 1)
    mine = bind(freeride.unbind(victim), "did:tenzro:machine:copier", "t", 3, 1)
    assert data_section(mine) == data_section(victim)
    assert content_hash(mine) != content_hash(victim)
    assert header(mine)["__metadata__"]["tenzro.trainer"] == "did:tenzro:machine:copier"


def test_near_copies() -> None:
    h = honest(2)
    th = tensors(h)
    s = tensors(freeride.perturb(h, LAYOUT, {"kind": "copy_scaled", "scale": 1.0001}, np.random.default_rng(0)))
    assert torch.allclose(s["a.weight"], th["a.weight"] * 1.0001, rtol=1e-6, atol=0)
    z = tensors(freeride.perturb(h, LAYOUT, {"kind": "copy_noise", "sigma": 1e-4}, np.random.default_rng(0)))
    d = z["a.weight"] - th["a.weight"]
    rms = float(th["a.weight"].pow(2).mean().sqrt())
    assert 0 < float(d.pow(2).mean().sqrt()) < 1e-3 * rms  # small but not nothing


def test_trains_and_gaussian_windows() -> None:
    assert freeride.trains({"kind": "replay"}, True) and not freeride.trains({"kind": "replay"}, False)
    assert not freeride.trains({"kind": "zeros"}, True) and freeride.trains({"kind": "wrong_data"}, False)
    # cycle3 trains until it has stored freeride.CYCLE rounds, then only cycles through them
    assert all(freeride.trains({"kind": "cycle3"}, k == 0, k) for k in range(freeride.CYCLE))
    assert not freeride.trains({"kind": "cycle3"}, False, freeride.CYCLE)
    x, y = freeride.gaussian_batch((6, 64), (6, 16), np.random.default_rng(0))
    assert x.shape == (6, 64) and y.shape == (6, 16) and x.dtype == np.float32 and 0.5 < float(x.std()) < 1.5


def test_records_read_submissions_from_block_transactions() -> None:
    r = freeride.Records("127.0.0.1:1")
    assert r.comet == "http://127.0.0.1:1"
    sub = {"type": "tenzro_training_submitOuterGradient",
           "params": {"task_id": "t", "trainer_did": "did:v", "round": 2, "fragment_index": 1, "payload_hash": "ab"}}  # fmt: skip
    r._record(json.dumps(sub).encode())
    r._record(json.dumps({"type": "tenzro_ledger_faucet", "params": {}}).encode())
    r._record(b"\xff not json")
    sub["params"]["payload_hash"] = "cd"  # a later record (an equivocation) does not replace the first
    r._record(json.dumps(sub).encode())
    assert r.seen == {("t", "did:v", 2, 1): "ab"}


def test_free_riders_through_a_real_node(node, tmp_path) -> None:
    """An honest trainer, a byte copier of it, a copier by hash and a replayer on one run: the copy is recorded
    and named a copy of the honest input, the copy by hash is refused by the payload binding, and the replayer's
    round-1 input carries its round-0 tensors under a round-1 binding and is named a replay of round 0 (the stale
    rule, copies.md §6): rejected, stale_of_round 0."""
    c, keys, task = post_task(node, tmp_path, m=4, k=3, f=1, h=1, rounds=2, grace_window_ms=1500)
    victim = keys[0].did
    attacks = [None, {"kind": "copy", "victim": victim}, {"kind": "copy_hash", "victim": victim}, {"kind": "replay"}]
    trs = [
        make_trainer(node, task, key, i, tmp_path, **({"attack": a} if a else {}))
        for i, (key, a) in enumerate(zip(keys, attacks, strict=True))
    ]
    assert run_all(trs) == [EXIT_OK] * 4
    run = c.get_run(task)
    assert run["status"] == "sealed"
    transcript = c.call("tenzro_training_getTranscript", {"task_id": task})
    assert len(transcript) == 2
    by = {}
    for rc in transcript:
        for inp in rc["fragments"][0]["inputs"]:
            by[(rc["round"], inp["trainer_did"])] = inp
    for r in (0, 1):
        assert not by[(r, victim)].get("rejected")
        assert by[(r, keys[1].did)]["copy_of"] == victim
        assert (r, keys[2].did) not in by  # never recorded
    assert all("payload binding" in x for st in trs[2].history for x in st.rejected)
    assert sum(len(st.rejected) for st in trs[2].history) == 2
    raw0, raw1 = (freeride.fetch_blob(c, by[(r, keys[3].did)]["payload_hash"]) for r in (0, 1))  # GET /blobs
    assert data_section(raw0) == data_section(raw1)
    assert header(raw1)["__metadata__"]["tenzro.round"] == "1"
    assert "stale_of_round" not in by[(0, keys[3].did)] and not by[(0, keys[3].did)].get("rejected")
    assert by[(1, keys[3].did)]["stale_of_round"] == 0 and "replay" in by[(1, keys[3].did)]["rejected"]
    assert "stale_of_round" not in by[(1, victim)]  # an honest trainer's consecutive inputs are not replays
    assert trs[1].history[0].inner_s == 0.0 and trs[3].history[1].inner_s == 0.0  # no training
