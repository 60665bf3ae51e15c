// Command bench measures JSON-RPC submission ingest: throughput and the
// server process's peak RSS per large outer-gradient submission.
//
// Real nodes (bench/results/ingest.md): the loopback HTTP ceiling, the
// seed's base64 JSON-RPC form and PUT /blobs + by-reference submission,
// at N = 1M, 4M, 16.7M f32 values, 1 and 4 clients, with an older binary
// as "before":
//
//	go build -o /tmp/tenzro-node ./cmd/tenzro-node
//	go run ./rpc/bench -node /tmp/tenzro-node [-before /tmp/tenzro-node-main] -reps 3
//
// The RPC layer alone (a Service that hashes the payload and keeps
// nothing; base64 only):
//
//	go run ./rpc/bench -n 8 -size 33554432 -concurrency 4
//
// Both re-execute this binary as the server (a child process, so the
// client's buffers do not count) and read the server's VmHWM from /proc
// (Linux only).
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

const serveEnv = "TENZRO_RPC_BENCH_SERVE"

func main() {
	if addr := os.Getenv(serveEnv); addr != "" {
		serve(addr)
		return
	}
	if addr := os.Getenv(loopbackEnv); addr != "" {
		serveLoopback(addr)
		return
	}
	n := flag.Int("n", 8, "submissions (per case with -node)")
	size := flag.Int("size", 33<<20, "payload bytes (RPC layer alone)")
	conc := flag.Int("concurrency", 1, "concurrent clients (RPC layer alone)")
	slots := flag.Int("slots", rpc.DefaultMaxLargeInFlight, "server's large-request slots (RPC layer alone)")
	nodeBin := flag.String("node", "", "measure a real tenzro-node binary at this path instead of the RPC layer alone")
	before := flag.String("before", "", "with -node: also measure this older binary's base64 ingest, in the same run")
	sizes := flag.String("sizes", "1048576,4194304,16777216", "with -node: payload sizes in f32 values")
	concs := flag.String("concs", "1,4", "with -node: concurrent clients")
	reps := flag.Int("reps", 3, "with -node: repetitions (medians and ranges are reported)")
	engine := flag.String("engine", "native", "with -node: the node's --engine")
	idle := flag.Bool("idle", true, "with -node: also measure the node's RSS with the same setup and no submission (control)")
	mode := flag.String("mode", "base64", "RPC layer alone: base64 (the seed's JSON-RPC form) or put (PUT /blobs into a real blob store, then the by-reference submission)")
	flag.Parse()
	if *nodeBin != "" {
		runIngest(*nodeBin, *before, *engine, parseInts(*sizes), parseInts(*concs), *n, *reps, *idle)
		return
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), serveEnv+"="+addr, "TENZRO_RPC_BENCH_SLOTS="+strconv.Itoa(*slots), "TENZRO_RPC_BENCH_MODE="+*mode)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		log.Fatal(err)
	}
	defer child.Process.Kill()
	c := client.New("http://" + addr)
	for i := 0; ; i++ {
		if _, err := c.Info(context.Background()); err == nil {
			break
		}
		if i > 100 {
			log.Fatal("server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pid := child.Process.Pid
	base := procKB(pid, "VmRSS")

	// Distinct payloads: a blob the server already holds is not sent again.
	ps := make([][]byte, *n)
	hs := make([]wire.Hash, *n) // hashed before the clock starts, as a client has
	for k := range ps {
		ps[k] = make([]byte, *size)
		for i := range ps[k] {
			ps[k][i] = byte(i*7 + k)
		}
		hs[k] = wire.ContentHash(ps[k])
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, *n)
	work := make(chan int, *n)
	for i := 0; i < *n; i++ {
		work <- i
	}
	close(work)
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				gi := wire.OuterGradient{TaskID: "bench", TrainerDID: "did:tenzro:machine:zBench", Round: uint64(i),
					PayloadHash: hs[i], Signature: make([]byte, 64)}
				if *mode == "put" {
					if _, err := c.PutBlob(context.Background(), gi.PayloadHash, bytes.NewReader(ps[i]), int64(len(ps[i]))); err != nil {
						errs <- err
						continue
					}
				} else {
					gi.GradientPayload = ps[i]
				}
				if _, err := c.Submit(context.Background(), &gi); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	close(errs)
	for err := range errs {
		log.Fatalf("submit: %v", err)
	}
	hwm := procKB(pid, "VmHWM")
	inflight := min(*conc, *slots)
	mb := float64(*size) / 1e6
	if *mode == "put" {
		inflight = min(*conc, rpc.DefaultMaxBlobUploadsPerPeer)
	}
	fmt.Printf("mode %s: payload %.1f MB (base64 JSON body %.1f MB), %d submissions, concurrency %d, in flight at once %d\n",
		*mode, mb, float64(*size)*4/3/1e6, *n, *conc, inflight)
	fmt.Printf("throughput: %.1f submissions/s, %.1f MB/s of payload (%.0f ms per submission)\n",
		float64(*n)/el.Seconds(), float64(*n)*mb/el.Seconds(), el.Seconds()*1000/float64(*n))
	fmt.Printf("server RSS before: %.1f MB, peak (VmHWM): %.1f MB, peak above baseline per in-flight submission: %.1f MB = %.2f × payload\n",
		float64(base)/1024, float64(hwm)/1024, float64(hwm-base)/1024/float64(inflight), float64(hwm-base)*1024/float64(inflight)/float64(*size))
	// The same bodies, raw, into a trivial server that discards them: the
	// HTTP ceiling of this machine, in the same run.
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()
	lbAddr := freeAddr()
	lb := exec.Command(os.Args[0])
	lb.Env = append(os.Environ(), loopbackEnv+"="+lbAddr)
	lb.Stderr = os.Stderr
	if err := lb.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = lb.Process.Kill(); _ = lb.Wait() }()
	waitHTTP("http://" + lbAddr)
	secs := drive(*n, *conc, func(i int) error {
		resp, err := http.DefaultClient.Do(mustReq(http.MethodPut, "http://"+lbAddr+"/x", ps[i]))
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	lbMB := float64(*n) * mb / secs
	fmt.Printf("loopback (net/http handler discarding the body), same bodies and clients: %.1f MB/s; this mode: %.2f × loopback\n",
		lbMB, float64(*n)*mb/el.Seconds()/lbMB)
}

func procKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	log.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func serve(addr string) {
	if path := os.Getenv("TENZRO_RPC_BENCH_CPUPROFILE"); path != "" {
		// The server's CPU profile, written when the parent stops it.
		f, err := os.Create(path)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		go func() { <-sig; pprof.StopCPUProfile(); f.Close(); os.Exit(0) }()
	}
	slots, _ := strconv.Atoi(os.Getenv("TENZRO_RPC_BENCH_SLOTS"))
	opts := rpc.Options{MaxLargeInFlight: slots, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var sk sink
	if os.Getenv("TENZRO_RPC_BENCH_MODE") == "put" {
		dir, err := os.MkdirTemp("", "tenzro-rpc-bench-blobs-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bs, err := store.OpenBlobs(dir, store.BlobOptions{Logger: opts.Logger, NoSync: os.Getenv("TENZRO_RPC_BENCH_NOSYNC") != ""})
		if err != nil {
			log.Fatal(err)
		}
		opts.Blobs, sk.blobs = bs, bs
	}
	srv, err := rpc.New(sk, opts)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Serve(context.Background(), ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// sink is a Service whose Submit checks the payload hash and keeps nothing;
// a submission by reference maps the uploaded blob instead (the blob store
// hashed it as it arrived).
type sink struct {
	syncer.Service
	blobs *store.Blobs
}

func (s sink) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	if len(g.GradientPayload) == 0 && s.blobs != nil {
		b, release, err := s.blobs.Map(ctx, g.PayloadHash)
		if err != nil {
			return nil, machine.Errf(machine.KindNotFound, "%v", err)
		}
		defer release()
		_ = b
	} else if _, ok := g.CheckPayloadHash(); !ok {
		return nil, machine.Errf(machine.KindInvalid, "payload_hash mismatch")
	}
	return &wire.SubmitResult{Accepted: true, Round: g.Round, PayloadHash: g.PayloadHash, AcceptedCount: 1}, nil
}

func (sink) Info(context.Context) wire.NodeInfo { return wire.NodeInfo{Version: "bench"} }
