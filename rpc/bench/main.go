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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/client"
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
	child.Env = append(os.Environ(), serveEnv+"="+addr, "TENZRO_RPC_BENCH_SLOTS="+strconv.Itoa(*slots))
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

	payload := make([]byte, *size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	g := wire.OuterGradient{TaskID: "bench", TrainerDID: "did:tenzro:machine:zBench", GradientPayload: payload,
		PayloadHash: wire.ContentHash(payload), Signature: make([]byte, 64)}
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
				gi := g
				gi.Round = uint64(i)
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
	fmt.Printf("payload %.1f MB (JSON body %.1f MB), %d submissions, concurrency %d, large-request slots %d\n",
		mb, float64(*size)*4/3/1e6, *n, *conc, *slots)
	fmt.Printf("throughput: %.1f submissions/s, %.1f MB/s of payload (%.0f ms per submission)\n",
		float64(*n)/el.Seconds(), float64(*n)*mb/el.Seconds(), el.Seconds()*1000/float64(*n))
	fmt.Printf("server RSS before: %.1f MB, peak (VmHWM): %.1f MB, peak above baseline per in-flight submission: %.1f MB = %.1f × payload\n",
		float64(base)/1024, float64(hwm)/1024, float64(hwm-base)/1024/float64(inflight), float64(hwm-base)*1024/float64(inflight)/float64(*size))
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
	slots, _ := strconv.Atoi(os.Getenv("TENZRO_RPC_BENCH_SLOTS"))
	srv, err := rpc.New(sink{}, rpc.Options{MaxLargeInFlight: slots, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

// sink is a Service whose Submit checks the payload hash and keeps nothing.
type sink struct{ syncer.Service }

func (sink) Submit(_ context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	if _, ok := g.CheckPayloadHash(); !ok {
		return nil, syncer.Errf(syncer.KindInvalid, "payload_hash mismatch")
	}
	return &wire.SubmitResult{Accepted: true, Round: g.Round, PayloadHash: g.PayloadHash, AcceptedCount: 1}, nil
}

func (sink) Info(context.Context) wire.NodeInfo { return wire.NodeInfo{Version: "bench"} }
