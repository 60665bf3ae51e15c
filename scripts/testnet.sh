#!/usr/bin/env bash
# scripts/testnet.sh (make testnet): a 4-validator Tenzro network on loopback for a newcomer.
# Writes a genesis that funds a fresh sponsor key and a fresh trainer key and makes every
# validator's node key a syncer candidate (stake from genesis); starts 4 `tenzro-node --home` full
# nodes (CometBFT embedded, JSON-RPC, libp2p, blobs, the candidate/syncer daemon); prints every
# node's JSON-RPC, CometBFT RPC and libp2p address, the run dashboard's URL, a light-client command line and a ready-to-paste
# block of sponsor and trainer commands (a one-round run posted on node 0, trained through the last
# node, sealed by whichever node the election picks); then waits. Ctrl-C stops them all.
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
# Ctrl-C (or a TERM) is how a newcomer stops the network: a clean stop, exit 0.
trap 'exit 0' INT TERM

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
didof() { sed -n 's/.*"did": *"\([^"]*\)".*/\1/p'; }
sponsor="$("$bin/tenzro" key generate --kind human --out "$dir/sponsor.key" --format json | didof)"
trainer="$("$bin/tenzro" key generate --kind machine --out "$dir/trainer.key" --format json | didof)"
# A second trainer with no genesis funds: the block below funds it from the sponsor.
trainer2="$("$bin/tenzro" key generate --kind machine --out "$dir/trainer2.key" --format json | didof)"
echo "== genesis: $n validators (each a syncer candidate), sponsor $sponsor with 1000 TNZO, trainer $trainer with 200 TNZO; trainer2 $trainer2 (key $dir/trainer2.key) with nothing"
"$bin/tenzro-node" testnet --validators "$n" --dir "$dir/nodes" --base-port "${TESTNET_BASE_PORT:-26656}" \
	--block-time "${TESTNET_BLOCK_TIME:-1s}" --challenge-window-blocks "${TESTNET_CHALLENGE_WINDOW:-30}" \
	--alloc "$sponsor=1000000000000000000000" \
	--alloc "$trainer=200000000000000000000" "$@" >"$dir/testnet.txt"
genesis_hash="$(sed -n 's/^genesis hash \([0-9a-f]*\).*/\1/p' "$dir/testnet.txt")"

# A one-round example run: one trainer, two fragments of four float32 values each. The initial
# weights are a safetensors file written here (8-byte little-endian header length, the JSON header,
# the values: 0.01 each). The spec says bf16: tenzro train post-task and submit-gradient round these
# F32 files to BF16 before signing them (one line on stderr says so; the node takes only the spec's dtype).
cat >"$dir/spec.json" <<EOF
{"task_id":"testnet-run","sponsor_did":"$sponsor","sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":8,"modality":"Timeseries","fragment_count":2,"dtype":"bf16"},
 "tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":4,"max_rounds":1,"grace_window_ms":0,
 "reward_pool":"100000000000000000000","dataset_ref":"ipfs://QmTestnet","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400}
EOF
header='{"layer0.w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"layer1.w":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}}'
{
	printf "$(printf '\\x%02x' "${#header}")\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
	printf '%s' "$header"
	for _ in 1 2 3 4 5 6 7 8; do printf '\x0a\xd7\x23\x3c'; done
} >"$dir/init.safetensors"
# The trainer's outer gradient of each fragment: the fragment's tensor, 0.001 each.
for f in 0 1; do
	g_header="{\"layer$f.w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}"
	{
		printf "$(printf '\\x%02x' "${#g_header}")\\x00\\x00\\x00\\x00\\x00\\x00\\x00"
		printf '%s' "$g_header"
		for _ in 1 2 3 4; do printf '\x6f\x12\x83\x3a'; done
	} >"$dir/grad$f.safetensors"
done

for ((i = 0; i < n; i++)); do
	home="$dir/nodes/node$i"
	# Each home names its JSON-RPC and libp2p addresses (config/tenzro-chain.json).
	# --dashboard on: the run dashboard (progress, pending and final counts) at / of the JSON-RPC address.
	"$bin/tenzro-node" --home "$home" --enclave none --dashboard on >"$home/node.log" 2>&1 &
	pids+=($!)
done

conf() { sed -n "s/.*\"$2\": *\"\\([^\"]*\\)\".*/\\1/p" "$dir/nodes/node$1/config/tenzro-chain.json"; }
echo "== waiting for every validator to commit a block and answer JSON-RPC"
for ((i = 0; i < n; i++)); do
	home="$dir/nodes/node$i"
	rpc="$(conf "$i" rpc_addr)"
	jr="$(conf "$i" json_rpc_addr)"
	ok=""
	for _ in $(seq 1 600); do
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			echo "error: node$i exited; its log:" >&2
			tail -20 "$home/node.log" >&2
			exit 1
		fi
		h="$("$bin/tenzro" chain status --comet-rpc "http://$rpc" --format json 2>/dev/null | sed -n 's/.*"height": *\([0-9]*\).*/\1/p' || true)"
		if [[ -n "$h" && "$h" -ge 1 ]] && "$bin/tenzro" node info --rpc "http://$jr" >/dev/null 2>&1; then ok=1; break; fi
		sleep 0.2
	done
	[[ -n "$ok" ]] || { echo "error: node$i did not commit a block within 120 s; see $home/node.log" >&2; exit 1; }
	p2p="$("$bin/tenzro" node info --rpc "http://$jr" --format json | tr -d ' \n' | sed -n 's/.*"listen_addrs":\["\([^"]*\)".*/\1/p')"
	echo "node$i  JSON-RPC http://$jr  CometBFT RPC http://$rpc  libp2p $p2p  (home $home, log $home/node.log)"
	[[ $i == 0 ]] && boot0="$p2p"
done
last=$((n - 1))
jr0="http://$(conf 0 json_rpc_addr)"
jrl="http://$(conf "$last" json_rpc_addr)"
jr1="http://$(conf 1 json_rpc_addr)"
echo "== all $n validators are committing (genesis hash $genesis_hash). Every node answers the same."
echo "== the run dashboard (rounds, pending and final counts, when the pending ones are final): $jr0/ (and / of every node's JSON-RPC)"
echo "== a light client that joins by itself (pinned to this network):"
echo "   $bin/tenzro-node --role light-client --data-dir $dir/light --rpc-addr 127.0.0.1:8600 --listen-addr /ip4/127.0.0.1/tcp/0 --boot-nodes $boot0 --genesis-hash $genesis_hash"
echo "== sponsor and trainer (paste it; the run is posted on node 0, trained through node $last and replayed through node 1):"
cat <<EOF
# --- begin
export PATH="$bin:\$PATH"
tenzro train post-task --spec $dir/spec.json --init-weights $dir/init.safetensors --key $dir/sponsor.key --rpc $jr0
tenzro train enroll-trainer --task-id testnet-run --stake 100000000000000000000 --key $dir/trainer.key --rpc $jrl
tenzro train wait --task-id testnet-run --for running --rpc $jrl
for f in 0 1; do
  tenzro train get-weights --task-id testnet-run --fragment \$f --out $dir/w\$f.safetensors --rpc $jrl
  tenzro train submit-gradient --task-id testnet-run --round 0 --fragment \$f --payload $dir/grad\$f.safetensors --key $dir/trainer.key --rpc $jrl
done
tenzro train wait --task-id testnet-run --for receipt --out $dir/receipt.json --rpc $jr0
tenzro receipt verify --receipt $dir/receipt.json --full --rpc $jrl
tenzro receipt replay --receipt $dir/receipt.json --rpc $jr1
tenzro ledger balance --did $sponsor --rpc $jr0
tenzro ledger balance --did $sponsor --rpc $jrl
# a second trainer has no funds on this network until someone sends some:
tenzro ledger transfer --to $trainer2 --amount 150000000000000000000 --key $dir/sponsor.key --rpc $jr0
tenzro ledger balance --did $trainer2 --rpc $jrl
# --- end
EOF
if [[ "${TESTNET_EXIT_WHEN_READY:-0}" == 1 ]]; then exit 0; fi
echo "== Ctrl-C stops the network"
if [[ -t 0 && -t 2 ]]; then
	# On a terminal (bash takes job control through stderr), wait in a foreground job of its own
	# process group (job control on): Ctrl-C then reaches only that job, not `make` above this
	# script, which would otherwise die of the signal and report "Error 130". With job control on,
	# bash abandons this whole `if` when the job dies of SIGINT and goes on after `fi`, to the exit
	# below (the EXIT trap stops every node). -e/-u/pipefail are off for that wait: with them bash
	# would end the script with the job's 130 first.
	set +eu +o pipefail -m
	sleep infinity
else
	wait
fi
exit 0
