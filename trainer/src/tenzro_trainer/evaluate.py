"""Held-out evaluation: mean squared error of the point forecast on normalized windows."""

from __future__ import annotations

import json

import numpy as np
import torch

from . import data, models, weights
from .rpc import Client


@torch.no_grad()
def heldout_mse(model: models.ForecastModel, w: data.Windows, device: str = "cpu", batch: int = 512) -> float:
    if len(w) == 0:
        return float("nan")
    was = model.training
    model.eval()
    tot, n = 0.0, 0
    for a in range(0, len(w), batch):
        x = torch.from_numpy(w.x[a : a + batch]).to(device)
        y = torch.from_numpy(w.y[a : a + batch]).to(device)
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
) -> tuple[data.Windows, data.Windows]:
    """Windows of the task's corpus (``corpus``: one already in memory, e.g. a decrypted Confidential
    dataset; else loaded from ``dataset_ref``, ``ipfs://`` through ``sources``); the dataset hash is
    checked either way."""
    md = metadata_of(spec)
    if corpus is None:
        corpus = data.load_corpus(spec["dataset_ref"], sources)
    if spec.get("dataset_hash"):
        data.check_hash(corpus, spec["dataset_hash"])
    return data.make_windows(
        corpus, int(md.get("context_len", 64)), int(md.get("horizon", 16)), int(md.get("stride", 1))
    )


def pull_model(client: Client, run: dict, model: models.ForecastModel | None = None) -> models.ForecastModel:
    """Loads every fragment's committed weights from the node into ``model`` (built from the spec
    when not given)."""
    spec = spec_of(run)
    if model is None:
        model = models.build(spec["architecture"]["family"], metadata_of(spec))
    for fr in run["fragments"]:
        w = client.get_weights(run["task_id"], fr["index"])
        weights.assign(model, weights.load_fragment(w["payload"], fr["tensors"], f"fragment {fr['index']}"))
    return model


def eval_from_node(client: Client, task_id: str, heldout: data.Windows | None = None) -> tuple[int, float]:
    run = client.get_run(task_id)
    if heldout is None:
        _, heldout = task_data(spec_of(run), sources=data.Sources(node_url=client.url))
    m = pull_model(client, run)
    return int(run["round"]), heldout_mse(m, heldout)


def mean_std(xs: list[float]) -> tuple[float, float]:
    a = np.asarray(xs, dtype=np.float64)
    return float(a.mean()), float(a.std())
