"""``tenzro-trainer``: run the reference trainer, make keys, and helpers the sponsor side uses."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    from .identity import Key


def _keygen(a: argparse.Namespace) -> int:
    from .identity import Key

    k = Key.generate(a.kind)
    if a.out == "-":
        sys.stdout.buffer.write(k.to_json())
        return 0
    try:
        k.save(a.out)
    except FileExistsError:
        print(f"tenzro-trainer keygen: {a.out} exists; refusing to overwrite", file=sys.stderr)
        return 1
    print(k.did)
    return 0


def _run(a: argparse.Namespace) -> int:
    from . import config, log
    from .identity import Key
    from .loop import Trainer
    from .metrics import Metrics

    try:
        cfg = config.load(a.config)
        key = Key.load(cfg.trainer_keypair)
    except (OSError, ValueError, config.ConfigError) as e:
        print(f"tenzro-trainer run: {e}", file=sys.stderr)
        return 2
    problem = device_problem(cfg.device)
    if problem:
        print(f"tenzro-trainer run: {problem}", file=sys.stderr)
        return 2
    log.setup(cfg.log_format)
    for w in cfg.warnings:
        logging.getLogger("tenzro_trainer").warning("config: %s", w)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second ^C: give up at once
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    m = Metrics()
    try:
        if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 serves metrics
            m.serve(cfg.metrics_port, cfg.metrics_host)
    except OSError as e:
        print(f"tenzro-trainer run: metrics {cfg.metrics_host}:{cfg.metrics_port}: {e}", file=sys.stderr)
        return 2
    try:
        t = Trainer(cfg, key, metrics=m, stop=stop)
    except ValueError as e:
        print(f"tenzro-trainer run: {e}", file=sys.stderr)
        return 2
    code = t.run()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Under torchrun the FSDP2 module still holds the (destroyed) gloo group's
        # worker threads; letting the interpreter run C++ static destructors then
        # aborts the process about one exit in three ("terminate called without an
        # active exception"), after all work is done. Everything is submitted and
        # the group is torn down by now: flush and leave without them.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot be used here, in one line naming the fix (None when it can)."""
    import torch

    d = device.strip().lower()
    if d in ("auto", "cpu"):
        return None
    if d.startswith("cuda"):
        idx = d.removeprefix("cuda").removeprefix(":")
        if idx and not idx.isdigit():
            return f"device {device!r}: want auto, cpu, cuda or cuda:N"
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            return f"device {device!r}: {why}; set device: cpu (or auto) in the config"
        n = torch.cuda.device_count()
        if idx and int(idx) >= n:
            return (
                f"device {device!r}: this machine has {n} CUDA GPU(s) (cuda:0..cuda:{n - 1}); fix device: in the config"
            )
        return None
    if d == "mps":
        return (
            None if torch.backends.mps.is_available() else f"device {device!r}: MPS is not available; set device: cpu"
        )
    return f"device {device!r}: want auto, cpu, cuda or cuda:N"


def _init_weights(a: argparse.Namespace) -> int:
    from . import models, weights

    md = json.loads(a.metadata) if a.metadata else models.tiny_metadata(a.family)
    m = models.build(a.family, md, seed=a.seed)
    Path(a.out).write_bytes(weights.model_to_safetensors(m, a.dtype))
    n = sum(p.numel() for p in m.parameters())
    print(json.dumps({"family": a.family, "params": n, "tensors": len(list(m.parameters())), "out": a.out}))
    return 0


KEY_HELP = (
    "key file that signs the node's ipfs:// corpus fetch (default $TENZRO_KEY, ~/.tenzro/key.json when it exists; "
    "none: unsigned, which only a --dev node takes); the fetch pins the corpus for, and charges it to, its DID"
)


def _signing_key(cmd: str, given: str) -> tuple[Key | None, int]:
    """The key named by --key or the default ($TENZRO_KEY, ~/.tenzro/key.json when it exists), or None;
    the second value is 2 (a usage error, already printed) when a named key file cannot be loaded."""
    from .identity import ENV_KEY, Key, default_key_path

    p = default_key_path(given)
    if p is None:
        return None, 0
    try:
        return Key.load(p), 0
    except (OSError, ValueError) as e:
        where = "--key" if given else f"default key (${ENV_KEY} or ~/.tenzro/key.json)"
        print(f"tenzro-trainer {cmd}: {where} {p}: {e}", file=sys.stderr)
        return None, 2


def _dataset_hash(a: argparse.Namespace) -> int:
    from . import data
    from .rpc import Client

    key, code = _signing_key("dataset-hash", a.key)
    if code:
        return code
    client = Client(a.node)
    src = data.Sources(
        node_url=a.node,
        ipfs_gateway=a.ipfs_gateway,
        sign=client.dataset_signer(key) if key is not None else None,
    )
    try:
        print(data.dataset_hash(a.ref, src).hex())
    except data.DatasetError as e:
        print(f"tenzro-trainer dataset-hash: {e}", file=sys.stderr)
        return 1
    return 0


def _eval(a: argparse.Namespace) -> int:
    from .data import DatasetError
    from .evaluate import eval_from_node
    from .rpc import Client, RpcError

    key, code = _signing_key("eval", a.key)
    if code:
        return code
    try:
        r, loss = eval_from_node(Client(a.rpc), a.task_id, key=key)
    except (DatasetError, RpcError) as err:
        print(f"tenzro-trainer eval: {err}", file=sys.stderr)
        return 1
    print(json.dumps({"round": r, "heldout_mse": loss}))
    return 0


def _export(a: argparse.Namespace) -> int:
    from .data import DatasetError
    from .onnx_export import ExportError, export
    from .rpc import Client, RpcError

    if not a.onnx:
        print("tenzro-trainer export: name the format: --onnx", file=sys.stderr)
        return 2
    key, code = _signing_key("export", a.key)
    if code:
        return code
    try:
        e = export(Client(a.rpc, timeout=600), a.task_id, a.dir, key=key)
    except (ExportError, RpcError, DatasetError) as err:
        print(f"tenzro-trainer export: {err}", file=sys.stderr)
        return 1
    print(json.dumps({k: e[k] for k in ("final_model_hash", "task_id", "family", "param_count", "onnx", "check")}))
    return 0


def _catalog(a: argparse.Namespace) -> int:
    from .onnx_export import catalog

    entries = catalog(a.dir)
    if a.json:
        print(json.dumps(entries, indent=1))
        return 0
    print(f"{'FINAL MODEL HASH':<66} {'FAMILY':<13} {'PARAMS':>12} {'C/H':>10}  TASK  (ok: ONNX file matches)")
    for e in entries:
        ch = f"{e['context_len']}/{e['horizon']}"
        print(f"{e['final_model_hash']:<66} {e['family']:<13} {e['param_count']:>12,} {ch:>10}  {e['task_id']}"
              f"{'' if e['ok'] else '  (ONNX FILE MISSING OR CHANGED)'}")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tenzro-trainer", description=__doc__)
    p.add_argument("--version", action="version", version=f"tenzro-trainer {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    k = sub.add_parser("keygen", help="write a new Ed25519 key file (mode 0600) and print its DID")
    k.add_argument("--out", default="trainer-key.json", help="path, or - for stdout")
    k.add_argument("--kind", default="machine", choices=["machine", "human"])
    k.set_defaults(fn=_keygen)

    r = sub.add_parser("run", help="train on a run until it seals")
    r.add_argument("--config", required=True)
    r.set_defaults(fn=_run)

    i = sub.add_parser("init-weights", help="deterministic initial weights of a catalog model (safetensors)")
    i.add_argument("--family", default="timesfm")
    i.add_argument("--metadata", default="", help="architecture.metadata as JSON (default: the tiny config)")
    i.add_argument("--seed", type=int, default=0)
    i.add_argument("--dtype", default="f32")
    i.add_argument("--out", required=True)
    i.set_defaults(fn=_init_weights)

    d = sub.add_parser("dataset-hash", help="print the dataset hash of a dataset_ref")
    d.add_argument("ref")
    d.add_argument("--node", default="http://127.0.0.1:8545", help="node HTTP address for ipfs:// refs")
    d.add_argument("--key", default="", help=KEY_HELP)
    d.add_argument("--ipfs-gateway", default=None, help="read ipfs:// refs through this IPFS gateway instead")
    d.set_defaults(fn=_dataset_hash)

    e = sub.add_parser("eval", help="held-out MSE of a run's committed weights")
    e.add_argument("--rpc", default="http://127.0.0.1:8545")
    e.add_argument("--task-id", required=True)
    e.add_argument("--key", default="", help=KEY_HELP)
    e.set_defaults(fn=_eval)

    x = sub.add_parser("export", help="export a sealed run's final model to the ONNX forecast catalog")
    x.add_argument("--onnx", action="store_true", help="ONNX (the only format)")
    x.add_argument("--rpc", default="http://127.0.0.1:8545")
    x.add_argument("--task-id", required=True)
    x.add_argument("--dir", default="catalog", help="catalog directory (default ./catalog)")
    x.add_argument("--key", default="", help=KEY_HELP)
    x.set_defaults(fn=_export)

    g = sub.add_parser("catalog", help="list the ONNX forecast catalog's models")
    g.add_argument("--dir", default="catalog")
    g.add_argument("--json", action="store_true")
    g.set_defaults(fn=_catalog)

    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
