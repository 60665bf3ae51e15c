"""Held-out evaluation: mean squared error of the point forecast on normalized windows."""

from __future__ import annotations

import json

import numpy as np
import torch

from . import data, models, weights
from .identity import Key
from .rpc import Client


@torch.no_grad()
def heldout_mse(model: models.ForecastModel, w: data.WindowSet, device: str = "cpu", batch: int = 512) -> float:
    if w.n is None:
        raise ValueError("held-out windows must be a finite set")
    if w.n == 0:
        return float("nan")
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for a in range(0, w.n, batch):
        xs, ys = w.get(np.arange(a, min(a + batch, w.n)))
        x = torch.from_numpy(xs).to(device)
        y = torch.from_numpy(ys).to(device)
        f = model.forecast(x).float()
        tot += float(((f - y) ** 2).sum())
        n += y.numel()
    model.train(was)
    return tot / n


def spec_of(run: dict) -> dict:
    s = run["task_spec"]
    return json.loads(s) if isinstance(s, str | bytes) else s


def metadata_of(spec: dict) -> dict:
    md = spec.get("architecture", {}).get("metadata") or {}
    return md if isinstance(md, dict) else {}


def task_data(
    spec: dict, corpus: list[data.Series] | None = None, sources: data.Sources | None = None
) -> tuple[data.WindowSet, data.WindowSet]:
    """Training and held-out windows of the task's corpus, cut on demand (``corpus``: one already in
    memory, e.g. a decrypted Confidential dataset; else ``dataset_ref``: synth:// generated,
    statsmodels:// loaded, file://, ipfs:// or https:// streamed to memory-mapped files). The dataset
    hash is checked either way before a window is used."""
    md = metadata_of(spec)
    c, h = int(md.get("context_len", 64)), int(md.get("horizon", 16))
    stride = int(md.get("stride", 1))
    ref = str(spec.get("dataset_ref", ""))
    want = spec.get("dataset_hash")
    if corpus is None and ref.startswith("synth://"):
        tr = data.SynthWindows(ref, c, h, "train")
        if want:
            data._check(tr.ref.hash(), want)
        return tr, data.SynthWindows(ref, c, h, "eval")
    owner = None
    if corpus is not None or ref.startswith("statsmodels://"):
        if corpus is None:
            corpus = data.load_corpus(ref, sources)
        if want:
            data.check_hash(corpus, want)
        arrays = [s.values for s in corpus]
    else:
        owner = data.open_corpus(ref, sources)
        if want:
            owner.check_hash(want)
        arrays = owner.series
    tr = data.SeriesWindows(arrays, c, h, stride, 0.2, "train")
    ev = data.SeriesWindows(arrays, c, h, stride, 0.2, "eval")
    if tr.n == 0:
        raise data.DatasetError(f"no training windows of length {c + h}: the series are too short")
    tr.owner = ev.owner = owner  # keeps the spill directory as long as the windows
    return tr, ev


def pull_model(client: Client, run: dict, model: models.ForecastModel | None = None) -> models.ForecastModel:
    """Loads every fragment's committed weights from the node into ``model`` (built from the spec
    when not given)."""
    spec = spec_of(run)
    if model is None:
        arch = spec["architecture"]
        model = models.build(arch["family"], metadata_of(spec), param_count=int(arch.get("param_count") or 0))
    for fr in run["fragments"]:
        w = client.get_weights(run["task_id"], fr["index"])
        weights.assign(model, weights.load_fragment(w["payload"], fr["tensors"], f"fragment {fr['index']}"))
    return model


def node_sources(client: Client, key: Key | None) -> data.Sources:
    """Reads ``ipfs://`` corpora through ``client``'s node, the fetch signed by ``key`` when given (a node off
    --dev refuses unsigned fetches; a signed one pins the corpus for, and charges it to, the key's DID)."""
    return data.Sources(node_url=client.url, sign=client.dataset_signer(key) if key is not None else None)


def eval_from_node(
    client: Client, task_id: str, heldout: data.WindowSet | None = None, key: Key | None = None
) -> tuple[int, float]:
    """The run's round and the held-out MSE of its committed weights; ``key`` signs the corpus fetch."""
    run = client.get_run(task_id)
    if heldout is None:
        _, heldout = task_data(spec_of(run), sources=node_sources(client, key))
    m = pull_model(client, run)
    return int(run["round"]), heldout_mse(m, heldout)


def mean_std(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=np.float64)
    return float(a.mean()), float(a.std())
