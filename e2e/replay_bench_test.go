package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// TestReplayBatchBench sends 1,000 tenzro_training_replayFragment calls to
// one real --dev node process holding a real committed round (issue 22,
// Must show: node RSS and disk bounded during a 1,000-call replay batch).
// The run has F=2 fragments of N F32 values each (TENZRO_REPLAY_N, default
// 1<<20: 4 MiB payloads), M=K=4 trainers who submit through the CLI, and
// its round 0 is committed before the calls start; the spec's challenge
// window (10,000 blocks: the --dev chain's default is 0, final at once)
// keeps the commits replayable. 8 clients then send, in
// random order, 500 single calls (fragments 0 and 1 of round 0, and 10% of
// them for a round that was never committed) and 500 calls inside 63
// JSON-RPC batches of 8 (the last batch 4): the node's RSS
// (/proc/<pid>/status VmRSS) is sampled every 100 ms and its data directory
// before and after. It reports peak RSS ÷ the idle RSS before the calls,
// answers by JSON-RPC code, executions and cache answers (the node's
// /metrics: tenzro_replay_runs_total, tenzro_replay_cache_hits_total). It
// asserts what does not depend on speed: every batch element refused,
// every single call of a committed fragment agreeing, and at most one
// execution per committed fragment (the rest shared or cached).
//
//	TENZRO_REPLAY_BENCH=1 nice go test ./e2e -run TestReplayBatchBench -v -timeout 30m
func TestReplayBatchBench(t *testing.T) {
	if os.Getenv("TENZRO_REPLAY_BENCH") != "1" {
		t.Skip("a benchmark: set TENZRO_REPLAY_BENCH=1")
	}
	n := 1 << 20
	if v := os.Getenv("TENZRO_REPLAY_N"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 || x > 1<<26 {
			t.Fatalf("TENZRO_REPLAY_N %q: want 1..%d values per fragment", v, 1<<26)
		}
		n = x
	}
	const (
		trainers, frags = 4, 2
		calls, batch    = 1000, 8
		clients         = 8
		rtask           = "replay-bench"
	)
	build(t)
	keys, ts, sponsor := makeKeys(t, trainers)
	e := newEnv(t, keys)
	e.start()
	defer e.stop()
	pid := e.node.Process.Pid

	// A real run, round 0 committed.
	spec := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x00000000000000000000000000000000000000aa",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"f32"},
 "tier":"Open","aggregation":"Mean","trainer_count":%d,"quorum":%d,"inner_steps":4,"max_rounds":3,"grace_window_ms":8000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://QmAccept","dataset_hash":"0xabab",
 "challenge_window_blocks":10000,"min_throughput":null,"created_at":1761350400}`, rtask, sponsor, frags*n, frags, trainers, trainers)
	specPath := filepath.Join(e.dir, "spec.json")
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	var init []safetensors.Tensor
	for i := 0; i < frags; i++ {
		v := make([]float32, n)
		for j := range v {
			v[j] = 0.01 * float32(i+1)
		}
		init = append(init, safetensors.FromF32(fmt.Sprintf("layer%d.w", i), []int64{int64(n)}, v))
	}
	raw, err := safetensors.Encode(init, nil)
	if err != nil {
		t.Fatal(err)
	}
	initPath := filepath.Join(e.dir, "init.safetensors")
	if err := os.WriteFile(initPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	e.postAndEnrol(rtask, specPath, initPath, sponsor, ts)
	for f := 0; f < frags; f++ {
		w := filepath.Join(e.dir, fmt.Sprintf("w-%d.safetensors", f))
		e.must("train", "get-weights", "--task-id", rtask, "--fragment", fmt.Sprint(f), "--out", w)
		for i := range ts {
			p := filepath.Join(e.dir, fmt.Sprintf("g-%d-%d.safetensors", i, f))
			if err := os.WriteFile(p, gradientFrom(t, w, i, 0, f), 0o644); err != nil {
				t.Fatal(err)
			}
			e.must("train", "submit-gradient", "--task-id", rtask, "--round", "0", "--fragment", fmt.Sprint(f), "--payload", p,
				"--key", filepath.Join(keys, fmt.Sprintf("t%d.key", i)))
		}
	}
	// M = K: the node (the syncer) commits both fragments and the round.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var v runView
		if err := json.Unmarshal([]byte(e.must("train", "get-run", "--task-id", rtask, "--format", "json")), &v); err != nil {
			t.Fatal(err)
		}
		if v.Round >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("round 0 not committed in 3 minutes: %+v\n%s", v, tail(e.log()))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 10 * time.Minute}
	metric := func(name string) float64 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.rpc+"/metrics", nil)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == name {
				x, _ := strconv.ParseFloat(f[1], 64)
				return x
			}
		}
		t.Fatalf("/metrics has no %s", name)
		return 0
	}
	call := func(round, frag int, id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"task_id":%q,"round":%d,"fragment":%d}}`, id, wire.MethodReplayFragment, rtask, round, frag)
	}
	type answer struct {
		Result *struct {
			Agrees bool `json:"agrees"`
		} `json:"result"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	// The work: 500 singles and 500 calls in batches, shuffled.
	type job struct{ body string }
	rng := rand.New(rand.NewPCG(1, 2))
	var jobs []job
	singles, inBatches := calls/2, calls-calls/2
	for i := 0; i < singles; i++ {
		round := 0
		if i%10 == 9 {
			round = 7 // never committed: refused
		}
		jobs = append(jobs, job{call(round, i%frags, i)})
	}
	for left := inBatches; left > 0; left -= batch {
		var b []string
		for j := 0; j < min(batch, left); j++ {
			b = append(b, call(0, j%frags, j))
		}
		jobs = append(jobs, job{"[" + strings.Join(b, ",") + "]"})
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })

	runs0, hits0 := metric("tenzro_replay_runs_total"), metric("tenzro_replay_cache_hits_total")
	idleRSS, err := rssBytes(pid)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(e.dir, "data")
	disk0, _ := dirBytes(t, dataDir)
	var peak atomic.Int64
	peak.Store(idleRSS)
	sampleDone := make(chan struct{})
	sctx, stopSample := context.WithCancel(ctx)
	go func() {
		defer close(sampleDone)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tk.C:
				if r, err := rssBytes(pid); err == nil && r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	var (
		mu       sync.Mutex
		byCode   = map[string]int{} // "ok agrees", "ok disagrees", or the error code, with single/batch
		lat      []time.Duration
		failures []string
	)
	next := atomic.Int64{}
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) || ctx.Err() != nil {
					return
				}
				body := jobs[i].body
				isBatch := strings.HasPrefix(body, "[")
				t0 := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.rpc, bytes.NewBufferString(body))
				req.Header.Set("Content-Type", "application/json")
				res, err := hc.Do(req)
				if err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
					continue
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				d := time.Since(t0)
				var as []answer
				if isBatch {
					err = json.Unmarshal(b, &as)
				} else {
					var a answer
					err = json.Unmarshal(b, &a)
					as = []answer{a}
				}
				mu.Lock()
				if !isBatch {
					lat = append(lat, d)
				}
				if err != nil {
					failures = append(failures, fmt.Sprintf("HTTP %d %s", res.StatusCode, b))
				}
				kind := "single"
				if isBatch {
					kind = "in a batch"
				}
				for _, a := range as {
					switch {
					case a.Error != nil:
						byCode[fmt.Sprintf("%s: error %d", kind, a.Error.Code)]++
					case a.Result != nil && a.Result.Agrees:
						byCode[kind+": answered, agrees"]++
					default:
						byCode[kind+": answered, does not agree"]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopSample()
	<-sampleDone
	endRSS, _ := rssBytes(pid)
	disk1, _ := dirBytes(t, dataDir)
	runs, hits := metric("tenzro_replay_runs_total")-runs0, metric("tenzro_replay_cache_hits_total")-hits0

	keysSorted := make([]string, 0, len(byCode))
	for k := range byCode {
		keysSorted = append(keysSorted, k)
	}
	sort.Strings(keysSorted)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("replay bench: F=%d fragments of %d F32 values (%.1f MiB payloads), M=K=%d; %d calls (%d single, %d in batches of %d) from %d clients in %s\n",
		frags, n, mib(int64(4*n)), trainers, calls, singles, inBatches, batch, clients, elapsed.Round(time.Millisecond))
	fmt.Printf("| answer | calls |\n|---|---|\n")
	for _, k := range keysSorted {
		fmt.Printf("| %s | %d |\n", k, byCode[k])
	}
	fmt.Printf("executions (tenzro_replay_runs_total) %.0f, cache answers (tenzro_replay_cache_hits_total) %.0f\n", runs, hits)
	fmt.Printf("RSS: idle %.0f MiB, peak %.0f MiB (%.2f×), after %.0f MiB; data dir %.1f → %.1f MiB\n",
		mib(idleRSS), mib(peak.Load()), float64(peak.Load())/float64(idleRSS), mib(endRSS), mib(disk0), mib(disk1))
	if len(lat) > 0 {
		fmt.Printf("single-call latency: p50 %s, p99 %s, max %s\n", lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
	if len(failures) > 0 {
		t.Fatalf("%d calls failed outside JSON-RPC, first: %s", len(failures), failures[0])
	}
	if got := byCode["in a batch: error -32600"]; got != inBatches {
		t.Errorf("%d of %d batch elements refused as invalid requests: %v", got, inBatches, byCode)
	}
	if got, want := byCode["single: answered, agrees"], singles-singles/10; got != want {
		t.Errorf("%d single calls of committed fragments agree, want %d: %v", got, want, byCode)
	}
	// Executions: one per committed fragment at most (identical calls share
	// it, later ones hit the cache), plus the refused round-7 calls, which
	// fail before executing anything and are not cached.
	if max := float64(frags + singles/10); runs > max {
		t.Errorf("%.0f replay runs for %d committed fragments and %d refused calls", runs, frags, singles/10)
	}
}
