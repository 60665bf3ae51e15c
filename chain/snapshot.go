package chain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	abci "github.com/cometbft/cometbft/abci/types"
	"github.com/cosmos/iavl"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// SnapshotFormat is the format of the chain's state-sync snapshots
// (docs/protocol/chain.md §6): the state tree's IAVL export as a stream of
// nodes, cut into chunks.
const SnapshotFormat uint32 = 1

// Snapshot limits.
const (
	// DefaultSnapshotChunkBytes is the size of a snapshot chunk (the last is
	// shorter).
	DefaultSnapshotChunkBytes = 1 << 20
	// MaxSnapshotChunks bounds the chunks of an offered snapshot.
	MaxSnapshotChunks = 1 << 16
	// maxSnapshotMetadata bounds an offered snapshot's metadata.
	maxSnapshotMetadata = 64 + 34*MaxSnapshotChunks
	// maxExportKey and maxExportValue bound a node record in a snapshot
	// stream (a state key; a state value is at most a transaction's size
	// times a small factor: runs are JSON).
	maxExportKey   = 1 << 16
	maxExportValue = 64 << 20
)

// SnapshotOptions configure periodic snapshots.
type SnapshotOptions struct {
	// Dir holds the snapshots (one directory per height); "" takes none and
	// serves none.
	Dir string
	// Interval takes a snapshot after every Interval-th height (0: never,
	// the node still restores from others' snapshots).
	Interval int64
	// Keep is how many of the newest snapshots are kept (default 2).
	Keep int
	// ChunkBytes is the chunk size (default DefaultSnapshotChunkBytes).
	ChunkBytes int
}

// snapshotMeta is a snapshot's metadata (abci.Snapshot.Metadata, JSON):
// the SHA-256 of each chunk, and the block the state is after. The block
// time and hash are not covered by the app hash; a restored node uses them
// only until its next block.
type snapshotMeta struct {
	ChunkHashes []wire.Hash   `json:"chunk_hashes"`
	BlockTimeMs int64         `json:"block_time_ms"`
	BlockHash   wire.HexBytes `json:"block_hash"`
}

// snapshotHash is the snapshot's hash: SHA-256 of its chunk hashes in
// order.
func snapshotHash(hs []wire.Hash) []byte {
	d := sha256.New()
	for _, h := range hs {
		d.Write(h[:])
	}
	return d.Sum(nil)
}

// parseSnapshotMeta decodes metadata strictly.
func parseSnapshotMeta(raw []byte) (*snapshotMeta, error) {
	if len(raw) > maxSnapshotMetadata {
		return nil, fmt.Errorf("snapshot metadata: %d bytes, limit %d", len(raw), maxSnapshotMetadata)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var m snapshotMeta
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("snapshot metadata: %w", err)
	}
	if dec.More() {
		return nil, errors.New("snapshot metadata: trailing data")
	}
	if len(m.ChunkHashes) == 0 || len(m.ChunkHashes) > MaxSnapshotChunks {
		return nil, fmt.Errorf("snapshot metadata: %d chunks (1 to %d)", len(m.ChunkHashes), MaxSnapshotChunks)
	}
	return &m, nil
}

// appendExportNode encodes one IAVL export node: height (1 byte), version
// (uvarint), key (uvarint length, bytes), and for a leaf (height 0) its
// value (uvarint length, bytes).
func appendExportNode(b []byte, n *iavl.ExportNode) []byte {
	b = append(b, byte(n.Height))
	b = binary.AppendUvarint(b, uint64(n.Version))
	b = binary.AppendUvarint(b, uint64(len(n.Key)))
	b = append(b, n.Key...)
	if n.Height == 0 {
		b = binary.AppendUvarint(b, uint64(len(n.Value)))
		b = append(b, n.Value...)
	}
	return b
}

var errShortNode = errors.New("incomplete node")

// readExportNode decodes one node from the front of b, returning it and
// the bytes it used, errShortNode when b ends inside it.
func readExportNode(b []byte) (*iavl.ExportNode, int, error) {
	if len(b) < 1 {
		return nil, 0, errShortNode
	}
	h := int8(b[0])
	if h < 0 || h > 64 {
		return nil, 0, fmt.Errorf("node height %d", h)
	}
	off := 1
	uv := func(max uint64, what string) (uint64, error) {
		v, n := binary.Uvarint(b[off:])
		if n == 0 {
			return 0, errShortNode
		}
		if n < 0 || v > max {
			return 0, fmt.Errorf("node %s out of range", what)
		}
		if n != len(binary.AppendUvarint(nil, v)) {
			return 0, fmt.Errorf("node %s: non-minimal varint", what)
		}
		off += n
		return v, nil
	}
	ver, err := uv(1<<62, "version")
	if err != nil {
		return nil, 0, err
	}
	if ver == 0 {
		return nil, 0, errors.New("node version 0")
	}
	kl, err := uv(maxExportKey, "key length")
	if err != nil {
		return nil, 0, err
	}
	if uint64(len(b)-off) < kl {
		return nil, 0, errShortNode
	}
	n := &iavl.ExportNode{Height: h, Version: int64(ver), Key: append([]byte(nil), b[off:off+int(kl)]...)}
	off += int(kl)
	if h == 0 {
		vl, err := uv(maxExportValue, "value length")
		if err != nil {
			return nil, 0, err
		}
		if uint64(len(b)-off) < vl {
			return nil, 0, errShortNode
		}
		n.Value = append([]byte{}, b[off:off+int(vl)]...)
		off += int(vl)
	}
	return n, off, nil
}

// snapshotter takes and keeps the node's snapshots.
type snapshotter struct {
	o   SnapshotOptions
	log *slog.Logger
	mu  sync.Mutex
	wg  sync.WaitGroup
	// taking: a snapshot is being written (one at a time; a height that
	// comes due meanwhile is skipped).
	taking bool
}

func newSnapshotter(o SnapshotOptions, log *slog.Logger) (*snapshotter, error) {
	if o.Keep <= 0 {
		o.Keep = 2
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultSnapshotChunkBytes
	}
	if o.Interval < 0 {
		return nil, fmt.Errorf("snapshots: interval %d", o.Interval)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	return &snapshotter{o: o, log: log}, nil
}

func (s *snapshotter) wait() { s.wg.Wait() }

// maybeTake starts writing the snapshot of height h in the background
// when h is due (called after Commit with the committed tree in a).
func (s *snapshotter) maybeTake(a *App, h int64) {
	if s.o.Interval == 0 || h%s.o.Interval != 0 {
		return
	}
	s.mu.Lock()
	if s.taking {
		s.mu.Unlock()
		s.log.Warn("snapshot skipped: the previous one is still being written", "height", h)
		return
	}
	s.taking = true
	s.mu.Unlock()
	a.mu.RLock()
	it, blk := a.committed, a.block
	a.mu.RUnlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() { s.mu.Lock(); s.taking = false; s.mu.Unlock() }()
		if err := s.take(it, blk); err != nil {
			s.log.Error("snapshot failed", "height", blk.Height, "err", err)
			return
		}
		s.prune()
	}()
}

func (s *snapshotter) dir(h int64) string {
	return filepath.Join(s.o.Dir, strconv.FormatInt(h, 10))
}

// take writes the export of it (the tree at blk.Height) as chunk files and
// a metadata file, into a temporary directory renamed into place.
func (s *snapshotter) take(it *iavl.ImmutableTree, blk machine.Block) error {
	tmp := filepath.Join(s.o.Dir, fmt.Sprintf("tmp-%d", blk.Height))
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	ex, err := it.Export()
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer ex.Close()
	meta := snapshotMeta{BlockTimeMs: blk.TimeMs, BlockHash: append(wire.HexBytes{}, blk.Hash...)}
	var buf []byte
	flush := func(all bool) error {
		for len(buf) >= s.o.ChunkBytes || (all && (len(buf) > 0 || len(meta.ChunkHashes) == 0)) {
			n := min(len(buf), s.o.ChunkBytes)
			c := buf[:n]
			if err := os.WriteFile(filepath.Join(tmp, strconv.Itoa(len(meta.ChunkHashes))), c, 0o600); err != nil {
				return err
			}
			meta.ChunkHashes = append(meta.ChunkHashes, wire.SHA256(c))
			buf = append([]byte(nil), buf[n:]...)
			if len(meta.ChunkHashes) > MaxSnapshotChunks {
				return fmt.Errorf("more than %d chunks", MaxSnapshotChunks)
			}
		}
		return nil
	}
	for {
		n, err := ex.Next()
		if errors.Is(err, iavl.ErrorExportDone) {
			break
		}
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		buf = appendExportNode(buf, n)
		if err := flush(false); err != nil {
			return err
		}
	}
	if err := flush(true); err != nil {
		return err
	}
	raw, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), raw, 0o600); err != nil {
		return err
	}
	final := s.dir(blk.Height)
	_ = os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	s.log.Info("snapshot taken", "height", blk.Height, "chunks", len(meta.ChunkHashes))
	return nil
}

// heights lists the complete snapshots, newest first.
func (s *snapshotter) heights() []int64 {
	ents, err := os.ReadDir(s.o.Dir)
	if err != nil {
		return nil
	}
	var hs []int64
	for _, e := range ents {
		h, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || h <= 0 || !e.IsDir() {
			continue
		}
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] > hs[j] })
	return hs
}

// prune keeps the Keep newest snapshots.
func (s *snapshotter) prune() {
	for i, h := range s.heights() {
		if i >= s.o.Keep {
			if err := os.RemoveAll(s.dir(h)); err != nil {
				s.log.Warn("snapshot prune", "height", h, "err", err)
			}
		}
	}
}

// load reads snapshot h's metadata.
func (s *snapshotter) load(h int64) (*snapshotMeta, []byte, error) {
	raw, err := os.ReadFile(filepath.Join(s.dir(h), "meta.json"))
	if err != nil {
		return nil, nil, err
	}
	m, err := parseSnapshotMeta(raw)
	return m, raw, err
}

// ListSnapshots offers the node's snapshots to state-syncing peers.
func (a *App) ListSnapshots(context.Context, *abci.RequestListSnapshots) (*abci.ResponseListSnapshots, error) {
	res := &abci.ResponseListSnapshots{}
	if a.snap == nil {
		return res, nil
	}
	for _, h := range a.snap.heights() {
		m, raw, err := a.snap.load(h)
		if err != nil {
			a.log.Warn("snapshot unreadable", "height", h, "err", err)
			continue
		}
		res.Snapshots = append(res.Snapshots, &abci.Snapshot{Height: uint64(h), Format: SnapshotFormat, Chunks: uint32(len(m.ChunkHashes)),
			Hash: snapshotHash(m.ChunkHashes), Metadata: raw})
	}
	return res, nil
}

// LoadSnapshotChunk serves one chunk of a snapshot.
func (a *App) LoadSnapshotChunk(_ context.Context, req *abci.RequestLoadSnapshotChunk) (*abci.ResponseLoadSnapshotChunk, error) {
	if a.snap == nil || req.Format != SnapshotFormat || req.Height == 0 || req.Height > 1<<62 {
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	f, err := os.Open(filepath.Join(a.snap.dir(int64(req.Height)), strconv.FormatUint(uint64(req.Chunk), 10)))
	if err != nil {
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(a.snap.o.ChunkBytes)+1))
	if err != nil || len(b) > a.snap.o.ChunkBytes {
		return &abci.ResponseLoadSnapshotChunk{}, nil
	}
	return &abci.ResponseLoadSnapshotChunk{Chunk: b}, nil
}

// restore is a state-sync restore in progress.
type restore struct {
	height  int64
	appHash wire.Hash
	meta    *snapshotMeta
	imp     *iavl.Importer
	next    uint32
	buf     []byte
}

// OfferSnapshot accepts a snapshot to restore when the application has no
// state yet; the app hash is the one of a light-client-verified header.
func (a *App) OfferSnapshot(ctx context.Context, req *abci.RequestOfferSnapshot) (*abci.ResponseOfferSnapshot, error) {
	reject := func(r abci.ResponseOfferSnapshot_Result, format string, args ...any) (*abci.ResponseOfferSnapshot, error) {
		a.log.Warn("snapshot refused", "reason", fmt.Sprintf(format, args...))
		a.setRestoreErr(fmt.Errorf(format, args...))
		return &abci.ResponseOfferSnapshot{Result: r}, nil
	}
	s := req.Snapshot
	if s == nil {
		return reject(abci.ResponseOfferSnapshot_REJECT, "no snapshot offered")
	}
	if a.height != 0 || a.pending != nil {
		return reject(abci.ResponseOfferSnapshot_ABORT, "the application already has state at height %d", a.height)
	}
	if s.Format != SnapshotFormat {
		return reject(abci.ResponseOfferSnapshot_REJECT_FORMAT, "snapshot format %d, this node restores format %d", s.Format, SnapshotFormat)
	}
	if s.Height == 0 || s.Height > 1<<62 {
		return reject(abci.ResponseOfferSnapshot_REJECT, "snapshot height %d", s.Height)
	}
	m, err := parseSnapshotMeta(s.Metadata)
	if err != nil {
		return reject(abci.ResponseOfferSnapshot_REJECT, "%v", err)
	}
	if int(s.Chunks) != len(m.ChunkHashes) || !bytes.Equal(s.Hash, snapshotHash(m.ChunkHashes)) {
		return reject(abci.ResponseOfferSnapshot_REJECT, "snapshot %d: %d chunks and hash %X disagree with its metadata (%d chunk hashes)", s.Height, s.Chunks, s.Hash, len(m.ChunkHashes))
	}
	if len(req.AppHash) != len(wire.Hash{}) {
		return reject(abci.ResponseOfferSnapshot_REJECT, "trusted app hash of %d bytes", len(req.AppHash))
	}
	if err := a.abortRestore(ctx); err != nil {
		return nil, err
	}
	imp, err := a.tree.t.Import(int64(s.Height))
	if err != nil {
		return nil, fmt.Errorf("chain: snapshot import: %w", err)
	}
	a.restoring = &restore{height: int64(s.Height), appHash: wire.Hash(req.AppHash), meta: m, imp: imp}
	a.log.Info("restoring snapshot", "height", s.Height, "chunks", s.Chunks, "app_hash", wire.Hash(req.AppHash))
	return &abci.ResponseOfferSnapshot{Result: abci.ResponseOfferSnapshot_ACCEPT}, nil
}

// ApplySnapshotChunk checks a chunk against the hash the snapshot's
// metadata lists (a lying peer's chunk is refetched from another peer and
// the sender rejected), imports its nodes into the state tree and its
// leaves into the flat store; after the last one the restored state must
// give the trusted app hash, else the snapshot is rejected and the state
// cleared.
func (a *App) ApplySnapshotChunk(ctx context.Context, req *abci.RequestApplySnapshotChunk) (*abci.ResponseApplySnapshotChunk, error) {
	r := a.restoring
	if r == nil {
		a.setRestoreErr(errors.New("snapshot chunk without an accepted snapshot"))
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ABORT}, nil
	}
	if req.Index != r.next {
		err := fmt.Errorf("snapshot %d: chunk %d applied, chunk %d expected", r.height, req.Index, r.next)
		a.setRestoreErr(err)
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_RETRY, RefetchChunks: []uint32{r.next}}, nil
	}
	if got, want := wire.SHA256(req.Chunk), r.meta.ChunkHashes[req.Index]; got != want {
		err := fmt.Errorf("snapshot %d: chunk %d from peer %s has hash %s, the snapshot lists %s: refetching it from another peer", r.height, req.Index, req.Sender, got, want)
		a.log.Warn("snapshot chunk refused", "err", err)
		a.setRestoreErr(err)
		res := &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_RETRY, RefetchChunks: []uint32{req.Index}}
		if req.Sender != "" {
			res.RejectSenders = []string{req.Sender}
		}
		return res, nil
	}
	fail := func(err error) (*abci.ResponseApplySnapshotChunk, error) {
		a.log.Warn("snapshot rejected", "height", r.height, "err", err)
		a.setRestoreErr(err)
		if cerr := a.abortRestore(ctx); cerr != nil {
			return nil, cerr
		}
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_REJECT_SNAPSHOT}, nil
	}
	r.buf = append(r.buf, req.Chunk...)
	var b machine.Batch
	for len(r.buf) > 0 {
		n, used, err := readExportNode(r.buf)
		if errors.Is(err, errShortNode) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("snapshot %d: chunk %d: %w", r.height, req.Index, err))
		}
		if n.Version > r.height {
			return fail(fmt.Errorf("snapshot %d: chunk %d: node of version %d", r.height, req.Index, n.Version))
		}
		if err := r.imp.Add(n); err != nil {
			return fail(fmt.Errorf("snapshot %d: chunk %d: %w", r.height, req.Index, err))
		}
		if n.Height == 0 {
			if len(n.Key) == 0 {
				return fail(fmt.Errorf("snapshot %d: chunk %d: empty key", r.height, req.Index))
			}
			b.Set(ksState, n.Key, n.Value)
		}
		r.buf = r.buf[used:]
	}
	r.buf = append([]byte(nil), r.buf...)
	if len(b.Ops) > 0 {
		if err := a.kv.Commit(ctx, &b); err != nil {
			return nil, fmt.Errorf("chain: snapshot chunk %d: %w", req.Index, err)
		}
	}
	r.next++
	if int(r.next) < len(r.meta.ChunkHashes) {
		return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ACCEPT}, nil
	}
	if len(r.buf) > 0 {
		return fail(fmt.Errorf("snapshot %d: %d bytes after the last node", r.height, len(r.buf)))
	}
	if err := r.imp.Commit(); err != nil {
		return fail(fmt.Errorf("snapshot %d: import: %w", r.height, err))
	}
	r.imp = nil
	if err := a.finishRestore(ctx, r); err != nil {
		return fail(err)
	}
	a.restoring = nil
	return &abci.ResponseApplySnapshotChunk{Result: abci.ResponseApplySnapshotChunk_ACCEPT}, nil
}

// finishRestore checks the restored state against the trusted app hash and
// writes the commit record.
func (a *App) finishRestore(ctx context.Context, r *restore) error {
	it, err := a.tree.at(r.height)
	if err != nil {
		return err
	}
	root := immutableRoot(it)
	rl, err := readRunLog(ctx, a.state)
	if err != nil {
		return err
	}
	app := AppHash(r.height, root, rl.size, rl.root)
	if app != r.appHash {
		return fmt.Errorf("snapshot %d: the restored state gives app hash %s, the light-client-verified header says %s", r.height, app, r.appHash)
	}
	var b machine.Batch
	b.Set(ksMeta, metaHeight, binary.BigEndian.AppendUint64(nil, uint64(r.height)))
	b.Set(ksMeta, metaAppHash, append([]byte(nil), app[:]...))
	b.Set(ksMeta, metaStateHash, append([]byte(nil), root[:]...))
	b.Set(ksMeta, metaBlockTime, binary.BigEndian.AppendUint64(nil, uint64(r.meta.BlockTimeMs)))
	b.Set(ksMeta, metaBlockHash, append([]byte{}, r.meta.BlockHash...))
	b.Set(ksMeta, metaFormat, binary.BigEndian.AppendUint64(nil, stateFormat))
	if err := a.kv.Commit(ctx, &b); err != nil {
		return fmt.Errorf("snapshot %d: commit: %w", r.height, err)
	}
	a.mu.Lock()
	a.height, a.appHash, a.stateHash, a.runLog, a.committed = r.height, app, root, rl, it
	a.restoredAt = r.height
	a.recent = nil
	a.remember()
	a.block = machine.Block{Height: r.height, TimeMs: r.meta.BlockTimeMs, Hash: append([]byte{}, r.meta.BlockHash...)}
	a.mu.Unlock()
	a.log.Info("snapshot restored", "height", r.height, "app_hash", app)
	a.wmu.Lock()
	close(a.changed)
	a.changed = make(chan struct{})
	a.wmu.Unlock()
	return nil
}

// abortRestore drops a restore in progress and whatever it wrote: the
// state tree's versions and the flat store's state keys.
func (a *App) abortRestore(ctx context.Context) error {
	r := a.restoring
	a.restoring = nil
	if r == nil {
		return nil
	}
	if r.imp != nil {
		r.imp.Close()
	}
	if err := a.tree.rewind(0); err != nil {
		return fmt.Errorf("chain: clear a rejected snapshot: %w", err)
	}
	var keys [][]byte
	if err := a.kv.Scan(ctx, ksState, nil, func(k, _ []byte) error { keys = append(keys, append([]byte(nil), k...)); return nil }); err != nil {
		return fmt.Errorf("chain: clear a rejected snapshot: %w", err)
	}
	var b machine.Batch
	for _, k := range keys {
		b.Delete(ksState, k)
	}
	if len(b.Ops) > 0 {
		if err := a.kv.Commit(ctx, &b); err != nil {
			return fmt.Errorf("chain: clear a rejected snapshot: %w", err)
		}
	}
	return nil
}

func (a *App) setRestoreErr(err error) {
	a.wmu.Lock()
	a.restoreErr = err
	a.wmu.Unlock()
}

// RestoredHeight is the height of the snapshot this process restored the
// state from (0: none).
func (a *App) RestoredHeight() int64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.restoredAt
}

// RestoreError is the last refusal of an offered snapshot or chunk (nil
// when none).
func (a *App) RestoreError() error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return a.restoreErr
}
