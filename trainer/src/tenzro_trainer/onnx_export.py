"""The ONNX forecast catalog: a sealed run's final model exported to ONNX, named by its receipt's final model hash.

``tenzro-trainer export --onnx --rpc URL --task-id T [--dir catalog]`` pulls the committed weights of a sealed
run from the node, checks that their model hash (PROTOCOL §5, BLAKE3 over the fragments' weight hashes) is the
receipt's ``final_model_hash``, exports the point forecaster (``forecast(context) -> [batch, horizon]``, batch
dynamic) with ``torch.onnx.export``, and runs the exported graph with onnxruntime on held-out windows of the
run's own corpus: the export is kept only when ``max |ort - torch| <= ATOL + RTOL * max |torch|`` on them.
Then ``<dir>/<final_model_hash>.onnx`` and ``<dir>/<final_model_hash>.json`` (what the model is, where it came
from, the check's numbers) are written. ``tenzro-trainer catalog [--dir catalog]`` lists the entries.

Inputs are windows normalized by their context's mean and standard deviation (``tenzro_trainer.data``); a
caller de-normalizes the forecast with the same two numbers.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from pathlib import Path

import numpy as np
import torch

from . import data
from .canon import model_hash
from .evaluate import metadata_of, node_sources, pull_model, spec_of, task_data
from .identity import Key
from .rpc import Client

ATOL, RTOL = 1e-4, 1e-4
OPSET = 17
CHECK_WINDOWS = 64
MAX_ENTRY = 1 << 20


class ExportError(Exception):
    pass


class _Forecaster(torch.nn.Module):
    def __init__(self, m: torch.nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        return self.m.forecast(context)


def to_onnx(model: torch.nn.Module, context_len: int) -> bytes:
    """The point forecaster as ONNX bytes (TorchScript-based exporter: no extra package needed to export)."""
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Forecaster(model.eval()), (torch.zeros(2, context_len),), buf,
            input_names=["context"], output_names=["forecast"],
            dynamic_axes={"context": {0: "batch"}, "forecast": {0: "batch"}}, opset_version=OPSET, dynamo=False,
        )  # fmt: skip
    return buf.getvalue()


def check(onnx_bytes: bytes, model: torch.nn.Module, x: np.ndarray) -> dict:
    """onnxruntime's forecasts of ``x`` against PyTorch's; raises ExportError past the tolerance."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ExportError("onnxruntime is not installed: pip install -e 'trainer[onnx]'") from e
    s = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    got = s.run(None, {"context": x.astype(np.float32)})[0]
    with torch.no_grad():
        want = model.eval().forecast(torch.from_numpy(x.astype(np.float32))).float().numpy()
    err = float(np.abs(got - want).max())
    bound = ATOL + RTOL * float(np.abs(want).max())
    if not err <= bound:
        raise ExportError(f"onnxruntime's forecasts differ from PyTorch's by {err:.3g} (bound {bound:.3g})")
    return {"windows": len(x), "max_abs_diff": err, "bound": bound, "atol": ATOL, "rtol": RTOL}


def export(
    client: Client, task_id: str, out_dir: str | Path, sources: data.Sources | None = None, key: Key | None = None
) -> dict:
    """Exports the sealed run's final model to ``out_dir``; the check windows come from the run's corpus,
    read through ``sources`` (default: ``client``'s node, the fetch signed by ``key`` when given)."""
    run = client.get_run(task_id)
    if run["status"] != "sealed":
        raise ExportError(f"run {task_id} is {run['status']}: only a sealed run's final model is exported")
    rc = client.get_receipt(task_id)
    final = str(rc["final_model_hash"]).removeprefix("0x")
    hashes = [bytes.fromhex(client.get_weights(task_id, fr["index"])["weights_hash"]) for fr in run["fragments"]]
    if model_hash(hashes).hex() != final:
        raise ExportError(f"the node's weights hash to {model_hash(hashes).hex()}, the receipt says {final}")
    spec = spec_of(run)
    md = metadata_of(spec)
    model = pull_model(client, run).float().eval()
    _, ev = task_data(spec, sources=sources or node_sources(client, key))
    if ev.n is None or ev.n == 0:
        raise ExportError("the run's corpus has no held-out windows to check the export on")
    x, _ = ev.get(np.arange(min(CHECK_WINDOWS, ev.n)))
    onnx_bytes = to_onnx(model, int(model.context_len))
    result = check(onnx_bytes, model, x)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    entry = {
        "final_model_hash": final,
        "task_id": task_id,
        "family": spec["architecture"]["family"],
        "metadata": md,
        "param_count": sum(p.numel() for p in model.parameters()),
        "context_len": int(model.context_len),
        "horizon": int(model.horizon),
        "dataset_ref": spec.get("dataset_ref"),
        "spec_hash": rc.get("spec_hash"),
        "rounds": rc.get("rounds"),
        "onnx": f"{final}.onnx",
        "onnx_sha256": hashlib.sha256(onnx_bytes).hexdigest(),
        "opset": OPSET,
        "input": "context [batch, context_len] float32, normalized by its own mean and std",
        "output": "forecast [batch, horizon] float32, in the same normalization",
        "check": result,
        "exported_at": int(time.time()),
    }
    (out / f"{final}.onnx").write_bytes(onnx_bytes)
    (out / f"{final}.json").write_text(json.dumps(entry, indent=1) + "\n")
    return entry


def catalog(out_dir: str | Path) -> list[dict]:
    """The entries of a catalog directory whose ONNX file is present and matches its recorded hash."""
    out = []
    for p in sorted(Path(out_dir).glob("*.json")):
        if p.stat().st_size > MAX_ENTRY:
            continue
        try:
            e = json.loads(p.read_text())
            f = p.parent / e["onnx"]
            e["ok"] = f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == e["onnx_sha256"]
        except (ValueError, KeyError, TypeError, OSError):
            continue
        out.append(e)
    return out
