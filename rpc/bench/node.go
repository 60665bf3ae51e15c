package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// The ingest benchmark (bench/README.md, bench/results/ingest.md) measures,
// in one run and per repetition:
//
//   - loopback: a trivial net/http server in its own process whose handler
//     reads the body into io.Discard, fed raw PUT bodies of the same sizes:
//     the ceiling of HTTP on this machine;
//   - base64 into a real node (the seed's JSON-RPC form) with the -before
//     binary (e.g. main) and with -node;
//   - put into a real -node: PUT /blobs/<hash>, then the small signed
//     submission by reference.
//
// Each real-node case posts its own run with one F32 fragment of N values
// and n+1 trainers (K = M = n+1, so no aggregation runs), then sends n
// signed submissions of distinct payloads from c concurrent clients. The
// node's peak RSS is reset (clear_refs 5) before the submissions; VmHWM
// after them, and RssAnon sampled every 2 ms, give the peak above the
// baseline. Payloads are built before the clock starts.

type ingestResult struct {
	mode  string
	n     int // f32 values
	bytes int // payload bytes
	conc  int
	subs  int
	secs  float64
	hwmKB int64 // VmHWM − VmRSS before, KiB
	anon  int64 // peak RssAnon − RssAnon before, KiB
	heap  int64 // peak Go heap in use − before, bytes (the node's /metrics)
}

func (r ingestResult) mbps() float64 { return float64(r.subs) * float64(r.bytes) / 1e6 / r.secs }

type ingestBench struct {
	sizes  []int
	concs  []int
	subs   int
	engine string
}

// runIngest is -node: reps repetitions of every case.
func runIngest(nodeBin, beforeBin, engine string, sizes, concs []int, subs, reps int, idle bool) {
	b := ingestBench{sizes: sizes, concs: concs, subs: subs, engine: engine}
	var all []ingestResult
	for rep := 0; rep < reps; rep++ {
		all = append(all, b.loopback()...)
		if beforeBin != "" {
			all = append(all, b.node(beforeBin, "base64 (before)")...)
		}
		all = append(all, b.node(nodeBin, "base64")...)
		all = append(all, b.node(nodeBin, "put")...)
		if idle {
			all = append(all, b.node(nodeBin, "idle")...)
		}
		log.Printf("repetition %d of %d done", rep+1, reps)
	}
	report(all)
}

var payloadSeq atomic.Int64

// payloads builds count safetensors payloads of N f32 values, distinct
// from each other and from every payload built before in this process (a
// blob a node already holds would not be sent again).
func payloads(n, count int) [][]byte {
	out := make([][]byte, count)
	for i := range out {
		g := make([]float32, n)
		for j := range g {
			g[j] = float32((j+i)%13) * 1e-4
		}
		g[0] = float32(payloadSeq.Add(1))
		b, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{int64(n)}, g)}, nil)
		if err != nil {
			log.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// drive sends each job with f from conc goroutines and returns the seconds.
func drive(jobs, conc int, f func(i int) error) float64 {
	work := make(chan int, jobs)
	for i := 0; i < jobs; i++ {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					log.Fatalf("job %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start).Seconds()
}

const loopbackEnv = "TENZRO_RPC_BENCH_LOOPBACK"

// serveLoopback is the trivial server: every body into io.Discard.
func serveLoopback(addr string) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	})
	log.Fatal(http.ListenAndServe(addr, h))
}

func (b ingestBench) loopback() []ingestResult {
	addr := freeAddr()
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), loopbackEnv+"="+addr)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	waitHTTP("http://" + addr)
	var out []ingestResult
	for _, n := range b.sizes {
		ps := payloads(n, b.subs)
		for _, c := range b.concs {
			secs := drive(b.subs, c, func(i int) error {
				resp, err := http.DefaultClient.Do(mustReq(http.MethodPut, "http://"+addr+"/x", ps[i]))
				if err != nil {
					return err
				}
				resp.Body.Close()
				return nil
			})
			out = append(out, ingestResult{mode: "loopback", n: n, bytes: len(ps[0]), conc: c, subs: b.subs, secs: secs})
		}
	}
	return out
}

func mustReq(method, url string, body []byte) *http.Request {
	r, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	return r
}

func waitHTTP(url string) {
	for i := 0; ; i++ {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if i > 200 {
			log.Fatalf("%s did not start: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// node runs every size and concurrency against one fresh node process.
func (b ingestBench) node(bin, mode string) []ingestResult {
	dir, err := os.MkdirTemp("", "tenzro-ingest-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	addr := freeAddr()
	node := exec.Command(bin, "--dev", "--engine", b.engine, "--data-dir", filepath.Join(dir, "node"), "--rpc-addr", addr,
		"--listen-addr", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn")
	node.Stderr = os.Stderr
	if err := node.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = node.Process.Kill(); _ = node.Wait() }()
	ctx := context.Background()
	c := client.New("http://"+addr, client.WithTimeout(10*time.Minute))
	for i := 0; ; i++ {
		if _, err := c.Info(ctx); err == nil {
			break
		}
		if i > 200 {
			log.Fatal("node did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every case's run is posted first (each carries its initial weights,
	// which the node writes to its database), then the node is left alone
	// for a few seconds, so the database's flushes and compactions of those
	// writes do not land in the measured window.
	var cases []*ingestCase
	for _, n := range b.sizes {
		for _, conc := range b.concs {
			cases = append(cases, b.setup(c, n, conc))
		}
	}
	settle(c.URL())
	var out []ingestResult
	for _, ic := range cases {
		out = append(out, b.measure(c, node.Process.Pid, mode, ic))
	}
	return out
}

// ingestCase is a posted run ready for its submissions.
type ingestCase struct {
	n, conc int
	ps      [][]byte
	subs    []*wire.OuterGradient
	keys    []*did.Key // subs[i] is signed by keys[i]
}

var taskSeq atomic.Int64

func (b ingestBench) setup(c *client.Client, n, conc int) *ingestCase {
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	task := fmt.Sprintf("ingest-%d", taskSeq.Add(1))
	sponsor, err := did.Generate(did.KindHuman, nil)
	must(err)
	_, err = c.Faucet(ctx, wire.FaucetParams{DID: sponsor.DID.String(), Amount: "1000000000000"})
	must(err)
	init, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{int64(n)}, make([]float32, n))}, nil)
	must(err)
	m := b.subs + 1
	spec, _ := json.Marshal(map[string]any{"task_id": task, "sponsor_did": sponsor.DID.String(), "sponsor_address": "0x11",
		"architecture": map[string]any{"family": "timesfm", "param_count": n, "modality": "Timeseries", "fragment_count": 1, "dtype": "f32"},
		"tier":         "Open", "aggregation": "Mean", "trainer_count": m, "quorum": m, "inner_steps": 1, "max_rounds": 2, "grace_window_ms": 3600000,
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
		ep := &wire.EnrollParams{TaskID: task, TrainerDID: trainers[i].DID.String(), Stake: "10", Signed: wire.Signed{Nonce: uint64(time.Now().UnixNano())}}
		ep.Signature = trainers[i].Sign(ep.Preimage())
		_, err = c.Enroll(ctx, ep)
		must(err)
	}
	run, err := c.GetRun(ctx, task)
	must(err)
	ps := payloads(n, b.subs)
	subs := make([]*wire.OuterGradient, b.subs)
	for i := range subs {
		s := &wire.OuterGradient{TaskID: task, TrainerDID: trainers[i].DID.String(), Round: run.Round, PayloadHash: wire.ContentHash(ps[i])}
		s.Signature = trainers[i].Sign(s.Preimage())
		subs[i] = s
	}
	return &ingestCase{n: n, conc: conc, ps: ps, subs: subs, keys: trainers}
}

func (b ingestBench) measure(c *client.Client, pid int, mode string, ic *ingestCase) ingestResult {
	ctx := context.Background()
	must := func(err error) {
		if err != nil {
			log.Fatal(err)
		}
	}
	n, conc, ps, subs := ic.n, ic.conc, ic.ps, ic.subs
	must(os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0))
	base := procKB(pid, "VmRSS")
	anon0 := procKB(pid, "RssAnon")
	var peakAnon, peakHeap atomic.Int64
	heap0 := goHeap(c.URL())
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
				if v := procKB(pid, "RssAnon"); v > peakAnon.Load() {
					peakAnon.Store(v)
				}
				if i%10 == 0 { // every 20 ms: a scrape costs the node a little
					if v := goHeap(c.URL()); v > peakHeap.Load() {
						peakHeap.Store(v)
					}
				}
			}
		}
	}()
	if mode == "idle" {
		// Control: the same node and run, no submissions, for 2 s.
		time.Sleep(2 * time.Second)
		close(stop)
		<-sampled
		hwm := procKB(pid, "VmHWM")
		return ingestResult{mode: mode, n: n, bytes: len(ps[0]), conc: conc, subs: b.subs, secs: 2, hwmKB: hwm - base, anon: max(peakAnon.Load()-anon0, 0), heap: max(peakHeap.Load()-heap0, 0)}
	}
	secs := drive(b.subs, conc, func(i int) error {
		g := *subs[i]
		if mode == "put" {
			if _, err := c.PutBlobSigned(ctx, client.BlobSigner{Key: ic.keys[i], Task: g.TaskID}, g.PayloadHash, bytes.NewReader(ps[i]), int64(len(ps[i]))); err != nil {
				return err
			}
		} else {
			g.GradientPayload = ps[i]
		}
		res, err := c.Submit(ctx, &g)
		if err == nil && !res.Accepted {
			err = fmt.Errorf("not accepted: %+v", res)
		}
		return err
	})
	close(stop)
	<-sampled
	hwm := procKB(pid, "VmHWM")
	return ingestResult{mode: mode, n: n, bytes: len(ps[0]), conc: conc, subs: b.subs, secs: secs, hwmKB: hwm - base, anon: max(peakAnon.Load()-anon0, 0), heap: max(peakHeap.Load()-heap0, 0)}
}

// report prints one markdown row per case: the median over repetitions
// with the range, and each case's throughput as a share of the loopback
// server's at the same size and concurrency in the same repetition.
func report(all []ingestResult) {
	type key struct {
		mode    string
		n, conc int
	}
	groups := map[key][]int{}
	var order []key
	for i, r := range all {
		k := key{r.mode, r.n, r.conc}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	// Ratio to loopback: the i-th repetition of a case against the i-th of
	// the loopback case.
	ratio := func(k key, rep int) float64 {
		lb := groups[key{"loopback", k.n, k.conc}]
		if rep >= len(lb) {
			return 0
		}
		return all[groups[k][rep]].mbps() / all[lb[rep]].mbps()
	}
	fmt.Println("| mode | N (f32) | payload MB | clients | MB/s median (range) | ÷ loopback median (range) | peak above baseline per in-flight submission, × payload: VmHWM (all RSS) | RssAnon | Go heap in use |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, k := range order {
		var mb, rt, hwm, anon, heap []float64
		var r0 ingestResult
		for rep, i := range groups[k] {
			r := all[i]
			r0 = r
			inflight := float64(min(r.conc, 2))
			mb = append(mb, r.mbps())
			rt = append(rt, ratio(k, rep))
			hwm = append(hwm, float64(r.hwmKB)*1024/inflight/float64(r.bytes))
			anon = append(anon, float64(r.anon)*1024/inflight/float64(r.bytes))
			heap = append(heap, float64(r.heap)/inflight/float64(r.bytes))
		}
		row := fmt.Sprintf("| %s | %d | %.1f | %d | %s | ", k.mode, k.n, float64(r0.bytes)/1e6, k.conc, medRange(mb, "%.0f"))
		if k.mode == "loopback" || k.mode == "idle" {
			if k.mode == "idle" {
				row = fmt.Sprintf("| idle (control: the same setup, no submission, 2 s) | %d | %.1f | – | – | – | %s | %s | %s |", k.n, float64(r0.bytes)/1e6, medRange(hwm, "%.2f"), medRange(anon, "%.2f"), medRange(heap, "%.2f"))
				fmt.Println(row)
				continue
			}
			row += "1 | – | – | – |"
		} else {
			row += fmt.Sprintf("%s | %s | %s | %s |", medRange(rt, "%.2f"), medRange(hwm, "%.2f"), medRange(anon, "%.2f"), medRange(heap, "%.2f"))
		}
		fmt.Println(row)
	}
}

// settle waits until the node's Go heap has stayed within 1 MiB for 3 s
// (its database done flushing and compacting what the setup wrote), at
// least 5 s and at most 90 s.
func settle(url string) {
	start := time.Now()
	var last int64
	stable := 0
	for time.Since(start) < 90*time.Second {
		time.Sleep(500 * time.Millisecond)
		v := goHeap(url)
		if d := v - last; d > -1<<20 && d < 1<<20 {
			stable++
		} else {
			stable = 0
		}
		last = v
		if stable >= 6 && time.Since(start) >= 5*time.Second {
			return
		}
	}
	log.Printf("node did not settle within 90 s")
}

// goHeap reads go_memstats_heap_inuse_bytes from the node's /metrics.
func goHeap(rpcURL string) int64 {
	resp, err := http.Get(strings.TrimSuffix(rpcURL, "/") + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f)
		}
	}
	return 0
}

func medRange(v []float64, f string) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if len(s) == 1 {
		return fmt.Sprintf(f, med)
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", med, s[0], s[len(s)-1])
}

func parseInts(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			log.Fatalf("%q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}
