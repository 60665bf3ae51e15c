package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// benchNode measures ingest through a real tenzro-node process: one run
// with a single fragment of size bytes (F32), n trainers enrolled (K = M =
// n+1 so no aggregation runs), n signed submissions. The node's peak RSS
// is reset (clear_refs 5) after setup so posting does not count.
func benchNode(bin, engine string, n, size, conc int) {
	dir, err := os.MkdirTemp("", "tenzro-ingest-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	node := exec.Command(bin, "--dev", "--engine", engine, "--data-dir", filepath.Join(dir, "node"), "--rpc-addr", addr,
		"--listen-addr", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn")
	node.Stderr = os.Stderr
	if err := node.Start(); err != nil {
		log.Fatal(err)
	}
	defer node.Process.Kill()
	ctx := context.Background()
	c := client.New("http://" + addr)
	for i := 0; ; i++ {
		if _, err := c.Info(ctx); err == nil {
			break
		}
		if i > 200 {
			log.Fatal("node did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}

	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	sponsor, err := did.Generate(did.KindHuman, nil)
	must(err)
	_, err = c.Faucet(ctx, wire.FaucetParams{DID: sponsor.DID.String(), Amount: "1000000"})
	must(err)
	nv := size / 4
	w := make([]float32, nv)
	for i := range w {
		w[i] = float32(i%97) * 0.001
	}
	init, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{int64(nv)}, w)}, nil)
	must(err)
	m := n + 1
	spec, _ := json.Marshal(map[string]any{"task_id": "ingest", "sponsor_did": sponsor.DID.String(), "sponsor_address": "0x11",
		"architecture": map[string]any{"family": "timesfm", "param_count": nv, "modality": "Timeseries", "fragment_count": 1, "dtype": "f32"},
		"tier":         "Open", "aggregation": "Mean", "trainer_count": m, "quorum": m, "inner_steps": 1, "max_rounds": 2, "grace_window_ms": 600000,
		"reward_pool": "1000", "dataset_ref": "x", "dataset_hash": "0x00", "min_throughput": nil, "created_at": 1})
	_, canon, err := wire.ParseSpec(spec)
	must(err)
	pp := &wire.PostTaskParams{Spec: spec, InitWeights: init, Signed: wire.Signed{Nonce: uint64(time.Now().UnixNano())}}
	pp.Signature = sponsor.Sign(pp.Preimage(sponsor.DID.String(), wire.SpecHash(canon), wire.ContentHash(init)))
	_, err = c.PostTask(ctx, pp)
	must(err)
	trainers := make([]*did.Key, m)
	for i := range trainers {
		trainers[i], err = did.Generate(did.KindMachine, nil)
		must(err)
		_, err = c.Faucet(ctx, wire.FaucetParams{DID: trainers[i].DID.String(), Amount: "100"})
		must(err)
		ep := &wire.EnrollParams{TaskID: "ingest", TrainerDID: trainers[i].DID.String(), Stake: "10", Signed: wire.Signed{Nonce: uint64(time.Now().UnixNano())}}
		ep.Signature = trainers[i].Sign(ep.Preimage())
		_, err = c.Enroll(ctx, ep)
		must(err)
	}
	run, err := c.GetRun(ctx, "ingest")
	must(err)
	g := make([]float32, nv)
	for i := range g {
		g[i] = float32(i%13) * 1e-4
	}
	payload, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{int64(nv)}, g)}, nil)
	must(err)
	subs := make([]*wire.OuterGradient, n)
	for i := range subs {
		s := &wire.OuterGradient{TaskID: "ingest", TrainerDID: trainers[i].DID.String(), Round: run.Round, GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
		s.Signature = trainers[i].Sign(s.Preimage())
		subs[i] = s
	}
	pid := node.Process.Pid
	must(os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0))
	base := procKB(pid, "VmRSS")
	start := time.Now()
	work := make(chan *wire.OuterGradient, n)
	for _, s := range subs {
		work <- s
	}
	close(work)
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if _, err := c.Submit(ctx, s); err != nil {
					log.Fatalf("submit: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	hwm := procKB(pid, "VmHWM")
	mb := float64(len(payload)) / 1e6
	fmt.Printf("real node (%s engine): payload %.1f MB safetensors, %d accepted submissions, concurrency %d\n", engine, mb, n, conc)
	fmt.Printf("throughput: %.2f submissions/s, %.1f MB/s of payload (%.0f ms per submission, signature+hash+safetensors checks+synced Pebble batch)\n",
		float64(n)/el.Seconds(), float64(n)*mb/el.Seconds(), el.Seconds()*1000/float64(n))
	inflight := float64(min(conc, 2))
	fmt.Printf("node RSS before: %.1f MB, peak during ingest: %.1f MB, peak above baseline per in-flight submission: %.1f MB = %.1f × payload\n",
		float64(base)/1024, float64(hwm)/1024, float64(hwm-base)/1024/inflight, float64(hwm-base)*1024/inflight/float64(len(payload)))
}
