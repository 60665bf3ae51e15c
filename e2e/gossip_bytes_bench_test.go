package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// p2pBytesOut sums tenzro_p2p_stream_bytes_total{direction="out"} per
// protocol from a node's /metrics.
func p2pBytesOut(t *testing.T, c *chainNode) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + c.jsonRPC + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "tenzro_p2p_stream_bytes_total{") || !strings.Contains(l, `direction="out"`) {
			continue
		}
		i := strings.Index(l, `protocol="`)
		proto := l[i+len(`protocol="`):]
		proto = proto[:strings.IndexByte(proto, '"')]
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[proto] += v
	}
	return out
}

// TestGossipBytesBench (TENZRO_NET_BENCH=1): libp2p bytes sent by every
// node (4 validators, 1 light client) during one round of 4 trainers × 2
// fragments of 1M f32 submitted through the light client, per payload byte,
// by protocol (CometBFT's own p2p, which carries the small records, is not
// libp2p and not counted here).
func TestGossipBytesBench(t *testing.T) {
	if os.Getenv("TENZRO_NET_BENCH") != "1" {
		t.Skip("a benchmark: set TENZRO_NET_BENCH=1")
	}
	const (
		nTrainers, F, N = 4, 2, 1 << 20
		task            = "bytes-run"
	)
	sponsor := chainKey(t, did.KindHuman, 71)
	trainers := make([]*did.Key, nTrainers)
	allocs := map[string]string{sponsor.DID.String(): "10000000000000000000000"}
	for i := range trainers {
		trainers[i] = chainKey(t, did.KindMachine, byte(80+i))
		allocs[trainers[i].DID.String()] = "200000000000000000000"
	}
	n := startNet(t, netOptions{validators: 4, allocs: allocs})
	light := n.startLight("light", 0)
	spec := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"bf16"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":4,"max_rounds":2,"grace_window_ms":600000,
 "round_deadline_ms":600000,"reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400}`, task, sponsor.DID, F*N, F, nTrainers, nTrainers)
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
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	waitRun(t, n, light, task, time.Minute, "the light client sees the run", func(r *wire.RunView) bool { return true })
	for _, k := range trainers {
		p := &wire.EnrollParams{TaskID: task, TrainerDID: k.DID.String(), Stake: "100000000000000000000", Signed: wire.Signed{Nonce: 1}}
		p.Signature = k.Sign(p.Preimage())
		if _, err := light.client().Enroll(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	waitRun(t, n, light, task, 2*time.Minute, "the run starts", func(r *wire.RunView) bool { return r.Status == wire.StatusRunning })
	nodes := append(append([]*chainNode{}, n.vals...), light)
	sum := func() map[string]float64 {
		tot := map[string]float64{}
		for _, c := range nodes {
			for p, v := range p2pBytesOut(t, c) {
				tot[p] += v
			}
		}
		return tot
	}
	// Every node already holds the initial weights it needs: the light
	// client fetched them for the trainers below before the count starts.
	ws := make([][]byte, F)
	for f := 0; f < F; f++ {
		w, err := light.client().GetWeights(ctx, wire.GetWeightsParams{TaskID: task, FragmentIndex: uint64(f)})
		if err != nil {
			t.Fatal(err)
		}
		ws[f] = w.Payload
	}
	before := sum()
	var payloadBytes float64
	for f := 0; f < F; f++ {
		for i, k := range trainers {
			payload, err := gradientBytes(ws[f], i, 0, f)
			if err != nil {
				t.Fatal(err)
			}
			payloadBytes += float64(len(payload))
			g := &wire.OuterGradient{TaskID: task, TrainerDID: k.DID.String(), Round: 0, FragmentIndex: uint64(f),
				GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
			g.Signature = k.Sign(g.Preimage())
			if _, err := light.client().Submit(ctx, g); err != nil {
				t.Fatalf("trainer %d fragment %d: %v", i, f, err)
			}
		}
	}
	waitRun(t, n, light, task, 3*time.Minute, "round 0 commits", func(r *wire.RunView) bool { return r.Round >= 1 })
	// The entrants replicate the new weights and momentum after the commit:
	// count until the totals have not moved for 5 s (a benchmark, not a test).
	after, still := sum(), time.Now()
	for time.Since(still) < 5*time.Second {
		time.Sleep(time.Second)
		now := sum()
		if fmt.Sprint(now) != fmt.Sprint(after) {
			after, still = now, time.Now()
		}
	}
	var protos []string
	for p := range after {
		protos = append(protos, p)
	}
	sort.Strings(protos)
	fmt.Printf("payload bytes submitted: %.0f (%d × %d fragments of %d f32)\n", payloadBytes, nTrainers, F, N)
	fmt.Printf("| protocol | bytes sent by all 5 nodes | per payload byte |\n|---|---|---|\n")
	var total float64
	for _, p := range protos {
		d := after[p] - before[p]
		total += d
		fmt.Printf("| %s | %.0f | %.3f |\n", p, d, d/payloadBytes)
	}
	fmt.Printf("| all libp2p | %.0f | %.3f |\n", total, total/payloadBytes)
}
