package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	rpchttp "github.com/cometbft/cometbft/rpc/client/http"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// BenchmarkChainSubmissions measures submission records (the chain's most
// frequent transaction) on a local network of real validator processes:
// throughput (records committed with success per second: the block result,
// not the mempool answer) and commit latency (broadcast to visible in a
// committed block, polled every 20 ms), on 4 validators and,
// as the baseline of the same run, on 1. b.N is the number of records
// (at most 16 trainers × 256 fragments); run it once per size, e.g.
//
//	go test ./e2e -run '^$' -bench ChainSubmissions -benchtime 1000x
func BenchmarkChainSubmissions(b *testing.B) {
	var base float64
	for _, v := range []int{1, 4} {
		b.Run(fmt.Sprintf("validators=%d", v), func(b *testing.B) {
			tps := benchSubmissions(b, v, b.N)
			if v == 1 {
				base = tps
			} else if base > 0 {
				b.ReportMetric(tps/base, "tps_vs_1_validator")
			}
		})
	}
}

func benchSubmissions(b *testing.B, validators, n int) float64 {
	const trainers, frags = 16, 256
	if n > trainers*frags {
		b.Fatalf("b.N=%d: at most %d records per run", n, trainers*frags)
	}
	build(b)
	run := chainBenchRun(b, trainers, frags)
	dir := b.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "testnet", "--validators", fmt.Sprint(validators), "--dir", dir,
		"--base-port", "0", "--block-time", "200ms", "--alloc", run.sponsor.DID.String()+"=1000000000000000000000000").CombinedOutput()
	if err != nil {
		b.Fatalf("testnet: %v\n%s", err, out)
	}
	nodes := make([]*chainNode, validators)
	for i := range nodes {
		home := filepath.Join(dir, fmt.Sprintf("node%d", i))
		nc, err := chain.LoadNodeConfig(home)
		if err != nil {
			b.Fatal(err)
		}
		c, err := chainRPC(nc.RPCAddr)
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = &chainNode{home: home, rpc: c}
		nodes[i].start(b)
	}
	defer func() {
		for _, n := range nodes {
			n.kill()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	waitHeight(b, nodes[0], 1, 2*time.Minute)
	run.start(b, ctx, nodes[0].rpc)
	txs := make([][]byte, n)
	for i := range txs {
		txs[i] = run.submission(b, i)
	}
	b.ResetTimer()
	sent := make([]time.Time, n)
	hashes := make([][]byte, n)
	start := time.Now()
	for i, tx := range txs {
		sent[i] = time.Now()
		res, err := nodes[0].rpc.BroadcastTxSync(ctx, tx)
		if err != nil || res.Code != 0 {
			b.Fatalf("tx %d: %v %+v", i, err, res)
		}
		hashes[i] = res.Hash
	}
	lat := make([]time.Duration, n)
	left, refused := n, 0
	var last time.Time
	for left > 0 {
		for i := range hashes {
			if lat[i] != 0 {
				continue
			}
			if res, err := nodes[0].rpc.Tx(ctx, hashes[i], false); err == nil {
				lat[i] = time.Since(sent[i])
				left--
				if res.TxResult.Code != 0 {
					refused++ // in a block, refused by it: not a record
					lat[i] = -1
					continue
				}
				last = time.Now()
			} else {
				break // later ones were sent later: poll again
			}
		}
		if ctx.Err() != nil {
			b.Fatalf("%d records not committed", left)
		}
		if left > 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	b.StopTimer()
	ok := lat[:0]
	for _, l := range lat {
		if l >= 0 {
			ok = append(ok, l)
		}
	}
	if len(ok) == 0 {
		b.Fatalf("all %d records refused in their blocks", n)
	}
	lat = ok
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	tps := float64(len(lat)) / last.Sub(start).Seconds()
	b.ReportMetric(float64(refused), "refused_in_block")
	b.ReportMetric(tps, "records/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50_commit_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99_commit_ms")
	return tps
}

func mustTx(tb testing.TB) func([]byte, error) []byte {
	return func(tx []byte, err error) []byte {
		if err != nil {
			tb.Fatal(err)
		}
		return tx
	}
}

// benchSetup (chainBenchRun) is the run the chain benchmarks load (BenchmarkChainSubmissions,
// TestThroughputBench): task "bench", Mean, K = M = trainers, frags
// fragments of one F32 value each, grace window and round deadline an hour,
// one elected syncer candidate, every trainer funded and enrolled.
type benchSetup struct {
	trainers int
	sponsor  *did.Key
	keys     []*did.Key
	// setup posts, funds, elects and enrols, in order (the sponsor's
	// allocation comes from the testnet's --alloc).
	setup [][]byte
}

func chainBenchRun(tb testing.TB, trainers, frags int) *benchSetup {
	tb.Helper()
	must := mustTx(tb)
	r := &benchSetup{trainers: trainers, sponsor: chainKey(tb, did.KindHuman, 1), keys: make([]*did.Key, trainers)}
	spec := []byte(fmt.Sprintf(`{"task_id":"bench","sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"f32"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":4,"max_rounds":1,"grace_window_ms":3600000,"round_deadline_ms":3600000,
 "reward_pool":"2000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,"created_at":1761350400}`, r.sponsor.DID, frags, frags, trainers, trainers))
	rules, err := chain.MeanRules()
	if err != nil {
		tb.Fatal(err)
	}
	layout := &wire.InitLayout{File: wire.ContentHash([]byte("bench-init"))}
	var fh []wire.Hash
	for f := 0; f < frags; f++ {
		h := wire.ContentHash([]byte(fmt.Sprint("w", f)))
		fh = append(fh, h)
		layout.Fragments = append(layout.Fragments, wire.FragmentLayout{Tensors: []wire.TensorInfo{{Name: fmt.Sprintf("t%04d", f), Dtype: "F32", Shape: []int64{1}}},
			Dtype: "F32", N: 1, WeightsHash: h})
	}
	layout.Model = machine.ModelHash(fh)
	cand := chainKey(tb, did.KindMachine, 9)
	_, canon, err := wire.ParseSpec(spec)
	if err != nil {
		tb.Fatal(err)
	}
	proof, err := vrf.Prove(cand.Priv, election.Alpha("bench", wire.SpecHash(canon)))
	if err != nil {
		tb.Fatal(err)
	}
	r.setup = [][]byte{must(chain.TransferTx(testnetChainID, r.sponsor, cand.DID.String(), "100000000000000000000", 1)), must(chain.PostTaskTx(testnetChainID, r.sponsor, spec, layout, rules, 2))}
	for i := range r.keys {
		r.keys[i] = chainKey(tb, did.KindMachine, byte(10+i))
		r.setup = append(r.setup, must(chain.TransferTx(testnetChainID, r.sponsor, r.keys[i].DID.String(), "100000000000000000000", uint64(3+i))))
	}
	r.setup = append(r.setup, must(chain.RegisterSyncerTx(testnetChainID, cand, "50", 1)), must(chain.ElectionProofTx(testnetChainID, cand, "bench", proof, 2)))
	for i := range r.keys {
		r.setup = append(r.setup, must(chain.EnrollTx(testnetChainID, r.keys[i], "bench", "10000000000000000", 1)))
	}
	return r
}

// start commits the setup transactions through c, each with success, and
// waits for the run to be running.
func (r *benchSetup) start(tb testing.TB, ctx context.Context, c *rpchttp.HTTP) {
	tb.Helper()
	for i, tx := range r.setup {
		res, err := c.BroadcastTxCommit(ctx, tx)
		if err != nil {
			tb.Fatal(err)
		}
		if res.CheckTx.Code != 0 || res.TxResult.Code != 0 {
			tb.Fatalf("setup tx %d refused: %s%s", i, res.CheckTx.Log, res.TxResult.Log)
		}
	}
	for {
		res, err := c.ABCIQuery(ctx, chain.QueryRun, []byte("bench"))
		var st struct{ Status string }
		if err == nil && res.Response.Code == 0 && json.Unmarshal(res.Response.Value, &st) == nil && st.Status == wire.StatusRunning {
			return
		}
		if ctx.Err() != nil {
			tb.Fatal("the run did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// submission is record i of round 0: trainer i mod trainers, fragment
// i / trainers.
func (r *benchSetup) submission(tb testing.TB, i int) []byte {
	tx, err := chain.SubmissionTx(testnetChainID, r.keys[i%r.trainers], "bench", 0, uint64(i/r.trainers), wire.ContentHash([]byte(fmt.Sprint(i))), 33<<20)
	if err != nil {
		tb.Fatal(err)
	}
	return tx
}
