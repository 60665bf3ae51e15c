#!/usr/bin/env bash
# scripts/demo.sh (make demo): eight trainers train a tiny TimesFM-class model through a local
# tenzro-node (--dev) to a verified receipt, watched on the node's dashboard. Env: DEMO_ROUNDS
# (default 20), DEMO_KEEP=0 stops the node when the run is done (default: keep serving the dashboard
# until Ctrl-C), DEMO_KEEP_DIR=1 keeps the temp dir, TENZRO_BIN_DIR (use prebuilt tenzro + tenzro-node), DEMO_PNG (loss curve, default $TMPDIR/tenzro-demo-loss.png), GO (default go),
# TENZRO_VENV_ROOT (see scripts/venv.sh), DEMO_DATASET (ipfs, the default: the corpus is published with
# `tenzro dataset add` and the spec names its ipfs:// CID; statsmodels: the spec names statsmodels://),
# DEMO_CODEC (compress outer gradients: int8-block, int4-block, topk, sign1, or a JSON compression object;
# docs/protocol/compression.md), DEMO_SCORING (on, the default: every submission is scored by the
# built-in evaluator and paid by its score, docs/protocol/scoring.md; off).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${DEMO_ROUNDS:-20}"
work="$(mktemp -d -t tenzro-demo.XXXXXX)"
node_pid=""
cleanup() {
	if [[ -n "$node_pid" ]] && kill -0 "$node_pid" 2>/dev/null; then
		kill "$node_pid" 2>/dev/null || true
		wait "$node_pid" 2>/dev/null || true
	fi
	if [[ "${DEMO_KEEP_DIR:-0}" != 1 ]]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap cleanup EXIT

if [[ -n "${TENZRO_BIN_DIR:-}" ]]; then
	echo "== using prebuilt binaries in $TENZRO_BIN_DIR"
	mkdir -p "$work/bin" && cp "$TENZRO_BIN_DIR"/tenzro* "$work/bin/"
else
	echo "== building tenzro and tenzro-node"
	(cd "$root" && "${GO:-go}" build -o "$work/bin/" ./cmd/tenzro ./cmd/tenzro-node)
fi

echo "== python venv"
venv="$("$root/scripts/venv.sh")"
echo "   $venv"
export PYTHONPATH="$root/trainer/src${PYTHONPATH:+:$PYTHONPATH}"

port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
mkdir -p "$work/node"
echo "== starting tenzro-node --dev on 127.0.0.1:$port (log: $work/node.log)"
"$work/bin/tenzro-node" --dev --data-dir "$work/node" --rpc-addr "127.0.0.1:$port" \
	--listen-addr /ip4/127.0.0.1/tcp/0 >"$work/node.log" 2>&1 &
node_pid=$!
for _ in $(seq 1 300); do
	if curl -fsS -m 1 -H 'Content-Type: application/json' \
		-d '{"jsonrpc":"2.0","id":1,"method":"tenzro_node_info"}' "http://127.0.0.1:$port" >/dev/null 2>&1; then
		break
	fi
	kill -0 "$node_pid" 2>/dev/null || { echo "tenzro-node exited:"; tail -20 "$work/node.log"; exit 1; }
	sleep 0.1
done

echo "== dashboard: http://127.0.0.1:$port/  (runs, loss curve, trainers, fragment commits, receipt)"

echo "== training ($rounds rounds; M=8 K=6 F=4 H=24)"
png="${DEMO_PNG:-${TMPDIR:-/tmp}/tenzro-demo-loss.png}"
"$venv/bin/python" -m tenzro_trainer.demo --rpc "http://127.0.0.1:$port" --workdir "$work/run" \
	--bins "$work/bin" --rounds "$rounds" --png "$png" --dataset "${DEMO_DATASET:-ipfs}" --scoring "${DEMO_SCORING:-on}" ${DEMO_CODEC:+--codec "$DEMO_CODEC"}

if [[ "${DEMO_KEEP:-1}" != 0 ]]; then
	echo "== the node keeps serving the dashboard at http://127.0.0.1:$port/ — press Ctrl-C to stop (DEMO_KEEP=0 skips this)"
	wait "$node_pid" || true
fi
