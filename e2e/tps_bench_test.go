package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
	cmttypes "github.com/cometbft/cometbft/types"
)

// TestThroughputBench (TENZRO_TPS_BENCH=1) measures committed transactions
// per second on one validator with the project's block settings (tenzro-node
// testnet --block-time 200ms): submission records of one round of one run
// (16 trainers × up to 256 fragments, every record inside its grace window)
// against CometBFT v0.38's stock kvstore application (bench/kvnode) on the
// same CometBFT configuration, alternating runs, same machine.
//
//	TENZRO_TPS_BENCH=1 nice go test ./e2e -run TestThroughputBench -v -timeout 60m
//
// TENZRO_TPS_N (default 500,2000,4000) are the record counts,
// TENZRO_TPS_REPS (default 2) the runs of each app per count, and
// TENZRO_TPS_PROFILE a directory for a CPU profile of each tenzro-node run
// (go tool pprof); TENZRO_TPS_BEFORE another tenzro-node binary (an older
// commit's) measured as a third app in the same alternation. A run sends
// its N transactions with broadcast_tx_sync from 4 concurrent senders,
// then reads every block's results: only transactions whose block result
// is success count (a transaction the mempool took that the block refused
// is reported apart). Rate = successes ÷ (first send → the block holding
// the last one seen committed). Nothing asserts speed.
func TestThroughputBench(t *testing.T) {
	if os.Getenv("TENZRO_TPS_BENCH") != "1" {
		t.Skip("a benchmark: set TENZRO_TPS_BENCH=1")
	}
	ns := []int{500, 2000, 4000}
	if s := os.Getenv("TENZRO_TPS_N"); s != "" {
		ns = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 || n > 16*256 {
				t.Fatalf("TENZRO_TPS_N: %q (want 1..4096)", f)
			}
			ns = append(ns, n)
		}
	}
	reps := 2
	if s := os.Getenv("TENZRO_TPS_REPS"); s != "" {
		var err error
		if reps, err = strconv.Atoi(s); err != nil || reps < 1 {
			t.Fatalf("TENZRO_TPS_REPS: %q", s)
		}
	}
	build(t)
	kv := filepath.Join(binDir, "kvnode")
	if out, err := exec.Command("go", "build", "-o", kv, "github.com/tenzro/train/bench/kvnode").CombinedOutput(); err != nil {
		t.Fatalf("go build kvnode: %v\n%s", err, out)
	}
	before := os.Getenv("TENZRO_TPS_BEFORE")
	type res struct {
		ours, kv, before []tpsRun
	}
	all := map[int]*res{}
	for _, n := range ns {
		all[n] = &res{}
		for rep := 0; rep < reps; rep++ {
			k := tpsKVStore(t, kv, n)
			t.Logf("N=%d rep %d kvstore: %s", n, rep, k)
			o := tpsOurs(t, "", n)
			t.Logf("N=%d rep %d tenzro: %s", n, rep, o)
			all[n].kv, all[n].ours = append(all[n].kv, k), append(all[n].ours, o)
			if before != "" {
				b := tpsOurs(t, before, n)
				t.Logf("N=%d rep %d tenzro before (%s): %s", n, rep, before, b)
				all[n].before = append(all[n].before, b)
			}
		}
	}
	t.Log("| N records | tenzro tx/s (runs) | kvstore tx/s (runs) | ratio (median) | tenzro refused in block | load avg 1 min |")
	for _, n := range ns {
		r := all[n]
		med := func(rs []tpsRun) float64 {
			v := make([]float64, len(rs))
			for i, x := range rs {
				v[i] = x.tps
			}
			sort.Float64s(v)
			if len(v)%2 == 1 {
				return v[len(v)/2]
			}
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		list := func(rs []tpsRun) string {
			var s []string
			for _, x := range rs {
				s = append(s, fmt.Sprintf("%.0f", x.tps))
			}
			return strings.Join(s, ", ")
		}
		refused, loads := 0, []string{}
		for i := range r.ours {
			refused += r.ours[i].failed
			loads = append(loads, r.ours[i].load, r.kv[i].load)
		}
		t.Logf("| %d | %.0f (%s) | %.0f (%s) | %.2f | %d | %s |", n, med(r.ours), list(r.ours), med(r.kv), list(r.kv), med(r.ours)/med(r.kv), refused, strings.Join(loads, " "))
		if len(r.before) > 0 {
			bref := 0
			for _, x := range r.before {
				bref += x.failed
			}
			t.Logf("| %d, before | %.0f (%s) | | %.2f | %d | |", n, med(r.before), list(r.before), med(r.before)/med(r.kv), bref)
		}
	}
}

// tpsRun is one measured run.
type tpsRun struct {
	n, ok, failed, mempoolRefused int
	seconds, tps                  float64
	blocks                        int
	load                          string
}

func (r tpsRun) String() string {
	return fmt.Sprintf("%d sent, %d committed with success, %d refused in the block, %d refused by the mempool, %d blocks, %.2f s: %.0f tx/s (load %s)",
		r.n, r.ok, r.failed, r.mempoolRefused, r.blocks, r.seconds, r.tps, r.load)
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// tpsTestnet writes a one-validator testnet with 200 ms blocks and returns
// node 0's home and its CometBFT RPC client.
func tpsTestnet(t *testing.T, alloc string) (string, *rpchttp.HTTP) {
	t.Helper()
	dir := t.TempDir()
	args := []string{"testnet", "--validators", "1", "--dir", dir, "--base-port", "0", "--block-time", "200ms"}
	if alloc != "" {
		args = append(args, "--alloc", alloc)
	}
	out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testnet: %v\n%s", err, out)
	}
	home := filepath.Join(dir, "node0")
	c, err := chainRPC(mustNodeConfig(t, home).RPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	return home, c
}

// tpsKVStore runs the kvstore baseline: n transactions "k<i>=<padding>" of
// the size of a submission record transaction.
func tpsKVStore(t *testing.T, bin string, n int) tpsRun {
	t.Helper()
	home, c := tpsTestnet(t, "")
	logf, err := os.Create(filepath.Join(home, "kvnode.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--home", home)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() { _ = cmd.Process.Kill(); <-done }()
	node := &chainNode{name: "kvnode", home: home, rpc: c, done: done, logPath: filepath.Join(home, "kvnode.log")}
	waitHeight(t, node, 1, 2*time.Minute)
	size := len(chainBenchRun(t, 16, 256).submission(t, 0))
	txs := make([][]byte, n)
	for i := range txs {
		k := fmt.Sprintf("k%07d=", i)
		txs[i] = []byte(k + strings.Repeat("v", max(1, size-len(k))))
	}
	return tpsMeasure(t, c, txs)
}

// tpsOurs runs tenzro-node: one run (16 trainers, 256 fragments, K = 16,
// grace window and round deadline an hour) set up and started, then n
// submission records of its round 0: trainer i mod 16, fragment i / 16.
// bin is the tenzro-node binary ("": this tree's).
func tpsOurs(t *testing.T, bin string, n int) tpsRun {
	t.Helper()
	run := chainBenchRun(t, 16, 256)
	home, c := tpsTestnet(t, run.sponsor.DID.String()+"=1000000000000000000000000")
	node := &chainNode{name: "tenzro", home: home, rpc: c, bin: bin}
	dir := os.Getenv("TENZRO_TPS_PROFILE")
	path := filepath.Join(dir, fmt.Sprintf("tenzro-%d-%d.pprof", n, time.Now().UnixNano()))
	if dir != "" {
		// The node profiles itself until a graceful exit; only this process.
		os.Setenv("TENZRO_CPUPROFILE", path)
	}
	node.start(t)
	os.Unsetenv("TENZRO_CPUPROFILE")
	defer node.kill()
	if dir != "" {
		defer func() { // before the kill: SIGTERM, so the profile is written
			_ = node.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-node.done:
				t.Logf("CPU profile of the node: %s", path)
			case <-time.After(time.Minute):
			}
		}()
	}
	waitHeight(t, node, 1, 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	run.start(t, ctx, c)
	txs := make([][]byte, n)
	for i := range txs {
		txs[i] = run.submission(t, i)
	}
	return tpsMeasure(t, c, txs)
}

// tpsMeasure sends txs from 4 concurrent senders and follows the chain's
// blocks until every transaction the mempool took is in one.
func tpsMeasure(t *testing.T, c *rpchttp.HTTP, txs [][]byte) tpsRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	from := st.SyncInfo.LatestBlockHeight + 1
	want := map[string]bool{}
	for _, tx := range txs {
		want[hex.EncodeToString(cmttypes.Tx(tx).Hash())] = true
	}
	run := tpsRun{n: len(txs), load: loadAvg()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	const senders = 4
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			for i := s; i < len(txs); i += senders {
				res, err := c.BroadcastTxSync(ctx, txs[i])
				if err != nil || res.Code != 0 {
					mu.Lock()
					run.mempoolRefused++
					delete(want, hex.EncodeToString(cmttypes.Tx(txs[i]).Hash()))
					if run.mempoolRefused <= 3 {
						t.Logf("tx %d refused by the mempool: %v %+v", i, err, res)
					}
					mu.Unlock()
				}
			}
		}(s)
	}
	sendersDone := make(chan struct{})
	go func() { wg.Wait(); close(sendersDone) }()
	seen := 0
	var last time.Time
	for h := from; ; {
		select {
		case <-sendersDone:
			sendersDone = nil
		default:
		}
		mu.Lock()
		left := len(want) - seen
		mu.Unlock()
		if sendersDone == nil && left == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d transactions not committed", left)
		}
		st, err := c.Status(ctx)
		if err != nil || st.SyncInfo.LatestBlockHeight < h {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for ; h <= st.SyncInfo.LatestBlockHeight; h++ {
			hh := h
			blk, err := c.Block(ctx, &hh)
			if err != nil {
				t.Fatal(err)
			}
			// The block store has a block before its results are saved.
			br, err := c.BlockResults(ctx, &hh)
			for err != nil && strings.Contains(err.Error(), "could not find results") && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
				br, err = c.BlockResults(ctx, &hh)
			}
			if err != nil {
				t.Fatal(err)
			}
			run.blocks++
			mu.Lock()
			for i, tx := range blk.Block.Txs {
				if !want[hex.EncodeToString(tx.Hash())] {
					continue
				}
				seen++
				if br.TxsResults[i].Code == 0 {
					run.ok++
					last = time.Now()
				} else {
					run.failed++
					if run.failed <= 3 {
						t.Logf("tx refused in block %d: code %d %s", h, br.TxsResults[i].Code, br.TxsResults[i].Log)
					}
				}
			}
			mu.Unlock()
		}
	}
	run.seconds = last.Sub(start).Seconds()
	if run.ok > 0 {
		run.tps = float64(run.ok) / run.seconds
	}
	run.load += "–" + loadAvg()
	return run
}
