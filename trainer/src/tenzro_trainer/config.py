"""trainer.yaml: the seed's keys plus a few optional ones.

node_rpc: http://127.0.0.1:8545
trainer_did: did:tenzro:machine:z6Mk...
trainer_keypair: ./trainer-key.json     # tenzro-trainer keygen
task_id: train-...
inner: {optimizer: adamw, lr: 3.0e-4, weight_decay: 0.1, beta1: 0.9, beta2: 0.95,
        inner_steps: 24, batch_size: 32}
device: auto            # auto | cpu | cuda | cuda:N
dtype: auto             # autocast dtype: auto (bf16 on CUDA, none on CPU) | bf16 | fp32
gradient_checkpointing: false
compile: false          # torch.compile the model's training step (worth it on GPUs; off by default and in CI)
metrics: {port: 9101}   # 0 turns the Prometheus endpoint off (also accepted: metrics_port)
                        # or {addr: ":9101"} / {addr: "0.0.0.0:9101"} (the seed's form; an empty host
                        # binds every interface); port alone binds 127.0.0.1
# optional
stake: "100000000000000000"  # enrol with this stake (0.1 TNZO) when not enrolled yet (default: the run's
                             # min_stake, or DEFAULT_STAKE when the run names none)
threads: 0              # torch CPU threads (0: torch's default)
eval: true              # log held-out loss of the pulled weights each round
max_rounds: 0           # leave after this many rounds (0: until the run seals)
poll_interval: 0.5
log_format: json        # json | text
state_file: null        # default <trainer_keypair>.<task_id>.state.json (last round submitted for)
streaming: {overlap_steps: null, merge: mix, alpha: 0.0}  # sync_strategy streaming only: τ, the steps a
                        #   fragment's commit may overlap compute before the trainer blocks for it (null: ⌊H/F⌋, at
                        #   least 1, at most H−1); merge mix: α·local + (1−α)·commit (α 0: the commit replaces the
                        #   local fragment), or rebase: commit + the local progress since the sync point
attack: null            # benchmarks only (tenzro_trainer/freeride.py): {kind: zeros|noise_norm|copy|copy_hash|
                        #   copy_scaled|copy_noise|replay|cycle3|wrong_data|sign_flip|gaussian, victim: <did>, scale, sigma}
# the seed's peer-to-peer keys: accepted, never refused (see Config.warnings)
gossip_listen: /ip4/0.0.0.0/tcp/4002   # the libp2p listener is the trainer's node's (--listen-addr)
hivemind_initial_peers: []             # the node's --boot-nodes; this trainer reaches it over node_rpc
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

MAX_CONFIG = 1 << 20


class ConfigError(Exception):
    pass


@dataclass
class Inner:
    optimizer: str = "adamw"
    lr: float = 3e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    inner_steps: int | None = None  # the spec's inner_steps governs; a different value is warned about
    batch_size: int = 32


@dataclass
class Config:
    node_rpc: str
    trainer_keypair: str
    task_id: str
    trainer_did: str | None = None
    inner: Inner = field(default_factory=Inner)
    device: str = "auto"
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    metrics_port: int = 9101
    metrics_host: str = "127.0.0.1"
    compile: bool = False  # torch.compile the model (GPU runs; off by default)
    stake: str | None = None
    threads: int = 0
    eval: bool = True
    max_rounds: int = 0
    poll_interval: float = 0.5
    log_format: str = "json"
    attack: dict | None = None
    state_file: str | None = None
    # The seed's peer-to-peer keys. The reference trainer talks to the network
    # through its node (node_rpc): the node owns the libp2p listener and the
    # bootstrap peers, so these are kept and reported, not used here.
    gossip_listen: str | None = None
    hivemind_initial_peers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ipfs_gateway: str | None = None  # read ipfs:// datasets through this gateway instead of the node
    ipfs_node: str | None = None  # the node that fetches ipfs:// datasets (default: node_rpc)
    attestation: Any = None  # attestation.AttestConfig: Verified/Confidential tiers
    stream_overlap_steps: int | None = None  # streaming: τ (None: overlap.default_overlap(H, F))
    stream_alpha: float = 0.0  # streaming: the merge's mixing factor α in [0, 1)
    stream_merge: str = "mix"  # streaming: mix (α) | rebase


def _num(v: Any, what: str, kind: type) -> Any:
    try:
        return kind(v)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: want a {kind.__name__}, got {v!r}") from None


def parse(d: Any, base: Path | None = None) -> Config:
    if not isinstance(d, dict):
        raise ConfigError("config: want a YAML mapping at the top level")
    for k in ("node_rpc", "trainer_keypair", "task_id"):
        if not d.get(k):
            raise ConfigError(f"config: {k} is required")
    known = {
        "node_rpc", "trainer_did", "trainer_keypair", "task_id", "inner", "device", "dtype",
        "gradient_checkpointing", "metrics", "metrics_port", "stake", "threads", "eval",
        "max_rounds", "poll_interval", "log_format", "attack", "state_file", "attestation", "ipfs_gateway",
        "ipfs_node", "gossip_listen", "hivemind_initial_peers", "compile", "streaming",
    }  # fmt: skip
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(f"config: unknown keys {unknown}")
    inner_d = d.get("inner") or {}
    if not isinstance(inner_d, dict):
        raise ConfigError("config: inner must be a mapping")
    bad = sorted(set(inner_d) - {f for f in Inner.__dataclass_fields__})
    if bad:
        raise ConfigError(f"config: unknown inner keys {bad}")
    inner = Inner(
        optimizer=str(inner_d.get("optimizer", "adamw")).lower(),
        lr=_num(inner_d.get("lr", 3e-4), "inner.lr", float),
        weight_decay=_num(inner_d.get("weight_decay", 0.1), "inner.weight_decay", float),
        beta1=_num(inner_d.get("beta1", 0.9), "inner.beta1", float),
        beta2=_num(inner_d.get("beta2", 0.95), "inner.beta2", float),
        inner_steps=None
        if inner_d.get("inner_steps") is None
        else _num(inner_d["inner_steps"], "inner.inner_steps", int),
        batch_size=_num(inner_d.get("batch_size", 32), "inner.batch_size", int),
    )
    if inner.optimizer != "adamw":
        raise ConfigError(f"config: inner.optimizer {inner.optimizer!r}: only adamw is supported")
    if not (inner.lr > 0 and 0 <= inner.beta1 < 1 and 0 <= inner.beta2 < 1 and inner.batch_size > 0):
        raise ConfigError("config: inner: want lr > 0, betas in [0,1), batch_size > 0")
    metrics = d.get("metrics")
    port = d.get("metrics_port", 9101)
    host = "127.0.0.1"
    if isinstance(metrics, dict):
        bad = sorted(set(metrics) - {"port", "addr"})
        if bad:
            raise ConfigError(f"config: unknown metrics keys {bad} (have port, addr)")
        port = metrics.get("port", port)
        if metrics.get("addr") is not None:
            host, port = _addr(str(metrics["addr"]))
    elif isinstance(metrics, str) and ":" in metrics:
        host, port = _addr(metrics)
    elif metrics is not None:
        port = metrics
    keypair = Path(str(d["trainer_keypair"])).expanduser()
    if base is not None and not keypair.is_absolute():
        keypair = base / keypair
    cfg = Config(
        node_rpc=str(d["node_rpc"]),
        trainer_keypair=str(keypair),
        task_id=str(d["task_id"]),
        trainer_did=d.get("trainer_did"),
        inner=inner,
        device=str(d.get("device", "auto")),
        dtype=str(d.get("dtype", "auto")).lower(),
        gradient_checkpointing=bool(d.get("gradient_checkpointing", False)),
        metrics_port=_num(port, "metrics port", int),
        metrics_host=host,
        compile=bool(d.get("compile", False)),
        stake=None if d.get("stake") is None else str(d["stake"]),
        threads=_num(d.get("threads", 0), "threads", int),
        eval=bool(d.get("eval", True)),
        max_rounds=_num(d.get("max_rounds", 0), "max_rounds", int),
        poll_interval=_num(d.get("poll_interval", 0.5), "poll_interval", float),
        log_format=str(d.get("log_format", "json")),
        attack=d.get("attack"),
        state_file=None if d.get("state_file") is None else str(d["state_file"]),
        ipfs_gateway=None if d.get("ipfs_gateway") is None else str(d["ipfs_gateway"]),
        ipfs_node=None if d.get("ipfs_node") is None else str(d["ipfs_node"]),
    )
    _p2p_keys(d, cfg)
    _streaming(d.get("streaming"), cfg)
    for k in ("ipfs_gateway", "ipfs_node"):
        v = getattr(cfg, k)
        if v is not None and urlparse(v).scheme not in ("http", "https"):
            raise ConfigError(f"config: {k} {v!r}: want an http:// or https:// URL")
    from .attestation import parse_config as parse_attestation  # here: attestation imports ConfigError

    cfg.attestation = parse_attestation(d.get("attestation"))
    if cfg.dtype not in ("auto", "bf16", "fp32", "float32", "bfloat16"):
        raise ConfigError(f"config: dtype {cfg.dtype!r}: want auto, bf16 or fp32")
    if cfg.attack is not None:
        from .freeride import check as check_attack  # benchmarks only

        why = check_attack(cfg.attack)
        if why:
            raise ConfigError(f"config: {why}")
    return cfg


def _streaming(st: Any, cfg: Config) -> None:
    """The streaming options (used only when the run's sync_strategy is streaming)."""
    if st is None:
        return
    if not isinstance(st, dict):
        raise ConfigError("config: streaming must be a mapping {overlap_steps, merge, alpha}")
    bad = sorted(set(st) - {"overlap_steps", "merge", "alpha"})
    if bad:
        raise ConfigError(f"config: unknown streaming keys {bad} (have overlap_steps, merge, alpha)")
    merge = st.get("merge", "mix")
    if merge not in ("mix", "rebase"):
        raise ConfigError(f"config: streaming.merge {merge!r}: want mix or rebase")
    cfg.stream_merge = str(merge)
    tau = st.get("overlap_steps")
    if tau is not None:
        if isinstance(tau, bool) or not isinstance(tau, int) or tau < 0:
            raise ConfigError(f"config: streaming.overlap_steps {tau!r}: want an integer ≥ 0 or null")
        cfg.stream_overlap_steps = tau
    alpha = _num(st.get("alpha", 0.0), "streaming.alpha", float)
    if not 0.0 <= alpha < 1.0:
        raise ConfigError(f"config: streaming.alpha {alpha!r}: want 0 ≤ α < 1")
    cfg.stream_alpha = alpha


def _addr(a: str) -> tuple[str, int]:
    """ "host:port", ":port" (every interface, Go's convention) or "[v6]:port"."""
    host, sep, port = a.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536 or len(a) > 255:
        raise ConfigError(f"config: metrics.addr {a!r}: want host:port or :port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def _p2p_keys(d: dict, cfg: Config) -> None:
    """Accept the seed's gossip_listen and hivemind_initial_peers, warning
    about what they do here instead of refusing them."""
    gl = d.get("gossip_listen")
    if gl is not None:
        cfg.gossip_listen = str(gl)
        cfg.warnings.append(
            f"gossip_listen {cfg.gossip_listen!r}: this trainer reaches the network through its node "
            f"({cfg.node_rpc}); the libp2p listener is the node's: start it with "
            f"'tenzro-node --role light-client --listen-addr {cfg.gossip_listen}'"
        )
    peers = d.get("hivemind_initial_peers")
    if peers is None:
        return
    if isinstance(peers, str):
        peers = [peers]
    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        cfg.warnings.append(f"hivemind_initial_peers: want a list of multiaddrs, got {peers!r}: ignored")
        return
    cfg.hivemind_initial_peers = [p for p in peers if p.strip()]
    if cfg.hivemind_initial_peers:
        cfg.warnings.append(
            "hivemind_initial_peers: there is no hivemind DHT here; pass these peers to the node instead: "
            f"'tenzro-node --boot-nodes {','.join(cfg.hivemind_initial_peers)}'"
        )


def load(path: str | Path) -> Config:
    p = Path(path)
    if p.stat().st_size > MAX_CONFIG:
        raise ConfigError(f"{p}: larger than {MAX_CONFIG} bytes")
    try:
        d = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: {e}") from e
    return parse(d, base=p.parent)
