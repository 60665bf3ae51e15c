package chain

import (
	"context"
	"strings"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cosmos/iavl"

	"github.com/tenzro/train/wire"
)

// snapshotOf takes a snapshot of h's committed state now and returns it
// as ListSnapshots offers it, with its chunks.
func snapshotOf(t *testing.T, h *harness) (*abci.Snapshot, [][]byte) {
	t.Helper()
	ctx := context.Background()
	h.app.mu.RLock()
	it, blk := h.app.committed, h.app.block
	h.app.mu.RUnlock()
	if err := h.app.snap.take(it, blk); err != nil {
		t.Fatal(err)
	}
	l, err := h.app.ListSnapshots(ctx, &abci.RequestListSnapshots{})
	if err != nil || len(l.Snapshots) == 0 {
		t.Fatalf("list: %v %d", err, len(l.Snapshots))
	}
	s := l.Snapshots[0]
	if int64(s.Height) != blk.Height {
		t.Fatalf("newest snapshot at %d, want %d", s.Height, blk.Height)
	}
	var chunks [][]byte
	for i := uint32(0); i < s.Chunks; i++ {
		c, err := h.app.LoadSnapshotChunk(ctx, &abci.RequestLoadSnapshotChunk{Height: s.Height, Format: s.Format, Chunk: i})
		if err != nil || len(c.Chunk) == 0 {
			t.Fatalf("chunk %d: %v", i, err)
		}
		chunks = append(chunks, c.Chunk)
	}
	return s, chunks
}

func offer(t *testing.T, h *harness, s *abci.Snapshot, app wire.Hash) abci.ResponseOfferSnapshot_Result {
	t.Helper()
	r, err := h.app.OfferSnapshot(context.Background(), &abci.RequestOfferSnapshot{Snapshot: s, AppHash: app[:]})
	if err != nil {
		t.Fatal(err)
	}
	return r.Result
}

func apply(t *testing.T, h *harness, i int, c []byte, sender string) *abci.ResponseApplySnapshotChunk {
	t.Helper()
	r, err := h.app.ApplySnapshotChunk(context.Background(), &abci.RequestApplySnapshotChunk{Index: uint32(i), Chunk: c, Sender: sender})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSnapshotRestore: a fresh application restores another's snapshot
// (several chunks) against the app hash of its height and then follows the
// same blocks to the same app hashes; a chunk from a lying peer is refused
// (refetched, the sender rejected) with a precise error; a snapshot whose
// state does not give the trusted app hash is rejected and leaves nothing
// behind, so a good one restores after it.
func TestSnapshotRestore(t *testing.T) {
	w := newWorld(t)
	a := &harness{t: t, now: genesisTime.Add(1e9), snaps: SnapshotOptions{Dir: t.TempDir(), ChunkBytes: 2048}}
	a.open()
	a.genesis(w.genesis)
	w.play(t, a)
	height, app := a.app.LastCommit()
	s, chunks := snapshotOf(t, a)
	if len(chunks) < 3 {
		t.Fatalf("%d chunks: the test wants several", len(chunks))
	}

	b := &harness{t: t, dir: t.TempDir(), now: a.now}
	b.open()
	// A wrong trusted app hash: every chunk applies, the last one fails the
	// check, and the snapshot is rejected with nothing left behind.
	bad := app
	bad[0] ^= 1
	if r := offer(t, b, s, bad); r != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer: %v", r)
	}
	for i, c := range chunks {
		r := apply(t, b, i, c, "peer-a")
		want := abci.ResponseApplySnapshotChunk_ACCEPT
		if i == len(chunks)-1 {
			want = abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT
		}
		if r.Result != want {
			t.Fatalf("chunk %d: %v, want %v (%v)", i, r.Result, want, b.app.RestoreError())
		}
	}
	if err := b.app.RestoreError(); err == nil || !strings.Contains(err.Error(), "light-client-verified header says "+bad.String()) {
		t.Fatalf("rejection: %v", err)
	}
	if hb, _ := b.app.LastCommit(); hb != 0 {
		t.Fatalf("rejected snapshot left height %d", hb)
	}
	if err := b.app.checkEmpty(context.Background()); err != nil {
		t.Fatalf("rejected snapshot left state: %v", err)
	}

	// The right app hash, and a lying peer for chunk 1.
	if r := offer(t, b, s, app); r != abci.ResponseOfferSnapshot_ACCEPT {
		t.Fatalf("offer: %v", r)
	}
	if r := apply(t, b, 0, chunks[0], "peer-a"); r.Result != abci.ResponseApplySnapshotChunk_ACCEPT {
		t.Fatalf("chunk 0: %v", r.Result)
	}
	lie := append([]byte(nil), chunks[1]...)
	lie[len(lie)/2] ^= 0xff
	r := apply(t, b, 1, lie, "peer-liar")
	if r.Result != abci.ResponseApplySnapshotChunk_RETRY || len(r.RefetchChunks) != 1 || r.RefetchChunks[0] != 1 || len(r.RejectSenders) != 1 || r.RejectSenders[0] != "peer-liar" {
		t.Fatalf("lying chunk: %+v", r)
	}
	if err := b.app.RestoreError(); err == nil || !strings.Contains(err.Error(), "chunk 1 from peer peer-liar has hash") {
		t.Fatalf("lying chunk error: %v", err)
	}
	for i := 1; i < len(chunks); i++ {
		if r := apply(t, b, i, chunks[i], "peer-a"); r.Result != abci.ResponseApplySnapshotChunk_ACCEPT {
			t.Fatalf("chunk %d: %v (%v)", i, r.Result, b.app.RestoreError())
		}
	}
	info, _ := b.app.Info(context.Background(), &abci.RequestInfo{})
	if info.LastBlockHeight != height || wire.Hash(info.LastBlockAppHash) != app {
		t.Fatalf("restored Info %d %x, want %d %s", info.LastBlockHeight, info.LastBlockAppHash, height, app)
	}
	b.height = height
	// Both follow the same blocks to the same hashes.
	for i := 0; i < 3; i++ {
		_, ha := a.block()
		b.now = a.now.Add(-a.step)
		if _, hb := b.block(); hb != ha {
			t.Fatalf("block %d after restore: %s vs %s", a.height, hb, ha)
		}
	}
	b.conservation()
	if b.balance(w.t2) != a.balance(w.t2) {
		t.Fatal("balances differ after restore")
	}
	// The restored node restarts from its own store.
	b.close()
	b.open()
	if hb, got := b.app.LastCommit(); hb != a.height || got != func() wire.Hash { _, x := a.app.LastCommit(); return x }() {
		t.Fatalf("restored node after restart: %d %s", hb, got)
	}
	// A node with state refuses snapshots.
	if r := offer(t, b, s, app); r != abci.ResponseOfferSnapshot_ABORT {
		t.Fatalf("offer to a node with state: %v", r)
	}
}

// TestSnapshotSchedule: a snapshot every Interval heights, the Keep newest
// kept; a malformed offer is refused.
func TestSnapshotSchedule(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	a := &harness{t: t, now: genesisTime.Add(1e9), snaps: SnapshotOptions{Dir: dir, Interval: 2, Keep: 2}}
	a.open()
	a.genesis(w.genesis)
	for i := 0; i < 7; i++ {
		a.block()
		a.app.snap.wait()
	}
	if got := a.app.snap.heights(); len(got) != 2 || got[0] != 6 || got[1] != 4 {
		t.Fatalf("snapshots at %v, want [6 4]", got)
	}
	l, _ := a.app.ListSnapshots(context.Background(), &abci.RequestListSnapshots{})
	s := *l.Snapshots[0]
	b := newHarness(t, "")
	_, app := a.app.LastCommit()
	for name, c := range map[string]struct {
		mut  func(s *abci.Snapshot)
		want abci.ResponseOfferSnapshot_Result
	}{
		"format":   {func(s *abci.Snapshot) { s.Format = 9 }, abci.ResponseOfferSnapshot_REJECT_FORMAT},
		"hash":     {func(s *abci.Snapshot) { s.Hash = make([]byte, 32) }, abci.ResponseOfferSnapshot_REJECT},
		"chunks":   {func(s *abci.Snapshot) { s.Chunks++ }, abci.ResponseOfferSnapshot_REJECT},
		"metadata": {func(s *abci.Snapshot) { s.Metadata = []byte(`{"chunk_hashes":[],"x":1}`) }, abci.ResponseOfferSnapshot_REJECT},
	} {
		m := s
		c.mut(&m)
		if r := offer(t, b, &m, app); r != c.want {
			t.Errorf("%s: %v, want %v", name, r, c.want)
		}
	}
}

// FuzzSnapshotStream: the snapshot node decoder and metadata parser take
// any bytes without panicking, and a decoded node encodes back to the
// bytes it came from.
func FuzzSnapshotStream(f *testing.F) {
	f.Add(appendExportNode(nil, &iavl.ExportNode{Key: []byte("k"), Value: []byte("v"), Version: 3}), []byte(`{"chunk_hashes":["`+wire.Hash{}.String()+`"],"block_time_ms":1,"block_hash":""}`))
	f.Add(appendExportNode(nil, &iavl.ExportNode{Key: []byte("k"), Version: 3, Height: 2}), []byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte, meta []byte) {
		_, _ = parseSnapshotMeta(meta)
		for len(b) > 0 {
			n, used, err := readExportNode(b)
			if err != nil {
				return
			}
			if got := appendExportNode(nil, n); string(got) != string(b[:used]) {
				t.Fatalf("re-encoded %x, read from %x", got, b[:used])
			}
			b = b[used:]
		}
	})
}

// TestTreeAheadAfterCrash: a crash after the state tree saved a height and
// before the flat store committed it leaves the tree one version ahead;
// the app rewinds it, reports the last committed height, and the block
// replayed gives the same app hash as an uninterrupted twin.
func TestTreeAheadAfterCrash(t *testing.T) {
	w := newWorld(t)
	ref := newHarness(t, "")
	ref.genesis(w.genesis)
	dir := t.TempDir()
	a := newHarness(t, dir)
	a.genesis(w.genesis)
	for i := 0; i < 3; i++ {
		_, want := ref.block()
		if _, got := a.block(); got != want {
			t.Fatal("diverged")
		}
	}
	a.finalize()
	if _, err := a.app.tree.save(a.height + 1); err != nil { // the tree's half of Commit
		t.Fatal(err)
	}
	a.close()
	now := a.now
	a = &harness{t: t, dir: dir, now: now}
	a.open()
	if h, got := a.app.LastCommit(); h != 3 || got != func() wire.Hash { _, x := ref.app.LastCommit(); return x }() {
		t.Fatalf("after the crash: height %d hash %s", h, got)
	}
	_, want := ref.block()
	if _, got := a.block(); got != want {
		t.Fatalf("replayed block: %s vs %s", got, want)
	}
}

// TestPruningWindow: with a window of 3 heights the tree keeps only the 3
// newest versions, the app hashes equal an unpruned twin's, and the pruned
// app restarts and proves reads at its last height.
func TestPruningWindow(t *testing.T) {
	w := newWorld(t)
	ref := newHarness(t, "")
	ref.genesis(w.genesis)
	dir := t.TempDir()
	a := &harness{t: t, dir: dir, now: ref.now, keep: 3}
	a.open()
	a.genesis(w.genesis)
	w.play(t, ref, a)
	if got := a.app.tree.t.AvailableVersions(); len(got) != 3 || int64(got[2]) != a.height {
		t.Fatalf("versions kept %v at height %d", got, a.height)
	}
	if got := ref.app.tree.t.AvailableVersions(); len(got) != int(ref.height) {
		t.Fatalf("the unpruned twin keeps %d versions at height %d", len(got), ref.height)
	}
	a.close()
	a = &harness{t: t, dir: dir, now: ref.now, keep: 3}
	a.open()
	_, want := ref.block()
	if _, got := a.block(); got != want {
		t.Fatalf("after restart: %s vs %s", got, want)
	}
	res, app := a.proven(QueryBalance, w.t2.DID.String())
	if err := VerifyStateProof(res.ProofOps, res.Key, res.Value, res.Height, app); err != nil {
		t.Fatal(err)
	}
}
