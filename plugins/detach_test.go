//go:build linux

package plugins

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// arenaBytes is the size of w's free and held arenas.
func (w *worker) arenaBytes() (free, held int64) {
	w.amu.Lock()
	defer w.amu.Unlock()
	return w.freeBytes(), w.heldSize
}

// arenasCreated is how many arenas w has made.
func (w *worker) arenasCreated() int {
	w.amu.Lock()
	defer w.amu.Unlock()
	return w.created
}

// workerArenaMappings counts the arenas the worker process w has mapped
// (distinct memfds named tenzro-plugin-arena in its /proc maps).
func workerArenaMappings(t *testing.T, w *worker) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.Contains(line, "tenzro-plugin-arena") {
			inodes[f[4]] = true
		}
	}
	return len(inodes)
}

// heldState is a finalize's new state handed over by Hold.
type heldState struct {
	blob, mom []byte // the arena's bytes
	want      []byte // a copy of blob+mom when handed over
	release   func()
}

// TestFinalizeHoldsArena: a finalize through a real worker whose caller
// takes the new state (Hold) gets the weights blob (the header, then the
// values: the bytes Write is given after the header) and the momentum in
// the worker's arena, hashed as known says; the arena is held: the next
// finalize on the same worker uses another one and the held bytes do not
// change; released arenas are reused (no more are made); the worker keeps
// both arenas mapped while they alternate and unmaps them at a trim, which
// leaves a held arena alone; and a worker killed while its arena is held
// leaves the held bytes readable.
func TestFinalizeHoldsArena(t *testing.T) {
	ctx := context.Background()
	e := workerEngine(t, Config{})
	outer, err := e.ResolveOuter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rule, err := e.ResolveRule(ctx, "Mean", nil, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3*leafCoords + 77
	r := rand.New(rand.NewPCG(5, 21))
	header := fragmentHeader(t, n, 3, 40)
	fixture := func() syncer.FinalizeInput {
		in := fusedFixture(t, r, rule, outer, 3, n)
		in.WeightsHeader = header
		return in
	}
	// reference runs in through Write: the blob and momentum it stands for.
	reference := func(in syncer.FinalizeInput) []byte {
		var want []byte
		in.Hold = nil
		in.Write = func(w, m []byte, known *syncer.StateHashes) error {
			if known == nil {
				t.Fatal("no hashes")
			}
			want = append(append(append([]byte(nil), header...), w...), m...)
			return nil
		}
		if _, err := e.Finalize(ctx, in); err != nil {
			t.Fatal(err)
		}
		return want
	}
	finalize := func(in syncer.FinalizeInput) *heldState {
		t.Helper()
		var h *heldState
		in.Write = func([]byte, []byte, *syncer.StateHashes) error {
			t.Fatal("Write called though the caller holds the state")
			return nil
		}
		in.Hold = func(blob, mom []byte, known syncer.StateHashes, release func()) error {
			if wire.ContentHash(blob) != known.Weights || wire.ContentHash(mom) != known.Momentum {
				t.Fatal("held bytes do not hash as known says")
			}
			if !bytes.HasPrefix(blob, header) || len(blob) != len(header)+4*n || len(mom) != 4*n {
				t.Fatalf("weights blob of %d bytes, momentum %d", len(blob), len(mom))
			}
			h = &heldState{blob: blob, mom: mom, want: append(bytes.Clone(blob), mom...), release: release}
			return nil
		}
		out, err := e.Finalize(ctx, in)
		if err != nil || out.Status != wire.FragAggregated || h == nil {
			t.Fatalf("finalize: %v %s, held %v", err, out.Status, h != nil)
		}
		return h
	}
	unchanged := func(what string, h *heldState) {
		t.Helper()
		if !bytes.Equal(append(bytes.Clone(h.blob), h.mom...), h.want) {
			t.Fatalf("%s: held bytes changed", what)
		}
	}
	worker := func() *worker {
		e.pool.mu.Lock()
		defer e.pool.mu.Unlock()
		if len(e.pool.idle) != 1 {
			t.Fatalf("%d idle workers", len(e.pool.idle))
		}
		return e.pool.idle[0]
	}

	in1, in2 := fixture(), fixture()
	want1, want2 := reference(in1), reference(in2)
	w := worker()
	base := w.arenasCreated() // the references' (one arena, reused)
	a := finalize(in1)
	if !bytes.Equal(a.want, want1) {
		t.Fatal("held state differs from Write's")
	}
	if w.arenasCreated() != base {
		t.Fatalf("a free arena was not used: %d made", w.arenasCreated()-base)
	}
	b := finalize(in2)
	if !bytes.Equal(b.want, want2) {
		t.Fatal("second held state differs from Write's")
	}
	if &b.blob[0] == &a.blob[0] || w.arenasCreated() != base+1 {
		t.Fatalf("the next finalize did not take a new arena: %d made", w.arenasCreated()-base)
	}
	unchanged("after the next finalize", a)
	if got := workerArenaMappings(t, w); got != 2 {
		t.Fatalf("worker maps %d arenas, want both", got)
	}
	a.release()
	a.release() // once only
	c := finalize(in1)
	if w.arenasCreated() != base+1 || &c.blob[0] != &a.blob[0] {
		t.Fatalf("the released arena was not reused: %d made", w.arenasCreated()-base)
	}
	unchanged("b, after the released arena was reused", b)
	b.release()
	c.release()
	if free, held := w.arenaBytes(); free == 0 || held != 0 {
		t.Fatalf("after the releases: %d bytes free, %d held", free, held)
	}
	if got := workerArenaMappings(t, w); got != 2 {
		t.Fatalf("worker maps %d arenas after the releases, want 2", got)
	}

	// A trim unmaps the free arenas in both processes, not a held one.
	d := finalize(in2)
	e.pool.mu.Lock()
	uses := w.uses
	e.pool.mu.Unlock()
	e.pool.trimArena(w, uses)
	if free, held := w.arenaBytes(); free != 0 || held == 0 {
		t.Fatalf("after a trim: %d bytes free, %d held", free, held)
	}
	if got := workerArenaMappings(t, w); got != 0 {
		t.Fatalf("worker maps %d arenas after a drop", got)
	}
	unchanged("after a trim", d)
	d.release()
	if free, _ := w.arenaBytes(); free == 0 {
		t.Fatal("a held arena released after a trim is not free")
	}

	// A worker killed while its arena is held: the next call finds it
	// dead (a worker error) and the pool drops it.
	f := finalize(in1)
	if err := w.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-w.exited
	unchanged("after the worker was killed", f)
	in1.Hold, in1.Write = nil, nil
	if _, err := e.Finalize(ctx, in1); !IsWorkerError(err) {
		t.Fatalf("a finalize on the killed worker: %v", err)
	}
	unchanged("after the pool dropped the killed worker", f)
	f.release()
	if free, held := w.arenaBytes(); free != 0 || held != 0 {
		t.Fatalf("a dead worker keeps %d bytes free, %d held", free, held)
	}
	g := finalize(in2)
	if !bytes.Equal(g.want, want2) {
		t.Fatal("after the kill: other bytes")
	}
	g.release()
}
