//go:build linux

package plugins

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// workerEngine starts an engine whose calls run in worker processes: this
// test binary, re-executed (TestMain serves as the worker).
func workerEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	cfg.WorkerCommand = []string{exe}
	e, err := NewEngine(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

var (
	sharedWorkerOnce sync.Once
	sharedWorker     *Engine
	sharedWorkerErr  error
)

// sharedWorkerEngine is testEngine's configuration, out of process.
func sharedWorkerEngine(t testing.TB) *Engine {
	t.Helper()
	sharedWorkerOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			sharedWorkerErr = err
			return
		}
		sharedWorker, sharedWorkerErr = NewEngine(context.Background(), Config{Fuel: 20_000_000_000, Workers: 2, WorkerCommand: []string{exe}})
	})
	if sharedWorkerErr != nil {
		t.Fatal(sharedWorkerErr)
	}
	return sharedWorker
}

// TestWorkerMatchesInProcess: every kind of call gives the same bytes, fuel,
// selections, scores and failures in a worker as in process.
func TestWorkerMatchesInProcess(t *testing.T) {
	ctx := context.Background()
	local, remote := testEngine(t), sharedWorkerEngine(t)
	if local.Profile().Hash != remote.Profile().Hash {
		t.Fatal("worker mode changes the engine profile")
	}
	in := randInputs(newRand(), 7, 4099, 1)
	for _, ref := range []string{"Mean", "TrimmedMean{alpha_bps=2000}", "CoordinateMedian", "Krum{f=1}", "MultiKrum{f=1,m=3}", "Bulyan{f=1}", "GeometricMedian", "CenteredClipping{tau=2,iterations=2}"} {
		t.Run(ref, func(t *testing.T) {
			a := aggregate(t, local, mustResolve(t, local, ref, 7), in)
			b := aggregate(t, remote, mustResolve(t, remote, ref, 7), in)
			if !bytes.Equal(a.Aggregate, b.Aggregate) || a.Fuel != b.Fuel || !equalBools(a.Selected, b.Selected) || !equalScores(a.Scores, b.Scores) {
				t.Fatalf("worker result differs: fuel %d vs %d, selected %v vs %v, scores %v vs %v", a.Fuel, b.Fuel, a.Selected, b.Selected, a.Scores, b.Scores)
			}
		})
	}
	t.Run("verify", func(t *testing.T) {
		for _, ref := range []string{"Finite", "L2NormBound{max=60}", "NormRatio{max_ratio=1.01}"} {
			for _, e := range []*Engine{local, remote} {
				_ = e
			}
			rl, _ := local.ResolveVerifier(ctx, ref)
			rr, err := remote.ResolveVerifier(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			for k := range in {
				vin := syncer.VerifyInput{Verifier: rl, Dtype: machine.F32, N: len(in[0]), Input: f32s(in[k]...)}
				if rl.RoundLevel {
					vin.Round = asBytes(in)
				}
				a, err1 := local.Verify(ctx, vin)
				vin.Verifier = rr
				b, err2 := remote.Verify(ctx, vin)
				if err1 != nil || err2 != nil || a != b {
					t.Fatalf("%s input %d: %+v %v vs %+v %v", ref, k, a, err1, b, err2)
				}
			}
		}
	})
	t.Run("outer step", func(t *testing.T) {
		rl, _ := local.ResolveOuter(ctx)
		rr, _ := remote.ResolveOuter(ctx)
		w, g, m := f32s(in[0]...), f32s(in[1]...), f32s(in[2]...)
		for _, mom := range [][]byte{nil, m} {
			oin := syncer.OuterStepInput{Rule: rl, Dtype: machine.F32, N: len(in[0]), Weights: w, Aggregate: g, Momentum: mom, LR: 0.7, Beta: 0.9, Nesterov: true}
			a, err1 := local.OuterStep(ctx, oin)
			oin.Rule = rr
			b, err2 := remote.OuterStep(ctx, oin)
			if err1 != nil || err2 != nil || !bytes.Equal(a.Weights, b.Weights) || !bytes.Equal(a.Momentum, b.Momentum) || a.Fuel != b.Fuel {
				t.Fatalf("outer step differs: %v %v", err1, err2)
			}
		}
	})
	t.Run("rule failure", func(t *testing.T) {
		mod := buildModule(t, modSpec{aggBody: []byte{0x41, 0x07}})
		a, b := runHostile(t, local, mod), runHostile(t, remote, mod)
		var ra, rb *syncer.RuleFailure
		if !errors.As(a, &ra) || !errors.As(b, &rb) || *ra != *rb {
			t.Fatalf("failures differ: %v vs %v", a, b)
		}
	})
}

func equalScores(a, b []float64) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i]) {
			return false
		}
	}
	return true
}

var loopBody = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b, 0x41, 0x00} // loop br 0 end; i32.const 0

// TestWorkerKilledAtBackstop: a looping aggregator with a budget far beyond
// the backstop is killed; the caller gets a *WorkerError (a local failure,
// never a *RuleFailure), and the next call runs on a fresh worker.
func TestWorkerKilledAtBackstop(t *testing.T) {
	e := workerEngine(t, Config{Fuel: maxFuel, WallClock: time.Second})
	err := runHostile(t, e, buildModule(t, modSpec{aggBody: loopBody}))
	var rf *syncer.RuleFailure
	if !IsWorkerError(err) || errors.As(err, &rf) || !strings.Contains(err.Error(), "wall-clock") {
		t.Fatalf("want a wall-clock worker error, got %v", err)
	}
	out := aggregate(t, e, mustResolve(t, e, "Mean", 2), [][]float32{{1}, {3}})
	if toF32(out.Aggregate)[0] != 2 {
		t.Fatal("Mean broken after the kill")
	}
}

// rssBytes is this process's resident set size.
func rssBytes(t testing.TB) int64 {
	t.Helper()
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

// growTouch is a memory.grow loop that writes to every page it gets and
// traps when the limit refuses more.
var growTouch = []byte{
	0x03, 0x40, // loop
	0x41, 0x01, 0x40, 0x00, // memory.grow 1
	0x41, 0x7f, 0x46, 0x04, 0x40, 0x00, 0x0b, // == -1 ? unreachable
	0x3f, 0x00, 0x41, 0x01, 0x6b, 0x41, 0x10, 0x74, // (memory.size - 1) << 16
	0x41, 0x01, 0x36, 0x02, 0x00, // i32.store 1
	0x0c, 0x00, 0x0b, // br 0; end
	0x41, 0x00,
}

// TestWorkerHostilePlugins: under the default page limit, a module
// declaring 32768 initial pages and a memory.grow loop that touches every
// page cost this process less than 512 MB; a publish whose
// tenzro_abi_version loops does not stop this process's garbage collector
// (in process, a stop-the-world waits for the Wasm call); the node keeps
// working afterwards.
func TestWorkerHostilePlugins(t *testing.T) {
	e := workerEngine(t, Config{Fuel: 20_000_000_000})
	runtime.GC()
	before := rssBytes(t)
	for _, tc := range []struct {
		name string
		spec modSpec
	}{
		{"32768 initial pages", modSpec{memMin: 32768, aggBody: growTouch}},
		{"memory.grow loop", modSpec{aggBody: growTouch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runHostile(t, e, buildModule(t, tc.spec))
			if err == nil {
				t.Fatal("the bomb succeeded")
			}
			if grew := rssBytes(t) - before; grew > 512<<20 {
				t.Fatalf("RSS grew by %d MB", grew>>20)
			}
			t.Logf("%s: %v; RSS growth %d MB", tc.name, err, (rssBytes(t)-before)>>20)
		})
	}
	t.Run("looping publish", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := e.Publish(context.Background(), buildModule(t, modSpec{abiBody: loopBody, aggBody: []byte{0x41, 0x00}}))
			done <- err
		}()
		for i := 0; ; i++ {
			start := time.Now()
			runtime.GC()
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("a GC took %v during the hostile publish", d)
			}
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "out of fuel") {
					t.Fatalf("want an out-of-fuel refusal under the probe budget, got %v", err)
				}
				t.Logf("%d GCs during the publish; %v", i+1, err)
				out := aggregate(t, e, mustResolve(t, e, "Mean", 2), [][]float32{{1}, {3}})
				if toF32(out.Aggregate)[0] != 2 {
					t.Fatal("Mean broken after the hostile publish")
				}
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
}

// TestWorkerAddressSpaceLimit: a worker whose RLIMIT_AS leaves 512 MiB
// above what an idle worker maps (measured here) cannot reserve the 2 GiB
// guest memory, so a memory.grow loop grows a Go slice instead and the
// worker dies at its limit: the caller gets a *WorkerError (a local
// failure, not a rule's result) and the next call runs on a fresh worker.
func TestWorkerAddressSpaceLimit(t *testing.T) {
	probe := workerEngine(t, Config{})
	probe.pool.mu.Lock()
	pid := probe.pool.idle[0].cmd.Process.Pid
	probe.pool.mu.Unlock()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var idle uint64
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmSize:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			idle = kb << 10
		}
	}
	if idle == 0 {
		t.Fatal("no VmSize for the worker")
	}
	e := workerEngine(t, Config{Fuel: 20_000_000_000, WorkerAddressSpace: idle + 512<<20})
	err = runHostile(t, e, buildModule(t, modSpec{aggBody: growTouch}))
	var rf *syncer.RuleFailure
	if !IsWorkerError(err) || errors.As(err, &rf) {
		t.Fatalf("want the worker to die at its address-space limit, got %v", err)
	}
	out := aggregate(t, e, mustResolve(t, e, "Mean", 2), [][]float32{{1}, {3}})
	if toF32(out.Aggregate)[0] != 2 {
		t.Fatal("Mean broken after the worker died")
	}
}

// TestWorkerArenaTrimmed: a large call's arena is given back in both
// processes once the worker is idle (the timer calls trimArena; here it is
// called directly), and the next call maps a fresh one.
func TestWorkerArenaTrimmed(t *testing.T) {
	e := workerEngine(t, Config{})
	const n = 9 << 20 // 2 inputs of 36 MiB + 36 MiB out: over arenaKeepBytes
	ctx := context.Background()
	rr := mustResolve(t, e, "Mean", 2)
	in := syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: n, Inputs: [][]byte{make([]byte, 4*n), make([]byte, 4*n)}}
	if _, err := e.Aggregate(ctx, in); err != nil {
		t.Fatal(err)
	}
	e.pool.mu.Lock()
	w, uses := e.pool.idle[0], e.pool.idle[0].uses
	e.pool.mu.Unlock()
	if free, _ := w.arenaBytes(); free <= arenaKeepBytes {
		t.Fatalf("arenas of %d bytes", free)
	}
	e.pool.trimArena(w, uses)
	if free, _ := w.arenaBytes(); free != 0 {
		t.Fatalf("%d bytes of arenas kept", free)
	}
	out, err := e.Aggregate(ctx, in)
	if err != nil || len(out.Aggregate) != 4*n {
		t.Fatalf("after the trim: %v", err)
	}
}
