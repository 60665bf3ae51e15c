package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/internal/hostilemod"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// startWasmNode runs the real wiring with the wasm engine (plugin workers:
// this test binary, through TestMain) and returns a client; the node stops
// at the end of the test.
func startWasmNode(t *testing.T) *client.Client {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := defaults()
	cfg.DataDir, cfg.NodeKey, cfg.RPCAddr, cfg.ListenAddr, cfg.Dev, cfg.Engine = dir, filepath.Join(dir, "node.key"), addr, "/ip4/127.0.0.1/tcp/0", true, "wasm"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runNode(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("node did not stop")
		}
	})
	c := client.New("http://"+addr, client.WithTimeout(60*time.Second))
	for i := 0; ; i++ {
		if _, err = c.Info(context.Background()); err == nil {
			return c
		}
		select {
		case err := <-done:
			t.Fatalf("node exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if i > 1200 {
			t.Fatalf("node did not answer: %v", err)
		}
	}
}

// rss is this process's (the node's) resident set size.
func rss(t *testing.T) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// whileResponsive runs op and meanwhile requires every tenzro_nodeInfo to
// answer within 2 s (a generous bound on an event: before out-of-process
// workers, a looping plugin stopped every handler for minutes).
func whileResponsive(t *testing.T, c *client.Client, op func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	for n := 0; ; n++ {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.Info(ctx)
		cancel()
		if d := time.Since(start); err != nil || d > 2*time.Second {
			t.Fatalf("nodeInfo during the attack: %v after %v", err, d)
		}
		runtime.GC() // a stop-the-world in the node's process completes too
		select {
		case err := <-done:
			t.Logf("%d nodeInfo calls answered during the attack", n+1)
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func publish(ctx context.Context, c *client.Client, key *did.Key, nonce uint64, mod []byte) (*wire.PluginInfo, error) {
	p := &wire.PublishPluginParams{DID: key.DID.String(), Module: mod, Signed: wire.Signed{ChainID: "tenzro-dev", Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return c.PublishPlugin(ctx, p)
}

func hostile(t *testing.T, abiBody, aggBody []byte, pages uint32) []byte {
	m, err := hostilemod.Build(abiBody, aggBody, pages)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const hostileSpec = `{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":1024,"modality":"Timeseries","fragment_count":1,
 "dtype":"f32","metadata":{"context_len":32,"horizon":8}},"tier":"Open","aggregation":%q,
 "trainer_count":2,"quorum":2,"inner_steps":24,"max_rounds":2,"grace_window_ms":1000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400}`

func postRun(ctx context.Context, c *client.Client, sponsor *did.Key, nonce uint64, task, rule string, weights []byte) error {
	raw := []byte(fmt.Sprintf(hostileSpec, task, sponsor.DID.String(), rule))
	_, canon, err := wire.ParseSpec(raw)
	if err != nil {
		return err
	}
	p := &wire.PostTaskParams{Spec: raw, InitWeights: weights, Signed: wire.Signed{ChainID: "tenzro-dev", Nonce: nonce}}
	var wh wire.Hash // zero when no weights (PROTOCOL §3)
	if len(weights) > 0 {
		wh = wire.ContentHash(weights)
	}
	p.Signature = sponsor.Sign(p.Preimage(sponsor.DID.String(), wire.SpecHash(canon), wh))
	_, err = c.PostTask(ctx, p)
	return err
}

// TestHostilePluginsAgainstTheNode reproduces findings 1 and 2 against the
// real node: a 257-byte-class plugin whose tenzro_abi_version loops, memory
// bombs at postTask's quorum probe (32768 initial pages; a memory.grow loop
// touching every page), and an aggregator that passes the probe and loops
// on the round's real inputs. The node answers another RPC within 2 s
// throughout, its RSS grows by less than 512 MB, the publish and posts are
// refused precisely, and writes still go through during the looping
// aggregation (the timer does not hold the node's mutex across it).
func TestHostilePluginsAgainstTheNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and plugin workers")
	}
	ctx := context.Background()
	c := startWasmNode(t)
	key, _ := did.Generate(did.KindHuman, nil)
	var nonce uint64
	next := func() uint64 { nonce++; return nonce }
	runtime.GC()
	before := rss(t)
	report := func(what string) {
		runtime.GC()
		grew := rss(t) - before
		t.Logf("%s: node RSS %+d MB", what, grew>>20)
		if grew > 512<<20 {
			t.Fatalf("%s: node RSS grew by %d MB", what, grew>>20)
		}
	}

	// Publishing and posting cost a burned fee (syncer/fees.go): the
	// attacker needs a funded DID.
	if _, err := c.Faucet(ctx, wire.FaucetParams{DID: key.DID.String(), Amount: "100000000000000000000000"}); err != nil {
		t.Fatal(err)
	}
	err := whileResponsive(t, c, func() error {
		_, err := publish(ctx, c, key, next(), hostile(t, hostilemod.Loop, hostilemod.ReturnZero, 1))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "out of fuel") {
		t.Fatalf("looping tenzro_abi_version: want an out-of-fuel refusal, got %v", err)
	}
	report("looping publish")

	for i, bomb := range []struct {
		name  string
		pages uint32
	}{{"32768 initial pages", 32768}, {"memory.grow loop", 1}} {
		info, err := publish(ctx, c, key, next(), hostile(t, hostilemod.ABIOne, hostilemod.GrowTouch, bomb.pages))
		if err != nil {
			t.Fatalf("%s: publish: %v", bomb.name, err)
		}
		err = whileResponsive(t, c, func() error {
			return postRun(ctx, c, key, next(), fmt.Sprintf("bomb-%d", i), "sha256:"+info.Hash.String(), nil)
		})
		if err == nil || !strings.Contains(err.Error(), "refuses quorum") {
			t.Fatalf("%s: want the quorum probe's refusal, got %v", bomb.name, err)
		}
		report(bomb.name)
	}

	// An aggregator that passes the probe and loops on real inputs.
	info, err := publish(ctx, c, key, next(), hostile(t, hostilemod.ABIOne, hostilemod.LoopUnlessProbe, 16))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{1024}, make([]float32, 1024))}, nil)
	if err := postRun(ctx, c, key, next(), "looping", "sha256:"+info.Hash.String(), w); err != nil {
		t.Fatalf("post: %v", err)
	}
	var trainers []*did.Key
	for i := 0; i < 2; i++ {
		tk, _ := did.Generate(did.KindMachine, nil)
		trainers = append(trainers, tk)
		if _, err := c.Faucet(ctx, wire.FaucetParams{DID: tk.DID.String(), Amount: "1000000000000000000000"}); err != nil {
			t.Fatal(err)
		}
		p := &wire.EnrollParams{TaskID: "looping", TrainerDID: tk.DID.String(), Stake: "100000000000000000000", Signed: wire.Signed{ChainID: "tenzro-dev", Nonce: 1}}
		p.Signature = tk.Sign(p.Preimage())
		if _, err := c.Enroll(ctx, p); err != nil {
			t.Fatalf("enroll: %v", err)
		}
	}
	submitted := make(chan error, 2)
	for k, tk := range trainers {
		// Each trainer's own direction (the copy rule would reject a
		// second identical gradient) and its binding.
		g := make([]float32, 1024)
		for i := range g {
			g[i] = 0.001 * float32((i*(k+2))%11+1)
		}
		payload, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{1024}, g)},
			safetensors.Binding{Trainer: tk.DID.String(), Task: "looping"}.Metadata())
		go func() {
			og := &wire.OuterGradient{ChainID: "tenzro-dev", TaskID: "looping", TrainerDID: tk.DID.String(), Round: 0, FragmentIndex: 0, GradientPayload: payload, PayloadHash: wire.ContentHash(payload)}
			og.Signature = tk.Sign(og.Preimage())
			_, err := c.Submit(ctx, og)
			submitted <- err
		}()
	}
	// The second submission completes the fragment: its aggregation loops
	// in a worker until the backstop; meanwhile the node answers, and a
	// write that needs the node's mutex (a faucet transfer) goes through.
	for range trainers {
		if err := <-submitted; err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	err = whileResponsive(t, c, func() error {
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := c.Faucet(ctx, wire.FaucetParams{DID: key.DID.String(), Amount: "1"}); err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a write during the looping aggregation: %v", err)
	}
	if v, err := c.GetRun(ctx, "looping"); err != nil || v.Round != 0 {
		t.Fatalf("the looping aggregation was recorded: %+v %v", v, err)
	}
	report("looping aggregation")
}
