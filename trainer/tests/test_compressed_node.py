"""Compressed outer gradients against a real tenzro-node: the trainers encode with the spec's
codec, the node decodes in Wasm, the run seals, its receipt verifies and replays."""

from __future__ import annotations

import pytest

from tenzro_trainer.loop import EXIT_OK
from test_node import make_trainer, post_task, receipt_verifies_and_replays, run_all


@pytest.mark.parametrize(
    "compression",
    [{"codec": "int4-block", "block": 64}, {"codec": "topk", "k": 0.05}],
    ids=["int4-block", "topk-ef"],
)
def test_compressed_run_seals_verifies_and_replays(node, go_bins, tmp_path, compression):
    c, keys, task = post_task(node, tmp_path, m=2, k=2, f=2, h=2, rounds=2, compression=compression)
    trs = [make_trainer(node, task, key, i, tmp_path) for i, key in enumerate(keys)]
    assert run_all(trs) == [EXIT_OK, EXIT_OK]
    run = c.get_run(task)
    assert run["status"] == "sealed"
    for tr in trs:
        assert tr.compressor is not None
        assert all(st.accepted == 2 for st in tr.history), [st.rejected for st in tr.history]
        sent, raw = sum(st.bytes_sent for st in tr.history), sum(st.raw_bytes for st in tr.history)
        assert 0 < sent * 4 < raw, (sent, raw)  # at least 4x fewer bytes than f32, headers included
        if compression["codec"] == "topk":  # the error-feedback residuals were persisted
            assert len(tr.compressor.residual) == 2
            assert (tmp_path / f"trainer{trs.index(tr)}.json.{task}.state.json.ef.safetensors").exists()
    rc = c.get_receipt(task)
    for commit in c.call("tenzro_training_getTranscript", {"task_id": task}):  # the receipt names it by hash
        for fc in commit["fragments"]:
            assert fc["status"] == "aggregated" and fc["codec"]["hash"] in rc["plugin_hashes"]
    receipt_verifies_and_replays(node, go_bins, tmp_path, task)
