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
	t := b
	build(b)
	sponsor := chainKey(t, did.KindHuman, 1)
	dir := b.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "testnet", "--validators", fmt.Sprint(validators), "--dir", dir,
		"--base-port", "0", "--block-time", "200ms", "--alloc", sponsor.DID.String()+"=1000000000000000000000000").CombinedOutput()
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
	spec := []byte(fmt.Sprintf(`{"task_id":"bench","sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"bf16"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":4,"max_rounds":1,"grace_window_ms":3600000,"round_deadline_ms":3600000,
 "reward_pool":"2000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,"created_at":1761350400}`, sponsor.DID, frags, frags, trainers, trainers))
	keys := make([]*did.Key, trainers)
	rules, err := chain.MeanRules()
	if err != nil {
		b.Fatal(err)
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
	cand := chainKey(t, did.KindMachine, 9)
	_, canon, _ := wire.ParseSpec(spec)
	proof, err := vrf.Prove(cand.Priv, election.Alpha("bench", wire.SpecHash(canon)))
	if err != nil {
		b.Fatal(err)
	}
	setup := [][]byte{mustTx(b)(chain.TransferTx(testnetChainID, sponsor, cand.DID.String(), "100000000000000000000", 1)), mustTx(b)(chain.PostTaskTx(testnetChainID, sponsor, spec, layout, rules, 2))}
	for i := range keys {
		keys[i] = chainKey(t, did.KindMachine, byte(10+i))
		setup = append(setup, mustTx(b)(chain.TransferTx(testnetChainID, sponsor, keys[i].DID.String(), "100000000000000000000", uint64(3+i))))
	}
	setup = append(setup, mustTx(b)(chain.RegisterSyncerTx(testnetChainID, cand, "50", 1)), mustTx(b)(chain.ElectionProofTx(testnetChainID, cand, "bench", proof, 2)))
	for i := range keys {
		setup = append(setup, mustTx(b)(chain.EnrollTx(testnetChainID, keys[i], "bench", "10000000000000000", 1)))
	}
	for i, tx := range setup {
		res, err := nodes[0].rpc.BroadcastTxCommit(ctx, tx)
		if err != nil {
			b.Fatal(err)
		}
		if res.CheckTx.Code != 0 || res.TxResult.Code != 0 {
			b.Fatalf("setup tx %d refused: %s%s", i, res.CheckTx.Log, res.TxResult.Log)
		}
	}
	for {
		res, err := nodes[0].rpc.ABCIQuery(ctx, chain.QueryRun, []byte("bench"))
		var r struct{ Status string }
		if err == nil && res.Response.Code == 0 && json.Unmarshal(res.Response.Value, &r) == nil && r.Status == wire.StatusRunning {
			break
		}
		if ctx.Err() != nil {
			b.Fatal("the run did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	txs := make([][]byte, n)
	for i := range txs {
		k, f := keys[i%trainers], uint64(i/trainers)
		txs[i] = mustTx(b)(chain.SubmissionTx(testnetChainID, k, "bench", 0, f, wire.ContentHash([]byte(fmt.Sprint(i))), 33<<20))
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

func mustTx(b *testing.B) func([]byte, error) []byte {
	return func(tx []byte, err error) []byte {
		if err != nil {
			b.Fatal(err)
		}
		return tx
	}
}
