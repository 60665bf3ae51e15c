package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestSubmitLatencyBench measures submission-to-commit latency (the
// JSON-RPC submit call, which answers once the record is committed) on 4
// local validators through a light client vs through the elected syncer's
// own node, alternating one submission at a time in the same run. Nothing
// is asserted about speed.
//
//	TENZRO_NET_BENCH=1 nice go test ./e2e -run TestSubmitLatencyBench -v
func TestSubmitLatencyBench(t *testing.T) {
	if os.Getenv("TENZRO_NET_BENCH") != "1" {
		t.Skip("a benchmark: set TENZRO_NET_BENCH=1")
	}
	const (
		nTrainers, F, N = 16, 8, 64
		task            = "lat-run"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, light, trainers, run := benchRun(ctx, t, task, nTrainers, F, N, 1, func(n *testNet, _ *chainNode) *chainNode { return n.vals[1] })
	succ, err := election.Succession(*run.Election)
	if err != nil {
		t.Fatal(err)
	}
	syncerNode := n.byDID(succ[0].DID)
	lat := map[string][]time.Duration{}
	for f := 0; f < F; f++ {
		w, err := syncerNode.client().GetWeights(ctx, wire.GetWeightsParams{TaskID: task, FragmentIndex: uint64(f)})
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range trainers {
			via, name := syncerNode, "the syncer's node"
			if (i+f)%2 == 0 {
				via, name = light, "a light client"
			}
			payload, err := gradientBytes(w.Payload, task, k.DID.String(), i, 0, f)
			if err != nil {
				t.Fatal(err)
			}
			g := &wire.OuterGradient{ChainID: "tenzro-testnet", TaskID: task, TrainerDID: k.DID.String(), Round: 0, FragmentIndex: uint64(f),
				GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
			g.Signature = k.Sign(g.Preimage())
			start := time.Now()
			if _, err := via.client().Submit(ctx, g); err != nil {
				t.Fatalf("trainer %d fragment %d via %s: %v", i, f, name, err)
			}
			lat[name] = append(lat[name], time.Since(start))
		}
	}
	fmt.Printf("| submitted through | n | p50 ms | p99 ms | min–max ms |\n|---|---|---|---|---|\n")
	for _, name := range []string{"the syncer's node", "a light client"} {
		d := lat[name]
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
		fmt.Printf("| %s | %d | %.0f | %.0f | %.0f–%.0f |\n", name, len(d), ms(d[len(d)/2]), ms(d[len(d)*99/100]), ms(d[0]), ms(d[len(d)-1]))
	}
}

// benchRun starts 4 validators and a light client booted from node 0,
// posts on node 0 a Mean run named task of nTrainers trainers (quorum: all
// of them), F fragments of N f32 and maxRounds rounds, enrols every trainer
// through enrolVia's node, and returns once the light client sees the run
// running. TENZRO_BENCH_NODE_FLAGS adds tenzro-node flags to every validator.
func benchRun(ctx context.Context, t *testing.T, task string, nTrainers, F, N, maxRounds int,
	enrolVia func(n *testNet, light *chainNode) *chainNode, extra ...map[string]string) (*testNet, *chainNode, []*did.Key, *wire.RunView) {
	t.Helper()
	sponsor := chainKey(t, did.KindHuman, 71)
	trainers := make([]*did.Key, nTrainers)
	allocs := map[string]string{sponsor.DID.String(): "10000000000000000000000"}
	for i := range trainers {
		trainers[i] = chainKey(t, did.KindMachine, byte(80+i))
		allocs[trainers[i].DID.String()] = "200000000000000000000"
	}
	for _, m := range extra {
		for k, v := range m {
			allocs[k] = v
		}
	}
	n := startNet(t, netOptions{validators: 4, allocs: allocs, nodeFlags: strings.Fields(os.Getenv("TENZRO_BENCH_NODE_FLAGS"))})
	light := n.startLight("light", "light-client", 0)
	spec := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"f32"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":4,"max_rounds":%d,"grace_window_ms":600000,
 "round_deadline_ms":600000,"reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400}`, task, sponsor.DID, F*N, F, nTrainers, nTrainers, maxRounds)
	specPath, keyPath := filepath.Join(n.dir, "spec.json"), filepath.Join(n.dir, "sponsor.key")
	if err := os.WriteFile(specPath, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sponsor.Save(keyPath); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(binDir, "tenzro"), "train", "post-task", "--spec", specPath, "--init-weights", writeInitN(t, n.dir, F, N),
		"--key", keyPath, "--rpc", "http://"+n.vals[0].jsonRPC).CombinedOutput(); err != nil {
		t.Fatalf("post-task: %v\n%s", err, out)
	}
	via := enrolVia(n, light)
	waitRun(t, n, via, task, time.Minute, via.name+" sees the run", func(r *wire.RunView) bool { return true })
	for _, k := range trainers {
		p := &wire.EnrollParams{TaskID: task, TrainerDID: k.DID.String(), Stake: "100000000000000000000", Signed: wire.Signed{ChainID: "tenzro-testnet", Nonce: 1}}
		p.Signature = k.Sign(p.Preimage())
		if _, err := via.client().Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	run := waitRun(t, n, light, task, 2*time.Minute, "the run starts", func(r *wire.RunView) bool { return r.Status == wire.StatusRunning })
	return n, light, trainers, run
}
