"""The seed's spec (DESIGN §10) as posted: param_count picks the 200M TimesFM-class preset, the node checks the
count against the initial weights, and the model trains a few steps on CPU on the synthetic corpus."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from conftest import NodeProc, free_port
from tenzro_trainer import config, data, models, sponsor, weights
from tenzro_trainer.identity import Key
from tenzro_trainer.loop import Trainer
from tenzro_trainer.metrics import Metrics
from tenzro_trainer.models.timesfm import REFERENCE_200M, TimesFMConfig
from tenzro_trainer.rpc import Client, RpcError

# DESIGN §10, verbatim but for the placeholders: sponsor_did/sponsor_address (a real key), dataset_ref and
# dataset_hash (the synthetic corpus, eval windows cut to 2), task_id (unique per test run).
SEED_SPEC = """{"task_id":"train-2026-04-25-timesfm-200m","sponsor_did":"did:tenzro:human:01J...","sponsor_address":"0x...",
 "architecture":{"family":"timesfm","param_count":200000000,"modality":"Timeseries","fragment_count":12,
 "dtype":"bf16","metadata":{"context_len":2048,"horizon":128}},"tier":"Open","aggregation":"Mean",
 "trainer_count":8,"quorum":6,"inner_steps":24,"max_rounds":1024,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://Qm...","dataset_hash":"0x...",
 "min_throughput":null,"created_at":1761350400}"""
SYNTH = "synth://kernelsynth/v1?seed=2026&eval=2"


def test_param_count_picks_the_preset_and_must_match():
    md = {"context_len": 2048, "horizon": 128}
    assert TimesFMConfig.from_metadata(md, 200_000_000) == REFERENCE_200M
    assert REFERENCE_200M.param_count() == 200_000_000
    # Without the count the shape alone gives the small default architecture (what the seed's spec built before).
    assert TimesFMConfig.from_metadata(md).param_count() == 42_944
    # Named fields win; then the count must be the built model's.
    with pytest.raises(ValueError, match=r"param_count 200,000,000 but family timesfm .* builds 24,032"):
        models.build("timesfm", models.tiny_metadata("timesfm"), param_count=200_000_000)
    m = models.build("timesfm", models.tiny_metadata("timesfm"), param_count=24_032)
    assert sum(p.numel() for p in m.parameters()) == 24_032
    for pre in models.PRESETS:
        assert pre.param_count() == sum(p.numel() for p in models.build("timesfm", pre.metadata()).parameters()) or (
            pre is REFERENCE_200M
        )


def test_node_refuses_a_param_count_the_weights_do_not_hold(node):
    c = Client(node.url)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**24)
    md = models.tiny_metadata("timesfm")
    init = weights.model_to_safetensors(models.build("timesfm", md))
    spec = sponsor.make_spec(f"pc-{time.time_ns()}", sp, metadata=md, fragments=1, trainers=1, quorum=1,
                             param_count=24_033, dataset_ref=SYNTH, dataset_hash=data.dataset_hash(SYNTH).hex())  # fmt: skip
    with pytest.raises(RpcError, match=r"param_count is 24033 but the initial weights hold 24032 parameters"):
        sponsor.post(c, sp, spec, init)
    spec["architecture"]["param_count"] = 24_032
    spec["dataset_hash"] = "11" * 32
    with pytest.raises(RpcError, match="is not the hash of synth://"):
        sponsor.post(c, sp, spec, init)
    spec["dataset_hash"] = data.dataset_hash(SYNTH).hex()
    assert sponsor.post(c, sp, spec, init)["status"] == "awaiting_enrollment"


@pytest.fixture
def big_node(go_bins, tmp_path):
    """A --dev node that takes the 200M model's 400 MB of bf16 initial weights in one PUT /blobs (the default
    --max-blob-bytes is 256 MiB, the largest payload request; initial weights may be up to 4 GiB)."""
    n = NodeProc(go_bins, tmp_path / "node", free_port(), extra=["--max-blob-bytes", str(1 << 30)])
    n.data_dir.mkdir()
    n.start()
    yield n
    n.stop()


def test_seed_spec_as_posted_builds_200m_and_trains_on_cpu(big_node, tmp_path):
    node = big_node
    try:
        import psutil

        if psutil.virtual_memory().available < 6 << 30:
            pytest.skip("needs ~6 GiB of free memory for a 200M model with AdamW on CPU")
    except ImportError:
        pass
    c = Client(node.url, timeout=600)
    sp = Key.generate("human")
    c.faucet(sp.did, 10**24)
    spec = json.loads(SEED_SPEC)
    spec.update(task_id=f"seed-{time.time_ns()}", sponsor_did=sp.did, sponsor_address="0x" + "ab" * 20,
                dataset_ref=SYNTH, dataset_hash="0x" + data.dataset_hash(SYNTH).hex())  # fmt: skip
    arch = spec["architecture"]
    m = models.build(arch["family"], arch["metadata"], seed=0, param_count=arch["param_count"])
    assert sum(p.numel() for p in m.parameters()) == 200_000_000
    init = weights.model_to_safetensors(m, arch["dtype"])  # bf16, as the spec says
    del m
    assert sponsor.param_count_of(init) == 200_000_000
    res = sponsor.post(c, sp, spec, init)
    del init
    assert res["status"] == "awaiting_enrollment"
    run = c.get_run(spec["task_id"])
    assert len(run["fragments"]) == 12
    assert all(t["dtype"] == "BF16" for fr in run["fragments"] for t in fr["tensors"])
    # One trainer of the eight, in process: the model comes from the node's committed initial weights, the
    # batches from the synthetic corpus by index; 2 inner steps of batch 1 (the spec's 24 at batch 32 is a GPU's).
    key = Key.generate("machine")
    key.save(tmp_path / "t.json")
    cfg = config.parse({"node_rpc": node.url, "trainer_keypair": str(tmp_path / "t.json"), "task_id": spec["task_id"],
                        "inner": {"batch_size": 1}, "device": "cpu", "dtype": "bf16", "metrics": {"port": 0},
                        "eval": False, "threads": 2, "gradient_checkpointing": True})  # fmt: skip
    tr = Trainer(cfg, key, client=c, metrics=Metrics())
    tr._ensure_task(run)
    assert sum(p.numel() for p in tr.model.parameters()) == 200_000_000
    assert tr.train_w.n is None and tr.eval_w.n == 2
    tr._load(tr._pull(run))
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters() if n == "layers.0.qkv.weight"}
    loss = tr._inner(0, [0], 2)
    assert np.isfinite(loss)
    after = dict(tr.model.named_parameters())["layers.0.qkv.weight"].detach()
    assert not torch.equal(before["layers.0.qkv.weight"], after)
