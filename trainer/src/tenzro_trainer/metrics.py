"""Prometheus metrics (served on :9101 by default)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.steps = Counter("tenzro_trainer_inner_steps", "Inner optimizer steps run", registry=r)
        self.loss = Gauge("tenzro_trainer_loss", "Training loss of the last inner step", registry=r)
        self.eval_loss = Gauge("tenzro_trainer_eval_loss", "Held-out loss of the pulled weights", registry=r)
        self.submitted = Counter("tenzro_trainer_submitted", "Outer gradients submitted", registry=r)
        self.accepted = Counter("tenzro_trainer_accepted", "Outer gradients the node accepted", registry=r)
        self.rejected = Counter("tenzro_trainer_rejected", "Outer gradients the node refused", registry=r)
        self.round = Gauge("tenzro_trainer_round", "Round the trainer is working on", registry=r)
        self.bytes_sent = Counter("tenzro_trainer_bytes_sent", "Payload bytes submitted", registry=r)
        self.rpc_bytes_sent = Counter("tenzro_trainer_rpc_bytes_sent", "JSON-RPC request bytes sent", registry=r)
        self.busy = Gauge("tenzro_trainer_busy_fraction", "Compute time / wall time of the last round", registry=r)
        self.round_wall = Gauge("tenzro_trainer_round_wall_seconds", "Wall time of the last round", registry=r)
        self.node_down = Counter("tenzro_trainer_node_unavailable", "Calls that found the node down", registry=r)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        if port:
            start_http_server(port, addr=addr, registry=self.registry)
