package syncer_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// heldBlobs is a file blob store whose deferred writes (the syncer's new
// state) wait, once they start, until release is closed.
type heldBlobs struct {
	*store.Blobs
	held    chan wire.Hash
	release chan struct{}
	once    sync.Once
}

func openHeldBlobs(t *testing.T, dir string) *heldBlobs {
	hb := &heldBlobs{held: make(chan wire.Hash, 16), release: make(chan struct{})}
	bs, err := store.OpenBlobs(dir, store.BlobOptions{Logger: quiet, HoldWrite: func(h wire.Hash) { hb.held <- h; <-hb.release }})
	if err != nil {
		t.Fatal(err)
	}
	hb.Blobs = bs
	t.Cleanup(func() { hb.let(); _ = bs.Close() })
	return hb
}

func (hb *heldBlobs) let() { hb.once.Do(func() { close(hb.release) }) }

// copyNamedBlobs copies the blob files named in src (what a node killed
// now leaves on disk: no pending write) into dst.
func copyNamedBlobs(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || len(d.Name()) != 64 {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		return errorsJoin(err, out.Close())
	})
	if err != nil {
		t.Fatal(err)
	}
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// fileHash is the content hash of the blob file of h in dir (zero: absent).
func fileHash(t *testing.T, bs *store.Blobs, h wire.Hash) wire.Hash {
	t.Helper()
	raw, err := os.ReadFile(bs.Path(h))
	if os.IsNotExist(err) {
		return wire.Hash{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return wire.ContentHash(raw)
}

// TestStateWrittenAfterCommit: the syncer's commit goes out while the new
// weights' and momentum's durable writes are held; meanwhile getWeights
// and the blob store serve their right bytes from memory and no file is
// named. The node then "dies" (its store is left with the files it named:
// the held writes never happen) and restarts on them: RestoreState
// re-executes the commit and stores the state byte-identical to the
// committed hashes, a second pass finds nothing, and the run goes on to
// the next round, whose re-execution agrees. With an input missing too,
// RestoreState reports a precise error and names no blob. Both with and
// without a challenge window (a --dev run's round is final at once: only
// the transcript is left to re-execute from).
func TestStateWrittenAfterCommit(t *testing.T) {
	for _, window := range []string{"", challengeable} {
		name := "final at once"
		if window != "" {
			name = "challengeable"
		}
		t.Run(name, func(t *testing.T) { stateAfterCommit(t, window, syncer.NewNativeEngine()) })
	}
	// The engine hashes the new state itself (as the plugin host's sweep
	// does): the commit names its hashes, the store takes the bytes
	// without hashing them again, and the restore — which re-derives and
	// hashes apart from the engine — finds the same hashes.
	eng := &stateHashingEngine{Engine: syncer.NewNativeEngine()}
	t.Run("engine hashes the state", func(t *testing.T) { stateAfterCommit(t, "", eng) })
	if eng.used.Load() == 0 {
		t.Fatal("the node never asked the engine to hash the new state")
	}
	// The engine hands its hashed state over (as the plugin host does
	// with a worker's arena, FinalizeInput.Hold): the store holds those
	// bytes as the pending blobs without copying them (HeldWrites), the
	// rest is the same, and every handed-over buffer is released once.
	holder := &stateHoldingEngine{Engine: syncer.NewNativeEngine()}
	t.Run("engine hands the state over", func(t *testing.T) {
		first := stateAfterCommit(t, "", holder)
		if n := first.HeldWrites(); n != 2 {
			t.Fatalf("the store took %d blobs without copying them, want round 0's two", n)
		}
	})
	if n, rel := holder.held.Load(), holder.released.Load(); n == 0 || rel != n {
		t.Fatalf("state handed over %d times, released %d times", n, rel)
	}
}

// stateHoldingEngine hands the new state over (FinalizeInput.Hold) when
// the node lets it: the weights blob (header and values) and the momentum
// in buffers of its own, with their hashes; it counts the releases.
type stateHoldingEngine struct {
	syncer.Engine
	held, released atomic.Int64
}

func (e *stateHoldingEngine) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	if header, hold := in.WeightsHeader, in.Hold; header != nil && hold != nil {
		in.Write = func(w, m []byte, _ *syncer.StateHashes) error {
			blob, mom := append(append([]byte(nil), header...), w...), append([]byte(nil), m...)
			e.held.Add(1)
			var once atomic.Bool
			release := func() {
				if !once.CompareAndSwap(false, true) {
					panic("released twice")
				}
				e.released.Add(1)
			}
			return hold(blob, mom, syncer.StateHashes{Weights: wire.ContentHash(blob), Momentum: wire.ContentHash(mom)}, release)
		}
	}
	return e.Engine.Finalize(ctx, in)
}

// stateHashingEngine gives Write the new state's hashes when the node asks
// (FinalizeInput.WeightsHeader), computed from the header and the bytes.
type stateHashingEngine struct {
	syncer.Engine
	used atomic.Int64
}

func (e *stateHashingEngine) Finalize(ctx context.Context, in syncer.FinalizeInput) (syncer.FinalizeOutput, error) {
	if header, write := in.WeightsHeader, in.Write; header != nil && write != nil {
		in.Write = func(w, m []byte, _ *syncer.StateHashes) error {
			e.used.Add(1)
			return write(w, m, &syncer.StateHashes{Weights: wire.ContentHash(append(append([]byte(nil), header...), w...)), Momentum: wire.ContentHash(m)})
		}
	}
	return e.Engine.Finalize(ctx, in)
}

// stateAfterCommit runs the test with eng; it returns the store round 0's
// state was written to.
func stateAfterCommit(t *testing.T, window string, eng syncer.Engine) *heldBlobs {
	const M, N = 3, 5000
	ctx := context.Background()
	kv, _ := store.OpenInMemory()
	h := newHarnessWith(t, kv, eng)
	dir := t.TempDir()
	first := openHeldBlobs(t, dir)
	h.configure = func(c *syncer.Config) { c.Blobs = first }
	h.open()
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	sp := strings.Replace(strings.Replace(string(spec(h.task, h.sponsor.DID.String(), M, M, 1, 3)), `"param_count":16`, fmt.Sprintf(`"param_count":%d`, N), 1),
		`"aggregation":"Mean"`, window+`"aggregation":"Mean"`, 1)
	if err := h.post([]byte(sp), initWeights(t, 1, N)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < M; i++ {
		h.faucet(h.tr[i].DID.String(), "1000")
		if err := h.enroll(i, "1000"); err != nil {
			t.Fatal(err)
		}
	}
	// Round 0: committed while the state's writes are held.
	for i := 0; i < M; i++ {
		if err := h.submit(h.gradient(i, 0, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	h.closeRound(0)
	tr, err := h.node.GetTranscript(ctx, h.task)
	if err != nil || len(tr) != 1 {
		t.Fatalf("transcript: %d rounds, %v", len(tr), err)
	}
	fc := tr[0].Fragments[0]
	if fc.Status != wire.FragAggregated {
		t.Fatalf("round 0: %s %s", fc.Status, fc.Reason)
	}
	wh, mh := fc.WeightsAfter, fc.MomentumAfter
	held := map[wire.Hash]bool{<-first.held: true, <-first.held: true}
	if !held[wh] || !held[mh] {
		t.Fatalf("held writes %v, want the committed weights %s and momentum %s", held, wh, mh)
	}
	for _, x := range []wire.Hash{wh, mh} {
		if !first.Pending(x) || !fileHash(t, first.Blobs, x).IsZero() {
			t.Fatalf("%s: pending %v, file named before its write", x, first.Pending(x))
		}
		b, err := first.Get(ctx, x)
		if err != nil || wire.ContentHash(b) != x {
			t.Fatalf("pending %s served wrong: %v", x, err)
		}
	}
	if got := h.run().Fragments[0].WeightsHash; got != wh {
		t.Fatalf("run's weights %s, committed %s", got, wh)
	}
	h.weights(0) // getWeights of the pending weights: checked against weights_hash

	// The crash: a node restarted on what its store had named.
	dir2 := t.TempDir()
	copyNamedBlobs(t, dir, dir2)
	// With an input missing as well, the state cannot be re-derived (and
	// no peer gives it): a precise error, nothing named.
	payload := tr[0].Fragments[0].Inputs[1].PayloadHash
	broken := t.TempDir()
	copyNamedBlobs(t, dir, broken)
	bb, err := store.OpenBlobs(broken, store.BlobOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := bb.Delete(ctx, payload); err != nil {
		t.Fatal(err)
	}
	h.configure = func(c *syncer.Config) { c.Blobs = bb }
	h.open()
	n, err := h.node.RestoreState(ctx)
	if n != 0 || err == nil || !strings.Contains(err.Error(), payload.String()) || !strings.Contains(err.Error(), "fetch") {
		t.Fatalf("restore with an input missing: %d restored, err %v; want an error naming payload %s and the fetch", n, err, payload)
	}
	if ok, _ := bb.Has(ctx, wh); ok {
		t.Fatal("the weights were named without being re-derived")
	}
	_ = bb.Close()

	second, err := store.OpenBlobs(dir2, store.BlobOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	for _, x := range []wire.Hash{wh, mh} {
		if ok, _ := second.Has(ctx, x); ok {
			t.Fatalf("%s on disk though its write was held", x)
		}
	}
	h.configure = func(c *syncer.Config) { c.Blobs = second }
	h.open()
	if n, err := h.node.RestoreState(ctx); n != 1 || err != nil {
		t.Fatalf("restore: %d fragments, %v; want 1", n, err)
	}
	for _, x := range []wire.Hash{wh, mh} {
		if got := fileHash(t, second, x); got != x {
			t.Fatalf("re-derived %s holds bytes hashing to %s", x, got)
		}
	}
	if n, err := h.node.RestoreState(ctx); n != 0 || err != nil {
		t.Fatalf("a second restore: %d fragments, %v; want nothing to do", n, err)
	}

	// The run goes on from the re-derived state.
	for i := 0; i < M; i++ {
		if err := h.submit(h.gradient(i, 1, 0, 1)); err != nil {
			t.Fatal(err)
		}
	}
	h.closeRound(1)
	tr, err = h.node.GetTranscript(ctx, h.task)
	if err != nil || len(tr) != 2 {
		t.Fatalf("transcript: %d rounds, %v", len(tr), err)
	}
	if c := tr[1].Fragments[0]; c.Status != wire.FragAggregated || c.WeightsBefore != wh {
		t.Fatalf("round 1: %s from %s, want aggregated from %s", c.Status, c.WeightsBefore, wh)
	}
	if err := second.Durable(ctx, tr[1].Fragments[0].WeightsAfter); err != nil {
		t.Fatal(err)
	}
	if window != "" {
		re, err := h.node.Reexecute(ctx, h.task, 1, 0)
		if err != nil || !re.Agrees() {
			t.Fatalf("round 1 re-execution: %+v %v", re, err)
		}
	}
	return first
}

// TestNextCommitWhileStateWriteStuck: round 0's new state is still not
// durable when round 1 commits (its write held for good, as a disk that
// keeps failing would): the commit waits a bounded time, then reads the
// weights and momentum from memory, and its result is the one a cold
// re-execution computes.
func TestNextCommitWhileStateWriteStuck(t *testing.T) {
	const M, N = 3, 3000
	defer syncer.SetDurableWait(20 * time.Millisecond)()
	ctx := context.Background()
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	bs := openHeldBlobs(t, t.TempDir())
	h.configure = func(c *syncer.Config) { c.Blobs = bs }
	h.openChallengeableMean(M, M, 3, N)
	for round := 0; round < 2; round++ {
		for i := 0; i < M; i++ {
			if err := h.submit(h.gradient(i, round, 0, 1)); err != nil {
				t.Fatal(err)
			}
		}
		h.closeRound(round)
	}
	tr, err := h.node.GetTranscript(ctx, h.task)
	if err != nil || len(tr) != 2 {
		t.Fatalf("transcript: %d rounds, %v", len(tr), err)
	}
	if c := tr[1].Fragments[0]; c.Status != wire.FragAggregated || c.WeightsBefore != tr[0].Fragments[0].WeightsAfter {
		t.Fatalf("round 1: %s from %s", c.Status, c.WeightsBefore)
	}
	if !bs.Pending(tr[0].Fragments[0].WeightsAfter) {
		t.Fatal("round 0's weights were written: the test held nothing")
	}
	re, err := h.node.Reexecute(ctx, h.task, 1, 0)
	if err != nil || !re.Agrees() {
		t.Fatalf("round 1 re-execution: %+v %v", re, err)
	}
}
