#!/usr/bin/env bash
# scripts/testnet.sh (make testnet): a 4-validator Tenzro chain on loopback for a newcomer.
# Writes a genesis that funds a fresh sponsor key and makes every validator's node a syncer
# candidate, starts 4 `tenzro-node --home` full nodes (CometBFT embedded, JSON-RPC, libp2p, the
# syncer daemon), prints each node's addresses and waits; Ctrl-C stops them all.
# Env: TESTNET_DIR (default: a new temp dir, kept), TESTNET_VALIDATORS (4), TESTNET_BASE_PORT
# (26656; node i: chain P2P BASE+2i, chain RPC BASE+2i+1, JSON-RPC 8545+i, libp2p 4001+i;
# 0 = free ports for all), TESTNET_BLOCK_TIME (1s), TESTNET_CHALLENGE_WINDOW (30 blocks:
# how long a commit can be challenged before its round is final), TENZRO_BIN_DIR, GO.
# TESTNET_EXIT_WHEN_READY=1 stops the validators and exits once all answer (for CI).
# Extra arguments go to `tenzro-node testnet` (e.g. --alloc DID=AMOUNT).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${TESTNET_DIR:-$(mktemp -d -t tenzro-testnet.XXXXXX)}"
n="${TESTNET_VALIDATORS:-4}"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[[ ${#pids[@]} -gt 0 ]] && echo "== stopped ${#pids[@]} validators; homes and logs kept in $dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n "${TENZRO_BIN_DIR:-}" ]]; then
	bin="$TENZRO_BIN_DIR"
else
	bin="$root/bin"
	echo "== building tenzro and tenzro-node into $bin"
	(cd "$root" && "${GO:-go}" build -o "$bin/" ./cmd/tenzro ./cmd/tenzro-node)
fi

mkdir -p "$dir"
if [[ -e "$dir/sponsor.key" ]]; then
	echo "error: $dir already holds a testnet (choose a new TESTNET_DIR)" >&2
	exit 2
fi
sponsor="$("$bin/tenzro" key generate --kind human --out "$dir/sponsor.key" --format json | sed -n 's/.*"did": *"\([^"]*\)".*/\1/p')"
echo "== genesis: $n validators, sponsor $sponsor funded with 1000 TNZO (key $dir/sponsor.key)"
"$bin/tenzro-node" testnet --validators "$n" --dir "$dir/nodes" --base-port "${TESTNET_BASE_PORT:-26656}" \
	--block-time "${TESTNET_BLOCK_TIME:-1s}" --challenge-window-blocks "${TESTNET_CHALLENGE_WINDOW:-30}" \
	--alloc "$sponsor=1000000000000000000000" "$@"

for ((i = 0; i < n; i++)); do
	home="$dir/nodes/node$i"
	# Each home names its JSON-RPC and libp2p addresses (config/tenzro-chain.json).
	"$bin/tenzro-node" --home "$home" --enclave none >"$home/node.log" 2>&1 &
	pids+=($!)
done

echo "== waiting for every validator to commit a block"
for ((i = 0; i < n; i++)); do
	home="$dir/nodes/node$i"
	rpc="$(sed -n 's/.*"rpc_addr": *"\([^"]*\)".*/\1/p' "$home/config/tenzro-chain.json")"
	ok=""
	for _ in $(seq 1 600); do
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			echo "error: node$i exited; its log:" >&2
			tail -20 "$home/node.log" >&2
			exit 1
		fi
		h="$("$bin/tenzro" chain status --node "http://$rpc" --format json 2>/dev/null | sed -n 's/.*"height": *\([0-9]*\).*/\1/p' || true)"
		if [[ -n "$h" && "$h" -ge 1 ]]; then ok=1; break; fi
		sleep 0.2
	done
	[[ -n "$ok" ]] || { echo "error: node$i did not commit a block within 120 s; see $home/node.log" >&2; exit 1; }
	jr="$(sed -n 's/.*"json_rpc_addr": *"\([^"]*\)".*/\1/p' "$home/config/tenzro-chain.json")"
	echo "node$i  RPC http://$rpc  JSON-RPC http://$jr  (home $home, log $home/node.log)"
done
echo "== all $n validators are committing. Try (every node answers the same):"
rpc0="$(sed -n 's/.*"rpc_addr": *"\([^"]*\)".*/\1/p' "$dir/nodes/node0/config/tenzro-chain.json")"
rpcl="$(sed -n 's/.*"rpc_addr": *"\([^"]*\)".*/\1/p' "$dir/nodes/node$((n - 1))/config/tenzro-chain.json")"
echo "   $bin/tenzro chain balance --did $sponsor --node http://$rpc0"
echo "   $bin/tenzro chain balance --did $sponsor --node http://$rpcl"
echo "   $bin/tenzro chain post-task --spec spec.json --key $dir/sponsor.key --node http://$rpc0"
jr0="$(sed -n 's/.*"json_rpc_addr": *"\([^"]*\)".*/\1/p' "$dir/nodes/node0/config/tenzro-chain.json")"
echo "   $bin/tenzro ledger balance --did $sponsor --rpc http://$jr0   # node 0's JSON-RPC, served from its replica"
if [[ "${TESTNET_EXIT_WHEN_READY:-0}" == 1 ]]; then exit 0; fi
echo "== Ctrl-C stops the network"
wait
