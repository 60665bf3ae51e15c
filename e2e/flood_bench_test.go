package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestFloodLatencyBench measures an honest trainer's submission latency
// (the JSON-RPC submit through the elected syncer's node, which answers
// once the record is committed) during a transaction flood against quiet,
// in the same run on 4 local validators (issue 22, Must show). The flood is
// what an attacker can send: fee-paying transfers from funded keys (they
// enter blocks and pay) and transfers from unfunded keys (refused at
// CheckTx), as fast as CometBFT's RPC takes them. Quiet and flood phases
// alternate submission by submission, so load from outside the test hits
// both alike. Nothing is asserted about speed. TENZRO_FLOOD_KEYS=f,u sets
// how many funded and unfunded keys flood (default 4,2; 1,0 is one funded
// sender, capped by each node's per-sender mempool share,
// --mempool-sender-limit, default chain.DefaultMempoolSenderLimit;
// TENZRO_BENCH_NODE_FLAGS="--mempool-sender-limit -1" lifts it, for the
// comparison).
//
//	TENZRO_NET_BENCH=1 nice go test ./e2e -run TestFloodLatencyBench -v -timeout 30m
//	TENZRO_NET_BENCH=1 TENZRO_FLOOD_KEYS=1,0 nice go test ./e2e -run TestFloodLatencyBench -v -timeout 30m
func TestFloodLatencyBench(t *testing.T) {
	if os.Getenv("TENZRO_NET_BENCH") != "1" {
		t.Skip("a benchmark: set TENZRO_NET_BENCH=1")
	}
	const (
		nTrainers, F, N = 8, 4, 64
		task            = "flood-run"
	)
	funded, unfunded := 4, 2
	if v := os.Getenv("TENZRO_FLOOD_KEYS"); v != "" {
		f, u, ok := strings.Cut(v, ",")
		var e1, e2 error
		funded, e1 = strconv.Atoi(f)
		unfunded, e2 = strconv.Atoi(u)
		if !ok || e1 != nil || e2 != nil || funded < 0 || unfunded < 0 || funded+unfunded == 0 {
			t.Fatalf("TENZRO_FLOOD_KEYS %q: want funded,unfunded key counts (e.g. 1,0)", v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	spam := make([]*did.Key, funded+unfunded)
	allocs := map[string]string{}
	for i := range spam {
		spam[i] = chainKey(t, did.KindMachine, byte(200+i))
		if i < funded {
			allocs[spam[i].DID.String()] = "100000000000000000000" // 100 TNZO
		}
	}
	n, _, trainers, run := benchRun(ctx, t, task, nTrainers, F, N, 1, func(n *testNet, _ *chainNode) *chainNode { return n.vals[1] }, allocs)
	succ, err := election.Succession(*run.Election)
	if err != nil {
		t.Fatal(err)
	}
	syncerNode := n.byDID(succ[0].DID)
	balances := func() []string {
		out := make([]string, funded)
		for i := 0; i < funded; i++ {
			b, err := n.vals[0].client().Balance(ctx, spam[i].DID.String())
			if err != nil {
				t.Fatal(err)
			}
			out[i] = b.Balance
		}
		return out
	}
	before := balances()

	// The flood: one goroutine per key, each against its own validator,
	// sending while on is set.
	var on atomic.Bool
	var admitted, refused, sendErr atomic.Int64
	var codeMu sync.Mutex
	codes := map[uint32]int{} // refusals by CheckTx code
	var wg sync.WaitGroup
	fctx, stop := context.WithCancel(ctx)
	for i, k := range spam {
		wg.Add(1)
		go func(i int, k *did.Key) {
			defer wg.Done()
			v := n.vals[i%len(n.vals)]
			nonce := uint64(0)
			resync := func() {
				res, err := v.rpc.ABCIQuery(fctx, chain.QueryNonce, []byte(k.DID.String()))
				if err == nil && res.Response.Code == 0 && len(res.Response.Value) > 0 {
					if x, err := strconv.ParseUint(string(res.Response.Value), 10, 64); err == nil {
						nonce = x
					}
				}
			}
			resync()
			to := trainers[i%len(trainers)].DID.String()
			for fctx.Err() == nil {
				if !on.Load() {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				tx, err := chain.TransferTx(testnetChainID, k, to, "1", nonce+1)
				if err != nil {
					t.Error(err)
					return
				}
				res, err := v.rpc.BroadcastTxSync(fctx, tx)
				switch {
				case err != nil:
					sendErr.Add(1)
				case res.Code == 0:
					admitted.Add(1)
					nonce++
				default:
					refused.Add(1)
					codeMu.Lock()
					codes[res.Code]++
					codeMu.Unlock()
					// Over its mempool share: send the same nonce again
					// (the refusal used nothing). Else resynchronize.
					if i < funded && res.Code != chain.CodeSenderBusy {
						resync()
					}
				}
			}
		}(i, k)
	}
	defer func() { stop(); wg.Wait() }()

	lat := map[bool][]time.Duration{}
	var floodTime time.Duration
	for f := 0; f < F; f++ {
		w, err := syncerNode.client().GetWeights(ctx, wire.GetWeightsParams{TaskID: task, FragmentIndex: uint64(f)})
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range trainers {
			flood := (i+f)%2 == 1
			payload, err := gradientBytes(w.Payload, task, k.DID.String(), i, 0, f)
			if err != nil {
				t.Fatal(err)
			}
			g := &wire.OuterGradient{ChainID: testnetChainID, TaskID: task, TrainerDID: k.DID.String(), Round: 0, FragmentIndex: uint64(f),
				GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
			g.Signature = k.Sign(g.Preimage())
			if flood {
				on.Store(true)
				// Let the flood fill the mempools before the honest call.
				waitHeight(t, n.vals[0], n.vals[0].height(t)+1, time.Minute)
			}
			start := time.Now()
			_, err = syncerNode.client().Submit(ctx, g)
			d := time.Since(start)
			if flood {
				floodTime += d
				on.Store(false)
			}
			if err != nil {
				t.Fatalf("trainer %d fragment %d (flood %v): %v", i, f, flood, err)
			}
			lat[flood] = append(lat[flood], d)
			t.Logf("fragment %d trainer %d flood %v: %s (flood so far: %d admitted, %d refused)", f, i, flood, d, admitted.Load(), refused.Load())
		}
	}
	stop()
	wg.Wait()
	after := balances()
	fmt.Printf("| phase | submissions | p50 ms | p99 ms | min–max ms |\n|---|---|---|---|---|\n")
	for _, flood := range []bool{false, true} {
		d := lat[flood]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
		name := "quiet"
		if flood {
			name = "flood"
		}
		fmt.Printf("| %s | %d | %.0f | %.0f | %.0f–%.0f |\n", name, len(d), ms(d[len(d)/2]), ms(d[len(d)*99/100]), ms(d[0]), ms(d[len(d)-1]))
	}
	fmt.Printf("flood (%d funded, %d unfunded keys): %d transactions admitted to mempools, %d refused at CheckTx (by code: %v; %d is the per-sender mempool share), %d send errors\n",
		funded, unfunded, admitted.Load(), refused.Load(), codes, chain.CodeSenderBusy, sendErr.Load())
	for i := range before {
		fmt.Printf("funded spammer %d: balance %s -> %s attoTNZO\n", i, before[i], after[i])
	}
}
