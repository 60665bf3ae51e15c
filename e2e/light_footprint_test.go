package e2e

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenzro/train/rpc/client"
)

// countingProxy forwards TCP connections to upstream and counts the bytes
// each way (down: from upstream to the follower).
type countingProxy struct {
	addr     string
	down, up atomic.Int64
}

func startCountingProxy(t *testing.T, upstream string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = io.Copy(countingWriter{u, &p.up}, c)
					u.(*net.TCPConn).CloseWrite()
				}()
				_, _ = io.Copy(countingWriter{c, &p.down}, u)
				c.(*net.TCPConn).CloseWrite()
				wg.Wait()
			}()
		}
	}()
	return p
}

// countingWriter counts what it writes as it goes (connections stay open).
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// procMem is a process's resident set now and at its peak (bytes).
func procMem(t *testing.T, pid int) (rss, hwm int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "VmRSS:" {
				rss = v << 10
			} else {
				hwm = v << 10
			}
		}
	}
	return rss, hwm
}

// dirBytes is the bytes of the regular files under dir, in total and per
// top-level entry.
func dirBytes(t *testing.T, dir string) (int64, map[string]int64) {
	t.Helper()
	per := map[string]int64{}
	var total int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		top := strings.SplitN(rel, string(filepath.Separator), 2)[0]
		per[top] += info.Size()
		total += info.Size()
		return nil
	})
	return total, per
}

// TestLightFootprint measures a light client against a full replica on
// the same chain during the same run (issue 24's Must-show): a --dev node
// makes 200 ms blocks and carries a whole run (M trainers, R rounds, posted,
// enrolled and submitted through it); a full node (--role full, its
// CometBFT P2P through a counting proxy) and a light client (--role
// light-client, its primary's CometBFT RPC through a counting proxy) follow
// it, each polled by one reader (getRun and a balance every second, as a
// trainer waiting on its node does). At the end: bytes received from the
// chain, disk and RSS of each, and the chain's blocks and seconds, so that
// per-hour figures are extrapolated from a bounded run. Run with
// TENZRO_LIGHT_FOOTPRINT=1 (it prints the table; bench/results/state.md);
// TENZRO_LIGHT_FOOTPRINT_READERS=0 measures following alone (no reads),
// TENZRO_LIGHT_FOOTPRINT_SECS the window (default 180 s).
func TestLightFootprint(t *testing.T) {
	if os.Getenv("TENZRO_LIGHT_FOOTPRINT") == "" {
		t.Skip("a measurement: TENZRO_LIGHT_FOOTPRINT=1")
	}
	build(t)
	keys, trainers, sponsor := makeKeys(t, M)
	dev := newEnv(t, keys)
	dev.start()
	defer dev.stop()
	info := dev.nodeInfo()
	gen := filepath.Join(dev.dir, "data", "chain", "config", "genesis.json")
	p2p := startCountingProxy(t, info.Chain.P2PAddr)
	rpc := startCountingProxy(t, info.Chain.RPCAddr)

	// The full replica: a home whose only peer is the dev node, through the proxy.
	fullDir := t.TempDir()
	home := filepath.Join(fullDir, "home")
	if out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "init", "--home", home, "--genesis", gen, "--peers", info.Chain.NodeID+"@"+p2p.addr,
		"--p2p-addr", freeAddr(t), "--rpc-addr", freeAddr(t)).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	start := func(dir string, args ...string) (*exec.Cmd, string) {
		addr := freeAddr(t)
		log, err := os.Create(filepath.Join(dir, "node.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(binDir, "tenzro-node"), append(args, "--rpc-addr", addr, "--listen-addr", "/ip4/127.0.0.1/tcp/0", "--enclave", "none",
			"--boot-nodes", info.Listen[0])...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, addr
	}
	fullCmd, fullAddr := start(fullDir, "--home", home, "--role", "full")
	lightDir := t.TempDir()
	lightCmd, lightAddr := start(lightDir, "--role", "light-client", "--data-dir", filepath.Join(lightDir, "data"), "--light-primary", "http://"+rpc.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	fc, lc := client.New("http://"+fullAddr), client.New("http://"+lightAddr)
	devc := client.New(dev.rpc)
	waitUp := func(c *client.Client, name string) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			cctx, cc := context.WithTimeout(ctx, 5*time.Second)
			i, err := c.Info(cctx)
			cc()
			if err == nil && i.Chain != nil && i.Chain.Height > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not come up: %v", name, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitUp(fc, "the full node")
	waitUp(lc, "the light client")
	height := func() int64 {
		i, err := devc.Info(ctx)
		if err != nil || i.Chain == nil {
			t.Fatalf("dev node info: %v", err)
		}
		return i.Chain.Height
	}
	fullDisk0, _ := dirBytes(t, fullDir)
	lightDisk0, _ := dirBytes(t, lightDir)
	p2pDown0, rpcDown0 := p2p.down.Load(), rpc.down.Load()
	h0, t0 := height(), time.Now()

	// One reader per follower, as a trainer polling its node.
	var reads, readErrs [2]atomic.Int64
	rctx, rcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	readers := []*client.Client{fc, lc}
	if os.Getenv("TENZRO_LIGHT_FOOTPRINT_READERS") == "0" {
		readers = nil // the cost of following alone
	}
	for i, c := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-tk.C:
				}
				_, err1 := c.GetRun(rctx, task)
				_, err2 := c.Balance(rctx, sponsor)
				reads[i].Add(2)
				for _, err := range []error{err1, err2} {
					if err != nil && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "unknown task") {
						if readErrs[i].Add(1) == 1 {
							t.Logf("follower %d: read failed: %v", i, err)
						}
					}
				}
			}
		}()
	}

	// The run, through the dev node.
	specPath := filepath.Join(dev.dir, "spec.json")
	if err := os.WriteFile(specPath, []byte(seedSpec(sponsor)), 0o644); err != nil {
		t.Fatal(err)
	}
	initPath := writeInit(t, dev.dir)
	dev.postAndEnrol(task, specPath, initPath, sponsor, trainers)
	for round := 0; round < R; round++ {
		for f := 0; f < F; f++ {
			for i := 0; i < M; i++ {
				if err := dev.submit(i, round, f); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v", round, f, i, err)
				}
			}
		}
		deadline := time.Now().Add(2 * time.Minute)
		for v := dev.getRun(); v.Round <= round && v.Status != "sealed"; v = dev.getRun() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d did not close", round)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, c := range []*client.Client{fc, lc} {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			r, err := c.GetRun(ctx, task)
			if err == nil && r.Status == "sealed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a follower did not see the seal: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	sealedAfter := time.Since(t0)
	// The window goes on (blocks keep coming, the readers keep polling)
	// to TENZRO_LIGHT_FOOTPRINT_SECS (default 180 s) of chain.
	window := 180 * time.Second
	if v, err := strconv.Atoi(os.Getenv("TENZRO_LIGHT_FOOTPRINT_SECS")); err == nil && v > 0 {
		window = time.Duration(v) * time.Second
	}
	if rest := window - time.Since(t0); rest > 0 {
		time.Sleep(rest)
	}
	rcancel()
	wg.Wait()
	h1, secs := height(), time.Since(t0).Seconds()
	fullDisk1, fullPer := dirBytes(t, fullDir)
	lightDisk1, lightPer := dirBytes(t, lightDir)
	fRSS, fHWM := procMem(t, fullCmd.Process.Pid)
	lRSS, lHWM := procMem(t, lightCmd.Process.Pid)
	fDown, lDown := p2p.down.Load()-p2pDown0, rpc.down.Load()-rpcDown0
	perHour := 3600 / secs
	mib := func(b int64) string { return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20)) }
	t.Logf("window: %.1f s of chain, heights %d..%d (%d blocks); a run of %d trainers x %d fragments x %d rounds through the dev node, sealed on both followers after %.1f s, then idle blocks; one reader per follower (getRun + balance each second)",
		secs, h0, h1, h1-h0, M, F, R, sealedAfter.Seconds())
	t.Logf("| | full replica (--role full) | light client (--role light-client) | light/full |")
	t.Logf("|---|---|---|---|")
	t.Logf("| bytes received from the chain in the window (CometBFT P2P / RPC) | %s | %s | %.3f |", mib(fDown), mib(lDown), float64(lDown)/float64(fDown))
	t.Logf("| ... per hour of chain (extrapolated) | %s | %s | |", mib(int64(float64(fDown)*perHour)), mib(int64(float64(lDown)*perHour)))
	t.Logf("| bytes sent to the chain in the window | %s | %s | |", mib(p2p.up.Load()), mib(rpc.up.Load()))
	t.Logf("| disk at the end | %s | %s | %.3f |", mib(fullDisk1), mib(lightDisk1), float64(lightDisk1)/float64(fullDisk1))
	t.Logf("| disk growth in the window | %s | %s | |", mib(fullDisk1-fullDisk0), mib(lightDisk1-lightDisk0))
	t.Logf("| ... per hour of chain (extrapolated) | %s | %s | |", mib(int64(float64(fullDisk1-fullDisk0)*perHour)), mib(int64(float64(lightDisk1-lightDisk0)*perHour)))
	t.Logf("| RSS at the end / peak | %s / %s | %s / %s | %.3f (peak) |", mib(fRSS), mib(fHWM), mib(lRSS), mib(lHWM), float64(lHWM)/float64(fHWM))
	t.Logf("| reads answered (errors) | %d (%d) | %d (%d) | |", reads[0].Load(), readErrs[0].Load(), reads[1].Load(), readErrs[1].Load())
	t.Logf("disk by entry: full %v; light %v", fullPer, lightPer)
}
