package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
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

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
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
//
// TENZRO_TPS_COMMITS=1 adds the round's fragment commits: the run then has
// N/16 fragments (N rounded down to a multiple of 16, every fragment all
// in), and after its records the elected syncer commits fragments 0..F-2
// from one sender in nonce order (commit tx/s, counted like records), then
// the last fragment alone, which closes the round (its latency: send →
// seen in a committed block with success).
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
	commits := os.Getenv("TENZRO_TPS_COMMITS") == "1"
	type res struct {
		ours, kv, before []tpsRun
		oursC, beforeC   []tpsCommits
	}
	all := map[int]*res{}
	for _, n := range ns {
		all[n] = &res{}
		for rep := 0; rep < reps; rep++ {
			k := tpsKVStore(t, kv, n)
			t.Logf("N=%d rep %d kvstore: %s", n, rep, k)
			o, oc := tpsOurs(t, "", n, commits)
			t.Logf("N=%d rep %d tenzro: %s%s", n, rep, o, oc)
			all[n].kv, all[n].ours = append(all[n].kv, k), append(all[n].ours, o)
			all[n].oursC = append(all[n].oursC, oc)
			if before != "" {
				b, bc := tpsOurs(t, before, n, commits)
				t.Logf("N=%d rep %d tenzro before (%s): %s%s", n, rep, before, b, bc)
				all[n].before = append(all[n].before, b)
				all[n].beforeC = append(all[n].beforeC, bc)
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
	if !commits {
		return
	}
	t.Log("| N records | fragments | tenzro commit tx/s (runs) | tenzro closing commit s (runs) | before commit tx/s (runs) | before closing commit s (runs) |")
	for _, n := range ns {
		r := all[n]
		cl := func(cs []tpsCommits) (string, string) {
			var a, b []string
			for _, c := range cs {
				a = append(a, fmt.Sprintf("%.0f", c.open.tps))
				b = append(b, fmt.Sprintf("%.2f", c.close.seconds))
			}
			return strings.Join(a, ", "), strings.Join(b, ", ")
		}
		oa, ob := cl(r.oursC)
		ba, bb := cl(r.beforeC)
		t.Logf("| %d | %d | %s | %s | %s | %s |", n/16*16, n/16, oa, ob, ba, bb)
	}
}

// tpsCommits is the commit phase of one run: fragments 0..F-2, then the
// closing one alone.
type tpsCommits struct {
	open, close tpsRun
}

func (c tpsCommits) String() string {
	if c.open.n == 0 {
		return ""
	}
	return fmt.Sprintf("; commits: %s; closing commit: %s", c.open, c.close)
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
// node 0's home and its CometBFT RPC client; extra are more testnet flags.
func tpsTestnet(t *testing.T, alloc string, extra ...string) (string, *rpchttp.HTTP) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"testnet", "--validators", "1", "--dir", dir, "--base-port", "0", "--block-time", "200ms"}, extra...)
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
	return tpsMeasure(t, c, txs, 4)
}

// tpsOurs runs tenzro-node: one run (16 trainers, 256 fragments, K = 16,
// grace window and round deadline an hour) set up and started, then n
// submission records of its round 0: trainer i mod 16, fragment i / 16.
// bin is the tenzro-node binary ("": this tree's).
func tpsOurs(t *testing.T, bin string, n int, commits bool) (tpsRun, tpsCommits) {
	t.Helper()
	frags := 256
	if commits {
		frags = n / 16
		n = frags * 16
	}
	run := chainBenchRun(t, 16, frags)
	var extra []string
	if commits {
		// The node's key is no candidate, so the bench's is elected.
		extra = []string{"--candidate-stake", ""}
	}
	home, c := tpsTestnet(t, run.sponsor.DID.String()+"=1000000000000000000000000", extra...)
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
	recs := tpsMeasure(t, c, txs, 4)
	if !commits {
		return recs, tpsCommits{}
	}
	// A block's results are readable before the application's Commit: poll
	// until the state has every record.
	var r *machine.Run
	for full := false; !full; {
		res, err := c.ABCIQuery(ctx, chain.QueryRun, []byte("bench"))
		if err != nil || res.Response.Code != 0 {
			t.Fatalf("run query: %v %+v", err, res)
		}
		if r, err = machine.DecodeRun("bench", res.Response.Value); err != nil {
			t.Fatal(err)
		}
		full = true
		for f := range frags {
			if n := len(r.Fragments[f].Records); n != 16 {
				full = false
				if ctx.Err() != nil {
					t.Fatalf("fragment %d has %d records, want 16", f, n)
				}
				time.Sleep(50 * time.Millisecond)
				break
			}
		}
	}
	var err error
	ctxs := make([][]byte, frags)
	for f := range ctxs {
		cm := *machine.BaseCommit(r, f)
		cm.Syncer, cm.Ticket, cm.Status = run.cand.DID.String(), 0, wire.FragAggregated
		cm.WeightsAfter = wire.ContentHash([]byte(fmt.Sprint("w1-", f)))
		cm.MomentumAfter = wire.ContentHash([]byte(fmt.Sprint("m1-", f)))
		cm.AggregateHash = wire.ContentHash([]byte(fmt.Sprint("a1-", f)))
		cm.Inputs = machine.RecordInputs(r.Fragments[f].Records)
		p := wire.CommitFragmentTx{TaskID: "bench", Round: 0, Fragment: uint64(f), Commit: cm}
		p.Nonce = uint64(3 + f)
		if ctxs[f], err = chain.CommitFragmentTx(testnetChainID, run.cand, p); err != nil {
			t.Fatal(err)
		}
	}
	out := tpsCommits{open: tpsMeasure(t, c, ctxs[:frags-1], 1), close: tpsMeasure(t, c, ctxs[frags-1:], 1)}
	if out.open.ok != frags-1 || out.close.ok != 1 {
		t.Fatalf("commits: %s; closing: %s", out.open, out.close)
	}
	// A block's results are readable before the application's Commit: poll.
	for {
		var st struct {
			Roots []wire.Hash `json:"round_roots"`
		}
		res, err := c.ABCIQuery(ctx, chain.QueryRun, []byte("bench"))
		if err == nil && json.Unmarshal(res.Response.Value, &st) == nil && len(st.Roots) == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after the closing commit the run has %d round commits (%v), want 1", len(st.Roots), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return recs, out
}

// tpsMeasure sends txs from senders concurrent senders (1: in order) and
// follows the chain's blocks until every transaction the mempool took is
// in one.
func tpsMeasure(t *testing.T, c *rpchttp.HTTP, txs [][]byte, senders int) tpsRun {
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
