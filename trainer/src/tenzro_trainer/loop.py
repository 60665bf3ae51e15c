"""The trainer's main loop (DESIGN §4, §9).

Per round (sync_strategy "blocking", the default): pull the committed weights of every fragment (the
model always comes from the syncer's commit), run H AdamW steps on the assigned shards, compute one
outer gradient θ_before − θ_after per fragment, sign it with the node's canonical bytes, submit it, and
wait for the round to change. Under "eager" (docs/protocol/overlap.md) the next round's inner phase
runs from a local proxy while a background thread uploads this round's outer gradients and waits for
the next round's weights; the next submission is the progress made since the proxy. Under "streaming" one
continuous inner loop synchronises fragment f after step s_f of each phase: its outer gradient goes to a
background thread that submits it once its round is open, and each fragment's commit is merged into the local
model mid-phase (StreamSync). Either way the
trainer reports its busy fraction (compute time / wall time per round). Node restarts (connection refused, 5xx) back off and resume:
outer gradients of a round that is still open are re-submitted, and ones of a round that moved on are
dropped. A refused submission is logged with the node's precise reason and never retried as is.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from . import data, freeride, models, weights
from .attestation import AttestationError, Attester, load_encrypted_corpus
from .canon import content_hash
from .codec import Codec, Compressor
from .config import Config
from .evaluate import heldout_mse, metadata_of, spec_of, task_data
from .identity import Key
from .log import Log
from .metrics import Metrics
from .overlap import (
    SYNC_BLOCKING,
    SYNC_EAGER,
    SYNC_STREAMING,
    BusyClock,
    check_overlap,
    default_overlap,
    mirror_momentum,
    mix,
    proxy_weights,
    rebase,
    strategy_of,
    sync_offsets,
)
from .rpc import Client, NodeUnavailable, RpcError

EXIT_OK, EXIT_CONFIG, EXIT_DATA, EXIT_EVICTED, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 2, 3, 4, 5, 130
DEFAULT_STAKE = "100000000000000000"  # attoTNZO (0.1 TNZO, above a network's default stake floor of 0.01), when the config names no stake and the run no min_stake


def enrol_stake(cfg_stake: str | None, spec: dict) -> str:
    """The stake to enrol with: the config's, else the run's min_stake, else DEFAULT_STAKE."""
    if cfg_stake is not None:
        return cfg_stake
    ms = str(spec.get("min_stake") or "").strip()
    return ms if ms.isdigit() and int(ms) > 0 else DEFAULT_STAKE


def permanent_refusal(e: RpcError) -> bool:
    """An enrolment refusal that asking again cannot change: the run is full, sealed or cancelled, the
    trainer was evicted, its funds or its attestation fall short, or the request itself is invalid (a
    stake below min_stake, a bad key). Anything else (a rate limit, a busy node, a race with our own
    earlier enrolment) is transient and retried with backoff."""
    if e.code in (-32602, -32002, -32004, -32006):
        return True
    return e.code == -32003 and e.mentions("is full", "evicted", "is sealed", "is cancelled", "settlement lines")


class Backoff:
    def __init__(self, stop: threading.Event, first: float = 0.25, cap: float = 8.0) -> None:
        self.stop, self.first, self.cap, self.cur = stop, first, cap, first

    def wait(self) -> None:
        self.stop.wait(self.cur)
        self.cur = min(self.cap, self.cur * 2)

    def reset(self) -> None:
        self.cur = self.first


@dataclass
class Ahead:
    """Eager: an inner phase already run for ``round`` from the proxy ``start`` (f32 CPU tensors by name)."""

    round: int
    start: dict[str, torch.Tensor]
    after: dict[str, torch.Tensor]
    loss: float


@dataclass
class RoundStats:
    round: int
    loss: float = float("nan")
    eval_loss: float = float("nan")
    inner_s: float = 0.0
    serialize_s: float = 0.0
    submit_s: float = 0.0
    bytes_sent: int = 0
    raw_bytes: int = 0  # what the same outer gradients weigh as f32 (equal to bytes_sent's values uncompressed)
    accepted: int = 0
    rejected: list[str] = field(default_factory=list)
    wall_s: float = 0.0  # since the previous round was done (the first: since this round's start)
    busy: float = 0.0  # inner-loop compute time run during wall_s / wall_s
    cpu_s: float = 0.0  # this process's CPU time (all threads) during wall_s
    rebased: bool = False  # eager: the submission is the progress of an inner phase run ahead from a proxy
    merged: int = 0  # streaming: fragment commits merged into the local model during this phase
    waited_s: float = 0.0  # streaming: time this phase blocked for a commit (τ steps passed without it)
    buffered: int = 0  # streaming: outer gradients of this round queued until the round opened


class Dist:
    """torch.distributed when launched by torchrun (WORLD_SIZE > 1): FSDP2 shards the model across
    the host's processes; rank 0 talks to the node and the others follow its commands."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if self.world > 1:
            import torch.distributed as dist

            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if torch.cuda.is_available():
                torch.cuda.set_device(self.local_rank)
            dist.init_process_group(backend)

    def bcast(self, obj: object) -> object:
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            # Every rank reaches this point before any tears gloo down: destroying
            # the group while a peer is still inside a collective aborts the process
            # at exit ("terminate called without an active exception").
            dist.barrier()
            dist.destroy_process_group()


class Trainer:
    def __init__(
        self,
        cfg: Config,
        key: Key,
        client: Client | None = None,
        metrics: Metrics | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        if cfg.trainer_did and cfg.trainer_did != key.did:
            raise ValueError(f"trainer_did {cfg.trainer_did} does not match the key file's DID {key.did}")
        self.cfg, self.key = cfg, key
        self.client = client or Client(cfg.node_rpc)
        self.metrics = metrics or Metrics()
        self.stop = stop or threading.Event()
        self.log = Log("tenzro_trainer.loop", trainer=key.did[-8:], task=cfg.task_id)
        self.dist = Dist()
        dev = cfg.device
        if dev == "auto":
            dev = f"cuda:{self.dist.local_rank}" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(dev)
        self.amp = None
        if (
            self.device.type == "cuda"
            and cfg.dtype in ("auto", "bf16", "bfloat16")
            or self.device.type == "cpu"
            and cfg.dtype in ("bf16", "bfloat16")
        ):
            self.amp = torch.bfloat16
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        self.model: models.ForecastModel | None = None
        self._loss = None  # the (possibly torch.compile'd) training objective, set per task
        self.opt: torch.optim.Optimizer | None = None
        self.train_w: data.WindowSet | None = None
        self.eval_w: data.WindowSet | None = None
        self.spec: dict = {}
        self.pending: dict[int, bytes] = {}
        self.pending_round: int | None = None
        self.pending_metrics: dict[str, float] | None = None  # signed with this round's submissions
        self.history: list[RoundStats] = []
        self.compressor: Compressor | None = None  # set when the run's spec names a codec
        self._rng = np.random.default_rng(int.from_bytes(key.public_key[:8], "big"))
        self.state_file = cfg.state_file or f"{cfg.trainer_keypair}.{cfg.task_id}.state.json"
        self.attester = Attester(cfg.attestation, cfg.node_rpc) if cfg.attestation else None
        self.strategy = SYNC_BLOCKING
        self.busy = BusyClock()
        self._cpu_mark: float | None = None
        self._cpu_start = 0.0
        # Eager state: the inner phase run ahead, the next round's weights fetched in the background, the
        # last committed weights seen and the trainer's estimate of the syncer's outer momentum.
        self.ahead: Ahead | None = None
        self.prefetched: tuple[int, dict[int, dict[str, torch.Tensor]]] | None = None
        self.committed: tuple[int, dict[int, dict[str, torch.Tensor]]] | None = None
        self.outer_buf: dict[str, torch.Tensor] = {}
        # benchmarks only (attack:): a replaying free rider's first payloads, a copier's view of the chain
        self._replay: dict[int, bytes] | None = None
        self._cycle: list[dict[int, bytes]] = []  # cycle3: its trained rounds' payloads
        self._cycled = 0  # cycle3: its free rounds so far
        self._records: freeride.Records | None = None

    # ------------------------------------------------------------------ attestation
    def _claim(self, run: dict, payload: bytes | None = None, r: int | None = None) -> dict | None:
        """Fresh evidence for the next enrolment (``payload`` None) or for the submission of ``payload`` for round
        ``r`` (its hash is in the evidence's binding) when the run's tier needs it."""
        tier = spec_of(run).get("tier", "Open")
        if tier == "Open":
            return None
        if self.attester is None:
            raise AttestationError(f"the run's tier is {tier}: set attestation: (enclave, gpu) in the config")
        if payload is None:
            return self.attester.claim(self.client, self.cfg.task_id, self.key.did)
        return self.attester.claim(self.client, self.cfg.task_id, self.key.did, content_hash(payload), round_=r)

    # ------------------------------------------------------------------ local state
    def _submitted_round(self) -> int | None:
        """The last round this trainer began submitting for (survives a trainer restart, so a
        restarted trainer never sends a second, different payload for a round: the node would
        treat that as equivocation and slash the stake)."""
        try:
            with open(self.state_file) as f:
                st = json.load(f)
        except (OSError, ValueError):
            return None
        return int(st["round"]) if st.get("task_id") == self.cfg.task_id and "round" in st else None

    def _mark_submitting(self, r: int) -> None:
        tmp = f"{self.state_file}.tmp"
        with open(tmp, "w") as f:
            json.dump({"task_id": self.cfg.task_id, "round": r}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)

    # ------------------------------------------------------------------ setup per task
    def _ensure_task(self, run: dict) -> None:
        if self.model is not None:
            return
        spec = self.spec = spec_of(run)
        self.strategy = strategy_of(spec)  # ValueError for a strategy this trainer lacks
        if self.strategy in (SYNC_EAGER, SYNC_STREAMING) and self.dist.world > 1:
            raise ValueError(
                f"sync_strategy {self.strategy}: this trainer runs it in a single process only (WORLD_SIZE=1)"
            )
        if self.strategy == SYNC_STREAMING and self.cfg.attack:
            raise ValueError("sync_strategy streaming: the benchmark attacks (attack:) run under blocking only")
        fam = spec["architecture"]["family"]
        self.model = models.build(fam, metadata_of(spec), param_count=int(spec["architecture"].get("param_count") or 0))
        names = {t["name"] for fr in run["fragments"] for t in fr["tensors"]}
        params = set(weights.parameters(self.model))
        if names != params:
            raise weights.FragmentError(
                f"the run's fragments do not cover the model: missing {sorted(params - names)[:5]}, "
                f"unknown {sorted(names - params)[:5]}"
            )
        want = str(spec["architecture"].get("dtype", "")).upper().replace("FP32", "F32").replace("BFLOAT16", "BF16")
        have = {t["dtype"] for fr in run["fragments"] for t in fr["tensors"]}
        if want in ("F32", "BF16") and have != {want}:
            self.log.warning("the run's weights are not in the spec's dtype; payloads follow the weights",
                             spec_dtype=want, weights_dtype=sorted(have))  # fmt: skip
        self.model.set_gradient_checkpointing(self.cfg.gradient_checkpointing)
        self.model.to(self.device)
        # torch.compile (config compile: true): the training objective is compiled once per task; the
        # parameters stay the module's, so pulling, assigning and FSDP see the same tensors.
        self._loss = torch.compile(self.model.loss) if self.cfg.compile else self.model.loss
        if self.dist.world > 1:
            from torch.distributed.fsdp import fully_shard

            for m in self.model.modules():
                if m is not self.model and isinstance(m, torch.nn.ModuleList):
                    for layer in m:
                        fully_shard(layer)
            fully_shard(self.model)
        t0 = time.monotonic()
        # The node fetch of an ipfs:// corpus is signed with the trainer's key for the run's chain (a node off
        # --dev refuses unsigned fetches; the fetch pins the corpus for, and charges it to, this DID).
        sources = data.Sources(
            node_url=self.cfg.ipfs_node or self.cfg.node_rpc,
            ipfs_gateway=self.cfg.ipfs_gateway,
            sign=lambda op, cid: self.client.dataset_request(self.key, op, cid),
        )
        corpus = None
        if spec.get("tier") == "Confidential":
            if self.attester is None:
                raise AttestationError("the run's tier is Confidential: set attestation: in the config")
            key = self.attester.dataset_key(self.cfg.task_id)  # from a pipe; never written anywhere
            corpus = load_encrypted_corpus(spec["dataset_ref"], key, self.cfg.task_id, sources)
            del key
        self.train_w, self.eval_w = task_data(spec, corpus, sources)  # raises DatasetError on a hash mismatch
        self.log.info(
            "task ready", family=fam, params=sum(p.numel() for p in params_of(self.model)),
            train_windows=self.train_w.n or "unbounded", heldout_windows=self.eval_w.n,
            dataset_hash_checked=bool(spec.get("dataset_hash")), device=str(self.device),
            amp=str(self.amp), world=self.dist.world, load_s=round(time.monotonic() - t0, 3),
        )  # fmt: skip
        inner = self.cfg.inner
        if inner.inner_steps is not None and inner.inner_steps != int(spec["inner_steps"]):
            self.log.warning("inner.inner_steps differs from the spec; the spec governs",
                             config=inner.inner_steps, spec=spec["inner_steps"])  # fmt: skip
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=inner.lr, betas=(inner.beta1, inner.beta2), weight_decay=inner.weight_decay
        )
        codec = Codec.from_spec(spec)  # raises CodecError (a ValueError) for a codec this trainer lacks
        if codec is not None:
            # Error-feedback residuals live beside the state file, so a restart keeps them.
            self.compressor = Compressor(codec, f"{self.state_file}.ef.safetensors")
            self.log.info("compressed outer gradients", codec=codec.name, params=codec.params,
                          error_feedback=codec.error_feedback, residuals=len(self.compressor.residual))  # fmt: skip

    # ------------------------------------------------------------------ weights
    def _pull(self, run: dict) -> dict[int, dict[str, torch.Tensor]]:
        out = {}
        r = int(run["round"])
        for fr in run["fragments"]:
            w = self.client.get_weights(self.cfg.task_id, fr["index"])
            if int(w.get("round", r)) != r:
                self.log.warning("weights are from another round", fragment=fr["index"], weights_round=w.get("round"),
                                 round=r)  # fmt: skip
            out[fr["index"]] = weights.load_fragment(w["payload"], fr["tensors"], f"fragment {fr['index']}")
        return out

    def _load(self, frags: dict[int, dict[str, torch.Tensor]]) -> None:
        full = {n: t for f in frags.values() for n, t in f.items()}
        if self.dist.world > 1:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            sd = {n: t.float() for n, t in full.items()} if self.dist.rank == 0 else {}
            set_model_state_dict(
                self.model, sd, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
            )
        else:
            weights.assign(self.model, full)

    def _after(self) -> dict[str, torch.Tensor]:
        if self.dist.world > 1:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {n: p.detach().to("cpu") for n, p in self.model.named_parameters()}

    # ------------------------------------------------------------------ inner loop
    def _batches(self, r: int, shards: list[int], steps: int) -> list[np.ndarray]:
        assert self.train_w is not None
        shard_count = int(self.spec.get("shard_count") or 0) or int(self.spec["trainer_count"])
        counts = None
        split = self.spec.get("shard_split")
        if split not in (None, "series"):  # the node refuses such a spec at posting (wire.TaskSpec.Validate)
            raise data.DatasetError(f"shard_split {split!r}: want absent or 'series'")
        if split == "series":  # scoring.md §3: every shard a time block of every long series
            if self.train_w.series_counts is None:
                raise data.DatasetError('shard_split "series" needs a finite corpus of series')
            counts = self.train_w.series_counts
        holders = self.spec.get("shard_holders")
        if holders not in (None, 2):  # refused at posting too (wire.TaskSpec.Validate)
            raise data.DatasetError(f"shard_holders {holders!r}: want absent or 2")
        # scoring.md §3.1: with two holders per shard each draws its own batches (its DID in the seed)
        trainer = self.key.did if holders == 2 else ""
        return data.round_batches(
            self.train_w.n, shards, shard_count, self.cfg.task_id, r, steps, self.cfg.inner.batch_size,
            self.train_w.shard_gap, counts, trainer,
        )  # fmt: skip

    def _step(self, idx: np.ndarray) -> torch.Tensor:
        """One inner AdamW step on the windows ``idx``; returns the loss, detached and not read (no host sync)."""
        assert self.model is not None and self.opt is not None and self.train_w is not None
        if self.stop.is_set():
            raise KeyboardInterrupt
        if self.dist.world > 1:
            idx = idx[self.dist.rank :: self.dist.world]
        if self.cfg.attack and self.cfg.attack["kind"] == "wrong_data":  # benchmarks only
            md = metadata_of(self.spec)
            xs, ys = freeride.gaussian_batch((len(idx), int(md["context_len"])), (len(idx), int(md["horizon"])),
                                             self._rng)  # fmt: skip
        else:
            xs, ys = self.train_w.get(idx)
        x, y = torch.from_numpy(xs), torch.from_numpy(ys)
        if self.device.type == "cuda":  # page-locked, so the copies below are asynchronous with the host
            x, y = x.pin_memory(), y.pin_memory()
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            loss = (self._loss or self.model.loss)(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.metrics.steps.inc()
        return loss.detach()

    def _inner(self, r: int, shards: list[int], steps: int) -> float:
        assert self.model is not None
        batches = self._batches(r, shards, steps)
        self.model.train()
        last: torch.Tensor | None = None
        for idx in batches:
            last = self._step(idx)  # no host sync in the loop: read once, at the end of the phase
        out = float(last) if last is not None else float("nan")
        self.metrics.loss.set(out)
        return out

    def _attack(self, payload: bytes, layout: list[dict]) -> bytes:
        """Benchmarks only (``attack:``, tenzro_trainer.freeride): turn an honest outer gradient into a Byzantine
        one."""
        return freeride.transform(payload, layout, self.cfg.attack or {}, self._rng)

    def _free_ride(self, run: dict, r: int, st: RoundStats) -> None:
        """Benchmarks only: a free rider's round without training (zeros, copies of a victim, its first round's
        payloads replayed). Fills ``self.pending``; ``copy_hash`` submits here (it uploads nothing)."""
        a = self.cfg.attack or {}
        kind = a["kind"]
        for fr in run["fragments"]:
            f, layout = int(fr["index"]), fr["tensors"]
            if kind == "zeros":
                self.pending[f] = weights.bind(freeride.zeros(layout), self.key.did, self.cfg.task_id, r, f)
            elif kind == "replay":
                assert self._replay is not None  # set by its first (trained) round
                self.pending[f] = weights.bind(self._replay[f], self.key.did, self.cfg.task_id, r, f)
            elif kind == "cycle3":
                old = self._cycle[self._cycled % freeride.CYCLE]  # filled by its trained rounds
                self.pending[f] = weights.bind(old[f], self.key.did, self.cfg.task_id, r, f)
            else:
                if self._records is None:
                    self._records = freeride.Records.of_node(self.client)

                def still_open() -> bool:
                    try:
                        now = self.client.get_run(self.cfg.task_id)
                    except (NodeUnavailable, RpcError):
                        return True
                    return int(now["round"]) == r and now["status"] == "running"

                ph = self._records.wait(self.cfg.task_id, str(a["victim"]), r, f, still_open,
                                        float(a.get("wait_s", 300)), self.stop.is_set)  # fmt: skip
                if ph is None:
                    st.rejected.append(f"fragment {f}: no record of the victim")
                    self.log.warning("free rider: no victim record", round=r, fragment=f)
                    continue
                if kind == "copy_hash":
                    self.metrics.submitted.inc()
                    try:
                        freeride.submit_by_hash(self.client, self.key, self.cfg.task_id, r, f, ph)
                        st.accepted += 1
                    except RpcError as e:
                        self.metrics.rejected.inc()
                        st.rejected.append(f"fragment {f}: {e.message}")
                        self.log.warning("submission refused", round=r, fragment=f, code=e.code, reason=e.message)
                    continue
                victim = freeride.fetch_blob(self.client, ph)
                p = freeride.unbind(victim) if kind == "copy" else freeride.perturb(victim, layout, a, self._rng)
                self.pending[f] = weights.bind(p, self.key.did, self.cfg.task_id, r, f)
        if kind == "cycle3":
            self._cycled += 1

    def _reported(self, st: RoundStats, steps: int) -> dict[str, float]:
        """The signed metrics map sent with this round's submissions (the node's dashboard plots it)."""
        m = {
            "train_loss": st.loss,
            "eval_loss": st.eval_loss,
            "samples": float(steps * self.cfg.inner.batch_size),
            "step_time_ms": 1000.0 * st.inner_s / max(steps, 1),
        }
        return {k: float(v) for k, v in m.items() if math.isfinite(v)}

    # ------------------------------------------------------------------ one round
    def train_round(self, run: dict, shards: list[int]) -> RoundStats:
        if self._cpu_mark is None:
            self._cpu_start = time.process_time()
        if self.strategy == SYNC_EAGER:
            return self._train_round_eager(run, shards)
        if self.strategy == SYNC_STREAMING:
            return self._train_streaming(run, shards)
        started = time.monotonic()
        r = int(run["round"])
        st = RoundStats(round=r)
        self.metrics.round.set(r)
        steps = int(self.spec["inner_steps"])
        fresh = False  # payloads computed in this call (not a re-submission)
        if (
            self.pending_round != r
            and self.cfg.attack
            and not freeride.trains(self.cfg.attack, self._replay is None, len(self._cycle))
        ):
            self.pending, self.pending_round = {}, None
            self._free_ride(run, r, st)
            self.pending_round = r
            self.pending_metrics = {}
            fresh = True
        elif self.pending_round != r:
            self.pending, self.pending_round = {}, None
            frags = self._pull(run) if self.dist.rank == 0 else {}
            self._load(frags)
            if self.cfg.eval and self.dist.rank == 0 and self.dist.world == 1:
                st.eval_loss = heldout_mse(self.model, self.eval_w, str(self.device))
                self.metrics.eval_loss.set(st.eval_loss)
            t0 = time.monotonic()
            st.loss = self._inner(r, shards, steps)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            st.inner_s = time.monotonic() - t0
            after = self._after()
            if self.dist.rank != 0:
                return st
            t0 = time.monotonic()
            replay: dict[int, bytes] = {}
            for fr in run["fragments"]:
                if self.compressor is not None:
                    p = self.compressor.encode_fragment(fr["index"], frags[fr["index"]], after, fr["tensors"])
                else:
                    p = weights.outer_gradient(frags[fr["index"]], after, fr["tensors"])
                    if self.cfg.attack:
                        kind = self.cfg.attack["kind"]
                        if (kind == "replay" and self._replay is None) or kind == "cycle3":
                            replay[fr["index"]] = p
                        p = self._attack(p, fr["tensors"])
                # Bound to this trainer, task, round and fragment (safetensors.md §6) before anything hashes it:
                # the evidence of Verified runs binds the hash of exactly these bytes.
                self.pending[fr["index"]] = weights.bind(p, self.key.did, self.cfg.task_id, r, fr["index"])
            if replay and self.cfg.attack and self.cfg.attack["kind"] == "cycle3":
                self._cycle.append(replay)
            elif replay:
                self._replay = replay
            self.pending_round = r
            self.pending_metrics = self._reported(st, steps)
            fresh = True
            st.serialize_s = time.monotonic() - t0
        else:
            self.log.info("re-submitting after a node restart", round=r, fragments=sorted(self.pending))
        t0 = time.monotonic()
        rpc0 = self.client.bytes_sent
        self._mark_submitting(r)
        if fresh and self.compressor is not None:
            # After the round is marked (a restart skips it and keeps the old residuals, consistent
            # with sending nothing) and before anything is sent (the new residuals match what was).
            self.compressor.save()
        for f in sorted(self.pending):
            p = self.pending[f]
            self.metrics.submitted.inc()
            try:
                res = self.client.submit(
                    self.key,
                    self.cfg.task_id,
                    r,
                    f,
                    p,
                    attestation=self._claim(run, p, r),
                    metrics=self.pending_metrics,
                )
            except RpcError as e:
                self.metrics.rejected.inc()
                del self.pending[f]
                st.rejected.append(f"fragment {f}: {e.message}")
                self.log.warning("submission refused", round=r, fragment=f, code=e.code, reason=e.message)
                continue
            del self.pending[f]
            st.bytes_sent += len(p)
            st.raw_bytes += 4 * int(next(fr["n"] for fr in run["fragments"] if fr["index"] == f))
            self.metrics.bytes_sent.inc(len(p))
            if res.get("accepted", True):
                st.accepted += 1
                self.metrics.accepted.inc()
        st.submit_s = time.monotonic() - t0
        self.metrics.rpc_bytes_sent.inc(self.client.bytes_sent - rpc0)
        self.pending_round = None
        self._round_done(st, st.inner_s, started)
        return st

    def _round_done(self, st: RoundStats, compute_s: float, started: float) -> None:
        st.wall_s, st.busy = self.busy.round_done(compute_s, started)
        cpu = time.process_time()
        st.cpu_s, self._cpu_mark = cpu - (self._cpu_mark if self._cpu_mark is not None else self._cpu_start), cpu
        self.metrics.busy.set(st.busy)
        self.metrics.round_wall.set(st.wall_s)
        self.history.append(st)
        self.log.info(
            "round done", round=st.round, strategy=self.strategy, loss=round(st.loss, 5),
            eval_loss=round(st.eval_loss, 5), accepted=st.accepted, rejected=len(st.rejected),
            bytes=st.bytes_sent, raw_bytes=st.raw_bytes, inner_s=round(st.inner_s, 4),
            serialize_s=round(st.serialize_s, 4), submit_s=round(st.submit_s, 4), wall_s=round(st.wall_s, 4),
            busy=round(st.busy, 4), cpu_s=round(st.cpu_s, 4), rebased=st.rebased,
            **({"merged": st.merged, "waited_s": round(st.waited_s, 4), "buffered": st.buffered} if self.strategy == SYNC_STREAMING else {}),
        )  # fmt: skip

    # ------------------------------------------------------------------ eager (docs/protocol/overlap.md)
    def _outer_params(self) -> tuple[float, float, bool]:
        o = self.spec.get("outer_optimizer") or {}
        return float(o.get("lr", 0.7)), float(o.get("momentum", 0.9)), bool(o.get("nesterov", True))

    def _snapshot(self) -> dict[str, torch.Tensor]:
        """The model's parameters as f32 CPU copies (``_after`` shares storage with the model on the CPU)."""
        return {n: t.detach().to("cpu", torch.float32, copy=True) for n, t in self._after().items()}

    def _train_round_eager(self, run: dict, shards: list[int]) -> RoundStats:
        started = time.monotonic()
        r = int(run["round"])
        st = RoundStats(round=r)
        self.metrics.round.set(r)
        steps = int(self.spec["inner_steps"])
        pre, self.prefetched = self.prefetched, None
        frags = pre[1] if pre is not None and pre[0] == r else self._pull(run)  # θ_r, the committed weights
        lr, mu, nesterov = self._outer_params()
        if self.committed is not None and self.committed[0] == r - 1:
            for i, fr in frags.items():
                mirror_momentum(self.committed[1][i], fr, self.outer_buf, lr, mu, nesterov)
        self.committed = (r, frags)
        theta = {n: t for f in frags.values() for n, t in f.items()}
        if self.cfg.eval:
            self._load(frags)
            st.eval_loss = heldout_mse(self.model, self.eval_w, str(self.device))
            self.metrics.eval_loss.set(st.eval_loss)
        compute = 0.0
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead.round == r:
            # Rebase: the progress made from the proxy, p − p_after, is the outer gradient for θ_r.
            start, after, st.loss = ahead.start, ahead.after, ahead.loss
            st.rebased = True
        else:
            if ahead is not None:
                self.log.info("dropping an inner phase run ahead for another round", ran_for=ahead.round, round=r)
            self._load(frags)
            t0 = time.monotonic()
            st.loss = self._inner(r, shards, steps)
            compute += time.monotonic() - t0
            start, after = theta, self._snapshot()
        delta = {n: start[n].float() - after[n] for n in theta}
        metrics_map = self._reported(st, steps)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tenzro-sync") as ex:
            job = ex.submit(self._eager_sync, run, delta, metrics_map, st)
            spec_rounds = int(self.spec["max_rounds"])
            leaving = bool(self.cfg.max_rounds) and len(self.history) + 1 >= self.cfg.max_rounds
            if r + 1 < spec_rounds and not leaving and not self.stop.is_set():
                proxy = proxy_weights(theta, delta, self.outer_buf, lr, mu, nesterov)
                weights.assign(self.model, proxy)
                t0 = time.monotonic()
                loss = self._inner(r + 1, shards, steps)
                dt = time.monotonic() - t0
                compute += dt
                st.inner_s = dt
                self.ahead = Ahead(r + 1, proxy, self._snapshot(), loss)
            self.prefetched = job.result()
        self._round_done(st, compute, started)
        return st

    def _encode_delta(self, r: int, f: int, tensors: list[dict], delta: dict[str, torch.Tensor]) -> bytes:
        """Fragment f's outer gradient from ``delta`` (its tensors by name), encoded with the run's codec (error
        feedback included) or as safetensors, and bound to this trainer, task, round and fragment."""
        if self.compressor is not None:
            p = self.compressor.encode(f, torch.cat([delta[t["name"]].reshape(-1) for t in tensors]))
        else:
            p = weights.save_tensors(delta, tensors)
        return weights.bind(p, self.key.did, self.cfg.task_id, r, f)

    def _submit_retrying(
        self, run: dict, r: int, f: int, p: bytes, n: int, metrics_map: dict[str, float], st: RoundStats, back: Backoff
    ) -> None:
        """Submits payload p for (r, f), backing off while the node is unavailable; a refusal is recorded in
        ``st`` and not retried (eager and streaming: the submit runs on a background thread)."""
        self.metrics.submitted.inc()
        while not self.stop.is_set():
            try:
                res = self.client.submit(
                    self.key, self.cfg.task_id, r, f, p, attestation=self._claim(run, p, r), metrics=metrics_map
                )
            except NodeUnavailable as e:
                self.metrics.node_down.inc()
                self.log.warning("node unavailable while submitting; backing off", error=str(e), wait_s=back.cur)
                back.wait()
                continue
            except RpcError as e:
                self.metrics.rejected.inc()
                st.rejected.append(f"fragment {f}: {e.message}")
                self.log.warning("submission refused", round=r, fragment=f, code=e.code, reason=e.message)
                return
            st.bytes_sent += len(p)
            st.raw_bytes += 4 * n
            self.metrics.bytes_sent.inc(len(p))
            if res.get("accepted", True):
                st.accepted += 1
                self.metrics.accepted.inc()
            return

    def _eager_sync(
        self, run: dict, delta: dict[str, torch.Tensor], metrics_map: dict[str, float], st: RoundStats
    ) -> tuple[int, dict[int, dict[str, torch.Tensor]]] | None:
        """Background: encode, bind and submit round r's outer gradients, then wait for the next round and
        fetch its weights. Returns (round, weights) or None when the run ended or the trainer stops."""
        r = int(run["round"])
        t0 = time.monotonic()
        frags = {int(fr["index"]): fr for fr in run["fragments"]}
        payloads = {f: self._encode_delta(r, f, fr["tensors"], delta) for f, fr in frags.items()}
        st.serialize_s = time.monotonic() - t0
        t0 = time.monotonic()
        rpc0 = self.client.bytes_sent
        self._mark_submitting(r)
        if self.compressor is not None:
            self.compressor.save()
        back = Backoff(self.stop)
        for f in sorted(payloads):
            self._submit_retrying(run, r, f, payloads[f], int(frags[f]["n"]), metrics_map, st, back)
        st.submit_s = time.monotonic() - t0
        self.metrics.rpc_bytes_sent.inc(self.client.bytes_sent - rpc0)
        back.reset()
        while not self.stop.is_set():
            try:
                nxt = self.client.get_run(self.cfg.task_id)
            except (NodeUnavailable, RpcError) as e:
                self.log.warning("getRun failed while waiting for the next round", error=str(e), wait_s=back.cur)
                back.wait()
                continue
            if nxt["status"] != "running":
                return None
            if int(nxt["round"]) > r:
                try:
                    return int(nxt["round"]), self._pull(nxt)
                except (NodeUnavailable, RpcError) as e:
                    self.log.warning("prefetching the next weights failed; the round will pull them", error=str(e))
                    return None
            self.stop.wait(self.cfg.poll_interval)
        return None

    # ------------------------------------------------------------------ streaming (docs/protocol/overlap.md §4)
    def _train_streaming(self, run: dict, shards: list[int]) -> RoundStats:
        """Streaming DiLoCo from the open round r0 = run["round"] to the run's last round (or cfg.max_rounds):
        one continuous inner loop, phase p = round p's H batches. After step s_f of phase p the trainer hands
        δ_{p,f} = θ_{p,f} − θ_f^local (θ_{p,f}: the committed weights of fragment f it merged last) to a
        background thread, which submits it once round p is open, and watches for the commit of (p, f); that
        commit is merged at the first step boundary after it arrived, and the trainer blocks for it τ steps after
        the sync point at the latest. Returns the last phase's stats (every phase is in ``history``)."""
        assert self.model is not None
        r0 = int(run["round"])
        h, nfrag = int(self.spec["inner_steps"]), len(run["fragments"])
        last = int(self.spec["max_rounds"]) - 1
        if self.cfg.max_rounds:
            last = min(last, r0 + self.cfg.max_rounds - len(self.history) - 1)
        offs = sync_offsets(h, nfrag)
        tau = default_overlap(h, nfrag) if self.cfg.stream_overlap_steps is None else check_overlap(
            self.cfg.stream_overlap_steps, h)  # fmt: skip
        alpha, how = self.cfg.stream_alpha, self.cfg.stream_merge
        layout = {int(fr["index"]): [t["name"] for t in fr["tensors"]] for fr in run["fragments"]}
        order = sorted(layout)
        base = self._pull(run)  # θ_{r0,f} for every fragment
        self._load(base)
        self.log.info("streaming", first_round=r0, last_round=last, offsets=offs, overlap_steps=tau, merge=how,
                      alpha=alpha)  # fmt: skip
        params = weights.parameters(self.model)
        sync = StreamSync(self, run)
        sync.start()
        deadlines: dict[tuple[int, int], int] = {}  # (round, fragment) awaiting its commit → merge-by step
        at_sync: dict[tuple[int, int], dict[str, torch.Tensor]] = {}  # merge rebase: the local fragment then
        st = RoundStats(round=r0)
        try:
            for p in range(r0, last + 1):
                started = time.monotonic()
                st = RoundStats(round=p)
                self.metrics.round.set(p)
                sync.stats[p] = st
                if self.cfg.eval:
                    st.eval_loss = self._eval_of(base)
                    self.metrics.eval_loss.set(st.eval_loss)
                batches = self._batches(p, shards, h)
                self.model.train()
                compute, loss = 0.0, None
                for k in range(h):
                    t = p * h + k
                    if not self._stream_merge(sync, deadlines, at_sync, t, base, params, st):
                        self.log.info("the run ended while waiting for a commit", round=p, step=k)
                        return st
                    t0 = time.monotonic()
                    loss = self._step(batches[k])
                    compute += time.monotonic() - t0
                    for i, f in enumerate(order):
                        if offs[i] != k + 1:
                            continue
                        local = {n: params[n].detach().to("cpu", torch.float32, copy=True) for n in layout[f]}
                        delta = {n: base[f][n].float() - local[n] for n in layout[f]}
                        st.loss = float(loss)
                        st.inner_s = compute
                        sync.submit(p, f, delta, self._reported(st, k + 1))
                        if p < last:
                            deadlines[(p, f)] = t + 1 + tau
                            if how == "rebase":
                                at_sync[(p, f)] = local
                            sync.watch(p, f)
                st.inner_s = compute
                st.loss = float(loss) if loss is not None else float("nan")
                self.metrics.loss.set(st.loss)
                self._round_done(st, compute, started)
        finally:
            sync.close()
        sync.join()
        if sync.error is not None:
            raise sync.error
        return st

    def _stream_merge(
        self,
        sync: StreamSync,
        deadlines: dict[tuple[int, int], int],
        at_sync: dict[tuple[int, int], dict[str, torch.Tensor]],
        t: int,
        base: dict[int, dict[str, torch.Tensor]],
        params: dict[str, torch.nn.Parameter],
        st: RoundStats,
    ) -> bool:
        """At the step boundary t: merges every awaited commit that has arrived, and blocks for those whose
        merge-by step is t. False when the run ended (or the trainer stops) while waiting."""
        for key in sorted(deadlines):
            t0 = time.monotonic()
            w = sync.arrived(key, wait=deadlines[key] <= t)
            if deadlines[key] <= t:
                st.waited_s += time.monotonic() - t0
            if w is None:
                if deadlines[key] > t:
                    continue
                if self.stop.is_set():
                    raise KeyboardInterrupt
                if sync.error is not None:
                    raise sync.error
                return False
            del deadlines[key]
            f = key[1]
            local = {n: params[n].detach().to("cpu", torch.float32) for n in w}
            if self.cfg.stream_merge == "rebase":
                merged = rebase(local, at_sync.pop(key), w)
            else:
                merged = mix(local, w, self.cfg.stream_alpha)
            with torch.no_grad():
                for n, v in merged.items():
                    params[n].copy_(v.to(params[n].dtype))
            base[f] = w
            st.merged += 1
        return True

    def _eval_of(self, frags: dict[int, dict[str, torch.Tensor]]) -> float:
        """Held-out MSE of the committed weights ``frags`` on a copy of the model (the local one keeps training)."""
        import copy

        m = copy.deepcopy(self.model)
        weights.assign(m, {n: t for f in frags.values() for n, t in f.items()})
        return heldout_mse(m, self.eval_w, str(self.device))

    # ------------------------------------------------------------------ control loop
    def run(self) -> int:
        try:
            return self._run()
        except KeyboardInterrupt:
            self.log.info("interrupted; leaving cleanly")
            return EXIT_INTERRUPTED
        finally:
            if self.dist.world > 1:
                self.dist.bcast(None) if self.dist.rank == 0 else None
                self.dist.close()

    def _follower(self) -> int:
        while True:
            cmd = self.dist.bcast(None)
            if cmd is None:
                return EXIT_OK
            run, shards = cmd
            self._ensure_task(run)
            self.train_round(run, shards)

    def _run(self) -> int:
        if self.dist.rank != 0:
            return self._follower()
        cfg, did = self.cfg, self.key.did
        back = Backoff(self.stop)
        done_round: int | None = self._submitted_round()
        rounds = 0
        self.log.info("starting", node=cfg.node_rpc, did=did)
        while not self.stop.is_set():
            try:
                run = self.client.get_run(cfg.task_id)
            except NodeUnavailable as e:
                self.metrics.node_down.inc()
                self.log.warning("node unavailable; backing off", error=str(e), wait_s=back.cur)
                back.wait()
                continue
            except RpcError as e:
                self.log.warning("getRun refused; waiting", code=e.code, reason=e.message)
                back.wait()
                continue
            status = run["status"]
            if status in ("sealed", "cancelled"):
                self.log.info("run finished", status=status, rounds_trained=rounds)
                return EXIT_OK
            me = next((t for t in run.get("trainers") or [] if t["did"] == did), None)
            if me is not None and me["status"] == "evicted":
                self.log.error("evicted from the run", slashed=me.get("slashed"))
                return EXIT_EVICTED
            if me is None or me["status"] == "left":
                stake = enrol_stake(cfg.stake, spec_of(run))
                try:
                    res = self.client.enroll(self.key, cfg.task_id, stake, attestation=self._claim(run))
                    self.log.info("enrolled", shards=res.get("shards"), status=res.get("status"), stake=stake,
                                  stake_from="config" if cfg.stake is not None else "default")  # fmt: skip
                    back.reset()
                except NodeUnavailable as e:
                    self.log.warning("node unavailable; backing off", error=str(e), wait_s=back.cur)
                    back.wait()
                except RpcError as e:
                    if permanent_refusal(e):
                        self.log.error(f"enrolment refused, giving up: {e.message}", code=e.code, stake=stake)
                        return EXIT_REFUSED
                    self.log.warning("enrolment refused; backing off", code=e.code, reason=e.message,
                                     wait_s=back.cur)  # fmt: skip
                    back.wait()
                except AttestationError as e:
                    self.log.error("cannot attest", error=str(e))
                    return EXIT_DATA
                continue
            r = int(run["round"])
            if status != "running" or me["status"] != "active" or done_round == r:
                self.stop.wait(cfg.poll_interval)
                continue
            try:
                self._ensure_task(run)
            except models.MissingExtra as e:
                self.log.error(str(e))
                return EXIT_CONFIG
            except (data.DatasetError, weights.FragmentError, ValueError, AttestationError) as e:
                self.log.error("cannot train this task", error=str(e))
                return EXIT_DATA
            try:
                if self.pending_round != r:  # followers join the collective part of the round only
                    self.dist.bcast((run, me["shards"]))
                st = self.train_round(run, list(me["shards"]))
            except NodeUnavailable as e:
                self.metrics.node_down.inc()
                self.log.warning("node unavailable mid-round; backing off", error=str(e), wait_s=back.cur)
                back.wait()
                continue
            except RpcError as e:
                self.log.warning("refused mid-round", code=e.code, reason=e.message)
                back.wait()
                continue
            except AttestationError as e:
                self.log.error("cannot attest", error=str(e))
                return EXIT_DATA
            done_round = st.round  # streaming: the last phase it ran (its call runs every phase from r on)
            rounds += st.round - r + 1
            if st.rejected:
                back.wait()
            else:
                back.reset()
            if cfg.max_rounds and rounds >= cfg.max_rounds:
                self.log.info("max_rounds reached; leaving", rounds=rounds)
                return EXIT_OK
        self.log.info("stopped; leaving cleanly")
        return EXIT_INTERRUPTED


class StreamSync(threading.Thread):
    """Streaming's background thread: submits each queued outer gradient (round, fragment) once its round is
    open (in queue order; one whose round has moved on is dropped), and fetches the committed weights of every
    watched (round, fragment) as soon as the chain shows that fragment's commit. One getRun per poll."""

    def __init__(self, tr: Trainer, run: dict) -> None:
        super().__init__(name="tenzro-stream", daemon=True)
        self.tr = tr
        self.frags = {int(fr["index"]): fr for fr in run["fragments"]}
        self.cond = threading.Condition()
        self.queue: list[tuple[int, int, dict[str, torch.Tensor], dict[str, float]]] = []
        self.watched: set[tuple[int, int]] = set()
        self.got: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self.stats: dict[int, RoundStats] = {}
        self.ended = False  # the run is no longer running, or the trainer stops
        self.closing = False
        self.error: BaseException | None = None
        self.seen = int(run["round"])  # the latest round getRun showed open

    def submit(self, r: int, f: int, delta: dict[str, torch.Tensor], metrics_map: dict[str, float]) -> None:
        with self.cond:
            if r > self.seen:
                self.stats.setdefault(r, RoundStats(round=r)).buffered += 1
            self.queue.append((r, f, delta, metrics_map))
            self.cond.notify_all()

    def watch(self, r: int, f: int) -> None:
        with self.cond:
            self.watched.add((r, f))
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.watched.clear()
            self.cond.notify_all()

    def arrived(self, key: tuple[int, int], wait: bool) -> dict[str, torch.Tensor] | None:
        """The committed weights of the watched ``key`` once fetched (removed from the store); with ``wait``,
        blocks until they are there or the run ended (then None)."""
        with self.cond:
            while key not in self.got:
                if not wait or self.ended or self.error is not None or self.tr.stop.is_set():
                    return None
                self.cond.wait(0.5)
            return self.got.pop(key)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # surfaced to the training thread by arrived() and join()
            self.tr.log.error("streaming sync thread failed", error=str(e))
            self.error = e
        finally:
            with self.cond:
                self.ended = True
                self.cond.notify_all()

    def _loop(self) -> None:
        tr = self.tr
        back = Backoff(tr.stop)
        while not tr.stop.is_set():
            with self.cond:
                if self.closing and not self.queue:
                    return
            try:
                run = tr.client.get_run(tr.cfg.task_id)
            except (NodeUnavailable, RpcError) as e:
                tr.log.warning("getRun failed while streaming", error=str(e), wait_s=back.cur)
                back.wait()
                continue
            back.reset()
            if run["status"] != "running":
                with self.cond:
                    dropped = [(q, f) for q, f, _, _ in self.queue]
                    self.queue.clear()
                if dropped:
                    tr.log.warning("the run ended before these were sent", status=run["status"], dropped=dropped)
                return
            cur = int(run["round"])
            with self.cond:
                self.seen = max(self.seen, cur)
            moved = self._send(run, cur)
            moved |= self._fetch(run, cur)
            if not moved:
                with self.cond:
                    if not (self.closing and not self.queue):
                        self.cond.wait(tr.cfg.poll_interval)

    def _send(self, run: dict, cur: int) -> bool:
        """Sends every queued outer gradient of the open round ``cur`` (and drops older ones)."""
        tr, sent = self.tr, False
        while True:
            with self.cond:
                if not self.queue or self.queue[0][0] > cur:
                    return sent
                r, f, delta, metrics_map = self.queue.pop(0)
            st = self.stats.setdefault(r, RoundStats(round=r))
            if r < cur:
                st.rejected.append(f"fragment {f}: round {r} moved on before it could be sent")
                tr.log.warning("dropping an outer gradient: its round moved on", round=r, fragment=f, now=cur)
                continue
            sent = True
            fr = self.frags[f]
            t0 = time.monotonic()
            p = tr._encode_delta(r, f, fr["tensors"], delta)
            st.serialize_s += time.monotonic() - t0
            t0 = time.monotonic()
            rpc0 = tr.client.bytes_sent
            tr._mark_submitting(r)  # before anything is sent, as under blocking (a restart never sends twice)
            if tr.compressor is not None:
                tr.compressor.save()
            tr._submit_retrying(run, r, f, p, int(fr["n"]), metrics_map, st, Backoff(tr.stop))
            st.submit_s += time.monotonic() - t0
            tr.metrics.rpc_bytes_sent.inc(tr.client.bytes_sent - rpc0)

    def _fetch(self, run: dict, cur: int) -> bool:
        """Fetches the committed weights of each watched (round, fragment) the chain shows committed: in round r
        itself once the fragment is closed, or in round r+1 while the fragment is still open there. A later view
        (the trainer fell behind) gives the newer weights, with a warning."""
        tr, got = self.tr, False
        with self.cond:
            keys = sorted(self.watched)
        view = {int(fr["index"]): fr for fr in run["fragments"]}
        for r, f in keys:
            fv = view[f]
            visible = (cur == r and fv["committed"]) or (cur == r + 1 and not fv["committed"])
            late = cur > r + 1 or (cur == r + 1 and fv["committed"])
            if not (visible or late):
                continue
            if late:
                tr.log.warning("a fragment moved on past the commit awaited; merging the newer weights",
                               round=r, fragment=f, now=cur)  # fmt: skip
            try:
                w = tr.client.get_weights(tr.cfg.task_id, f)
            except (NodeUnavailable, RpcError) as e:
                tr.log.warning("getWeights failed while streaming", fragment=f, error=str(e))
                continue
            if not late and str(w.get("weights_hash", "")) != str(fv["weights_hash"]):
                continue  # the fragment moved between getRun and getWeights: the next poll sees it
            t = weights.load_fragment(w["payload"], self.frags[f]["tensors"], f"fragment {f}")
            with self.cond:
                if (r, f) in self.watched:
                    self.watched.discard((r, f))
                    self.got[(r, f)] = t
                    self.cond.notify_all()
            got = True
        return got


def params_of(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(model.parameters())
