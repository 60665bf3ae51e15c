package syncer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// gateEngine is the native engine with a controllable Aggregate (a test
// fake standing in for a slow, looping or killed plugin worker).
type gateEngine struct {
	*syncer.NativeEngine
	calls   atomic.Int32
	entered chan struct{} // receives once per Aggregate call, if non-nil
	release chan struct{} // Aggregate waits for it, if non-nil
	failN   int32         // the first failN calls fail locally
}

// Finalize runs the steps through this engine's Aggregate (the embedded
// engine's Finalize would call its own).
func (g *gateEngine) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	return syncer.FinalizeInMemory(ctx, g, in)
}

func (g *gateEngine) Aggregate(ctx context.Context, in syncer.AggregateInput) (syncer.AggregateOutput, error) {
	c := g.calls.Add(1)
	if g.entered != nil {
		g.entered <- struct{}{}
	}
	if g.release != nil {
		<-g.release
	}
	if c <= g.failN {
		return syncer.AggregateOutput{}, fmt.Errorf("plugins: worker aggregate: killed at the wall-clock backstop: %w", syncer.ErrLocal)
	}
	return g.NativeEngine.Aggregate(ctx, in)
}

// tickHarness: a run of M trainers, K=2, one fragment, whose fragment 0
// has K submissions; the node uses eng. The grace window is still open
// (h.advance(31 s) closes it).
func tickHarness(t *testing.T, eng syncer.Engine, m int) *harness {
	t.Helper()
	kv, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, kv, eng)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	if err := h.post(spec(h.task, h.sponsor.DID.String(), m, 2, 1, 2), initWeights(t, 1, 16)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m; i++ {
		h.faucet(h.tr[i].DID.String(), "200000000000000000000")
		if err := h.enroll(i, "100000000000000000000"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := h.submit(h.gradient(i, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestTickRunsPluginsOutsideTheLock: while the timer's aggregation is
// running (a plugin that loops until the worker is killed, here held by a
// gate), writes that need the node's mutex complete; one that changes the
// fragment's inputs (a trainer leaving changes no input, a fragment's
// submissions do) makes the tick commit nothing, and the next one commits.
func TestTickRunsPluginsOutsideTheLock(t *testing.T) {
	g := &gateEngine{NativeEngine: syncer.NewNativeEngine(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := tickHarness(t, g, 3)
	h.advance(31 * time.Second) // past the 30 s grace window
	done := make(chan error, 1)
	go func() { done <- h.node.Tick(h.ctx) }()
	<-g.entered
	wrote := make(chan error, 1)
	go func() {
		h.faucet(h.tr[5].DID.String(), "1")
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("submit during the aggregation: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write waited on the node mutex during a plugin call")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	tr, err := h.node.GetTranscript(h.ctx, h.task)
	if err != nil || len(tr) != 1 || len(tr[0].Fragments[0].Inputs) != 2 || tr[0].Fragments[0].Status != wire.FragAggregated {
		t.Fatalf("transcript after the tick: %+v %v", tr, err)
	}
}

// TestLastSubmissionFinalizesOutsideTheLock: the submission that completes
// a fragment is accepted without waiting on a plugin call; the timer
// finalizes it, and a local failure there is retried, never recorded.
func TestLastSubmissionFinalizesOutsideTheLock(t *testing.T) {
	g := &gateEngine{NativeEngine: syncer.NewNativeEngine(), failN: 1}
	h := tickHarness(t, g, 3)
	res, err := h.node.Submit(h.ctx, h.gradient(2, 0, 0, 1))
	if err != nil || !res.Accepted || g.calls.Load() != 0 {
		t.Fatalf("the completing submission: %+v %v (%d plugin calls)", res, err, g.calls.Load())
	}
	if err := h.node.Tick(h.ctx); err != nil || h.run().Round != 0 || g.calls.Load() != 1 {
		t.Fatalf("after a local failure: round %d, %d calls, %v", h.run().Round, g.calls.Load(), err)
	}
	h.now = h.now.Add(2 * time.Second)
	if err := h.node.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	if v := h.run(); v.Round != 1 || g.calls.Load() != 2 {
		t.Fatalf("round %d after the retry (%d calls)", v.Round, g.calls.Load())
	}
}

// TestTickAbstainsOnLocalFailure: a killed worker is never recorded; the
// node retries after a backoff and then commits normally.
func TestTickAbstainsOnLocalFailure(t *testing.T) {
	g := &gateEngine{NativeEngine: syncer.NewNativeEngine(), failN: 1}
	h := tickHarness(t, g, 3)
	h.advance(31 * time.Second) // past the 30 s grace window
	if err := h.node.Tick(h.ctx); err != nil {
		t.Fatalf("a local failure stopped the timer: %v", err)
	}
	if tr, _ := h.node.GetTranscript(h.ctx, h.task); len(tr) != 0 || h.run().Round != 0 {
		t.Fatalf("a local failure was recorded: %+v", tr)
	}
	if err := h.node.Tick(h.ctx); err != nil || g.calls.Load() != 1 {
		t.Fatalf("retried within the backoff: %d calls, %v", g.calls.Load(), err)
	}
	h.now = h.now.Add(2 * time.Second)
	if err := h.node.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	tr, err := h.node.GetTranscript(h.ctx, h.task)
	if err != nil || len(tr) != 1 || tr[0].Fragments[0].Status != wire.FragAggregated || g.calls.Load() != 2 {
		t.Fatalf("after the backoff: %d calls, %+v %v", g.calls.Load(), tr, err)
	}
}

// TestFinalizeRoundRunsPluginsOutsideTheLock: finalizeRound computes before
// taking the node's mutex, so a write completes during its aggregation.
func TestFinalizeRoundRunsPluginsOutsideTheLock(t *testing.T) {
	g := &gateEngine{NativeEngine: syncer.NewNativeEngine(), entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := tickHarness(t, g, 3)
	h.advance(31 * time.Second) // past the 30 s grace window
	// No worker runs here, so only the elected syncer's signed
	// finalizeRound commits.
	p := &wire.FinalizeParams{TaskID: h.task, SyncerDID: h.syncerKey().DID.String(), Round: 0}
	p.Nonce, p.ChainID = h.nextNonce(), chain.ManualChainID
	p.Signature = h.syncerKey().Sign(p.Preimage())
	done := make(chan error, 1)
	go func() {
		_, err := h.node.FinalizeRound(h.ctx, p)
		done <- err
	}()
	<-g.entered
	wrote := make(chan struct{})
	go func() {
		h.faucet(h.tr[5].DID.String(), "1")
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatal("a write waited on the node mutex during finalizeRound's plugin call")
	}
	close(g.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := h.run(); v.Round != 1 {
		t.Fatalf("round %d after finalizeRound", v.Round)
	}
}

// holdFirst holds only the first Aggregate call until release is closed.
type holdFirst struct {
	*syncer.NativeEngine
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

// Finalize runs the steps through this engine's Aggregate (the embedded
// engine's Finalize would call its own).
func (g *holdFirst) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	return syncer.FinalizeInMemory(ctx, g, in)
}

func (g *holdFirst) Aggregate(ctx context.Context, in syncer.AggregateInput) (syncer.AggregateOutput, error) {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	return g.NativeEngine.Aggregate(ctx, in)
}

// TestSlowRunDoesNotStallOthers: the Run loop ticks each run on its own, so
// while one run's aggregation is held (a plugin looping until the
// backstop), another run's completed fragment still commits.
func TestSlowRunDoesNotStallOthers(t *testing.T) {
	g := &holdFirst{NativeEngine: syncer.NewNativeEngine(), entered: make(chan struct{}), release: make(chan struct{})}
	h := tickHarness(t, g, 2) // run A: every trainer in, its aggregation held
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.node.Run(ctx) }()
	defer func() {
		close(g.release)
		cancel()
		<-done
	}()
	<-g.entered
	first := h.task
	h.task = "train-b"
	h.faucet(h.sponsor.DID.String(), "1000000000000000000") // the burned posting fee of the second run
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 2, 2, 1, 2), initWeights(t, 1, 16)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := h.enroll(i, "100000000000000000000"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := h.submit(h.gradient(i, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for h.run().Round == 0 {
		if time.Now().After(deadline) {
			t.Fatal("run B's fragment did not commit while run A's aggregation was held")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.task = first
	if h.run().Round != 0 {
		t.Fatal("run A committed while its aggregation was held")
	}
}
