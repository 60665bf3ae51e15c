package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
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
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n, light, trainers, _ := benchRun(ctx, t, task, nTrainers, F, N, 2, func(_ *testNet, light *chainNode) *chainNode { return light })
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
			payload, err := gradientBytes(ws[f], task, k.DID.String(), i, 0, f)
			if err != nil {
				t.Fatal(err)
			}
			payloadBytes += float64(len(payload))
			g := &wire.OuterGradient{ChainID: "tenzro-testnet", TaskID: task, TrainerDID: k.DID.String(), Round: 0, FragmentIndex: uint64(f),
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
