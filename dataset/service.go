package dataset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/boxo/bitswap"
	bsnet "github.com/ipfs/boxo/bitswap/network/bsnet"
	"github.com/ipfs/boxo/blockservice"
	blockstore "github.com/ipfs/boxo/blockstore"
	"github.com/ipfs/boxo/ipld/merkledag"
	"github.com/ipfs/boxo/ipld/unixfs"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/routing"

	"github.com/tenzro/train/store"
)

// Errors, each wrapped with context (test with errors.Is).
var (
	ErrTooLarge    = errors.New("dataset larger than the limit")
	ErrTooDeep     = errors.New("DAG deeper than the limit")
	ErrTooWide     = errors.New("DAG node has more links than the limit")
	ErrUnreachable = errors.New("blocks not found on any connected peer")
	ErrNotHeld     = errors.New("dataset not held by this node")
	ErrBadDAG      = errors.New("malformed DAG node")
	// ErrUnsigned: the request lacks a valid Tenzro-Dataset-Request.
	ErrUnsigned = errors.New("dataset request not signed")
	// ErrNotOwner: the signer did not pin the dataset.
	ErrNotOwner = errors.New("dataset not pinned by the signer")
	// ErrQuota: the signer's pins would pass its per-DID quota.
	ErrQuota = errors.New("per-DID dataset quota exceeded")
	// ErrFunds: the signer's balance does not fund the bytes it would pin.
	ErrFunds = errors.New("balance does not fund the dataset")
)

// BlockStore is where blocks and dataset records live: store.Blocks in the
// node.
type BlockStore interface {
	blockstore.Blockstore
	PutDataset(ctx context.Context, root cid.Cid, record []byte) error
	GetDataset(ctx context.Context, root cid.Cid) ([]byte, error)
	DeleteDataset(ctx context.Context, root cid.Cid) error
	Datasets(ctx context.Context, fn func(record []byte) error) error
}

// Options configure a Service. Zero values take the defaults.
type Options struct {
	// MaxBytes bounds a dataset's blocks in bytes (default 4 GiB); a fetch
	// may lower it per call.
	MaxBytes int64
	// MaxDepth bounds the DAG's depth (default DefaultMaxDepth).
	MaxDepth int
	// MaxLinks bounds the links of one node (default MaxLinksPerNode).
	MaxLinks int
	// StallTimeout fails a fetch when no wanted block arrives for this long
	// (default 60 s).
	StallTimeout time.Duration
	// MinImportRate is the slowest import body accepted, in bytes per
	// second averaged from the start after ImportGrace (defaults
	// DefaultMinImportRate, DefaultImportGrace): a client that trickles is
	// cut instead of holding an import for the server's read timeout.
	MinImportRate int64
	ImportGrace   time.Duration
	// Routing finds providers beyond the connected peers (the public DHT
	// when the node runs with --ipfs-dht); nil asks connected peers only.
	Routing routing.ContentDiscovery
	// ChainID is the chain signed dataset requests are bound to
	// (wire.DatasetRequestPreimage). Nil refuses every request that must be
	// signed (import, remove).
	ChainID func(context.Context) (string, error)
	// QuotaCount and QuotaBytes bound what one DID pins: datasets and
	// bytes of blocks, each dataset counted in full for every DID that
	// pinned it (defaults DefaultQuotaCount, DefaultQuotaBytes).
	QuotaCount int
	QuotaBytes int64
	// Funds says how many bytes of pins did's balance funds and on what
	// basis (e.g. "balance 5000"): the node prices pins as it prices
	// unreferenced blob uploads (--blob-price per byte), so a fresh DID,
	// which costs nothing, pins nothing. A DID's bytes are bounded by the
	// smaller of Funds and QuotaBytes. Nil: QuotaBytes alone (tests, tools).
	Funds func(ctx context.Context, did string) (bytes int64, basis string, err error)
	// SignedFetch refuses a fetch without a Tenzro-Dataset-Request (401):
	// on a network every fetch pins for, and is charged to, the DID that
	// asked. False (a --dev node, tests, tools): an unsigned fetch pins for
	// the node itself.
	SignedFetch bool
	// Logger (slog.Default() when nil).
	Logger *slog.Logger
}

// Per-DID quota defaults: 64 datasets and 16 GiB of blocks.
const (
	DefaultQuotaCount = 64
	DefaultQuotaBytes = 16 << 30
)

// servePerPeerBytes bounds the block bytes queued for one peer.
const servePerPeerBytes = 8 << 20

// Import rate defaults: 64 KiB/s on average after a 10 s grace.
const (
	DefaultMinImportRate = 64 << 10
	DefaultImportGrace   = 10 * time.Second
)

// DefaultMaxBytes is the default dataset size limit.
const DefaultMaxBytes = 4 << 30

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	if o.MaxLinks <= 0 || o.MaxLinks > MaxLinksPerNode {
		o.MaxLinks = MaxLinksPerNode
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = time.Minute
	}
	if o.MinImportRate <= 0 {
		o.MinImportRate = DefaultMinImportRate
	}
	if o.ImportGrace <= 0 {
		o.ImportGrace = DefaultImportGrace
	}
	if o.QuotaCount <= 0 {
		o.QuotaCount = DefaultQuotaCount
	}
	if o.QuotaBytes <= 0 {
		o.QuotaBytes = DefaultQuotaBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Record describes a dataset the node holds complete (a pin).
type Record struct {
	CID string `json:"cid"`
	// Ref is "ipfs://<cid>", the spec's dataset_ref.
	Ref string `json:"ref"`
	// Kind is "file", "directory" or "raw".
	Kind string `json:"kind"`
	// Size is the file's size (UnixFS filesize; 0 for a directory).
	Size uint64 `json:"size"`
	// DAGBytes and Blocks count the unique blocks of the DAG.
	DAGBytes int64 `json:"dag_bytes"`
	Blocks   int64 `json:"blocks"`
	// Layout is how it was added (unknown when fetched).
	Layout string `json:"layout,omitempty"`
	// Name is the file or directory name given at add.
	Name string `json:"name,omitempty"`
	// Source is "added" or "fetched".
	Source string `json:"source"`
	// Encrypted marks a Confidential dataset (ciphertext in the
	// enclave.EncryptDataset layout).
	Encrypted bool `json:"encrypted,omitempty"`
	// DatasetHash is the corpus hash the publisher computed, when given.
	DatasetHash string `json:"dataset_hash,omitempty"`
	// Owners are the DIDs that pinned the dataset by a signed import or
	// fetch, sorted; only they may remove it (each its own pin). A dataset
	// with none was fetched for the node itself (an unsigned fetch, as a
	// trainer's corpus load does) and no request removes it.
	Owners []string `json:"owners,omitempty"`
}

// Service is the node's IPFS side.
type Service struct {
	h     host.Host
	bs    BlockStore
	bswap *bitswap.Bitswap
	net   blockservice.BlockService
	local blockservice.BlockService
	o     Options
	log   *slog.Logger
	// gc orders transfers and deletions: imports and fetches hold it shared
	// for their whole transfer (any number at once: a slow one delays no
	// other), Remove and the orphan sweep hold it exclusively, and only
	// they delete blocks. A failed import or fetch leaves the blocks it
	// wrote as orphans (another transfer may be relying on them) for the
	// next sweep, which runs once orphans pass MaxBytes and at every
	// Remove, and deletes those no held dataset reaches.
	gc          sync.RWMutex
	orphanMu    sync.Mutex
	orphans     map[string]cid.Cid // multihash key → block
	orphanBytes int64
	pins        atomic.Int64 // datasets pinned so far (see reclaim)

	// quotaMu guards inflight (bytes of imports and fetches in flight per
	// DID, counted against its quota as blocks arrive), imports (their
	// number per DID) and seen (signatures of requests accepted, until
	// they expire, so that none is used twice).
	// recMu orders the read-modify-write of dataset records (owners).
	recMu    sync.Mutex
	quotaMu  sync.Mutex
	inflight map[string]int64
	imports  map[string]int
	seen     map[string]int64
}

// New starts bitswap on h over bs. Close stops it (not the host).
func New(ctx context.Context, h host.Host, bs BlockStore, o Options) (*Service, error) {
	o = o.withDefaults()
	n := bsnet.NewFromIpfsHost(h)
	// Serving: up to 8 blocks of 1 MiB in flight per peer (boxo's default of
	// 1 MiB makes a fetch of 1 MiB chunks wait one round trip per block).
	bsw := bitswap.New(context.WithoutCancel(ctx), n, o.Routing, bs, bitswap.MaxOutstandingBytesPerPeer(servePerPeerBytes))
	s := &Service{h: h, bs: bs, bswap: bsw, o: o, log: o.Logger.With("component", "dataset"),
		inflight: map[string]int64{}, imports: map[string]int{}, seen: map[string]int64{}}
	s.net = blockservice.New(bs, bsw)
	s.local = blockservice.New(bs, nil)
	return s, nil
}

// Close stops bitswap.
func (s *Service) Close() error { return s.bswap.Close() }

// Limits reports the node's limits.
func (s *Service) Limits() Options { return s.o }

type getFn func(ctx context.Context, ks []cid.Cid) <-chan blocks.Block

type walkResult struct {
	visited map[string]struct{}
	bytes   int64
	blocks  int64
	kind    string
	size    uint64
}

// fetchWindow is how many blocks one walk asks for at once: enough to keep
// bitswap's pipeline full, few enough that the blocks in flight (at most
// fetchWindow × 2 MiB) stay independent of the dataset's size.
var fetchWindow = 32

// walk visits the DAG under root level by level, fetching each level in
// windows through get, checking every limit as blocks arrive. fresh
// receives each CID that was not stored before it was asked for.
func (s *Service) walk(ctx context.Context, root cid.Cid, get getFn, maxBytes int64, fresh func(cid.Cid)) (*walkResult, error) {
	res := &walkResult{visited: map[string]struct{}{}}
	level := []cid.Cid{root}
	var claimed uint64
	for depth := 0; len(level) > 0; depth++ {
		if depth > s.o.MaxDepth {
			return res, fmt.Errorf("dataset %s: more than %d levels: %w", root, s.o.MaxDepth, ErrTooDeep)
		}
		var next []cid.Cid
		claimed = 0
		for i := 0; i < len(level); i += fetchWindow {
			win := level[i:min(i+fetchWindow, len(level))]
			if fresh != nil {
				for _, c := range win {
					if ok, err := s.bs.Has(ctx, c); err != nil {
						return res, err
					} else if !ok {
						fresh(c)
					}
				}
			}
			got, err := s.window(ctx, root, win, get, func(b blocks.Block) error {
				res.blocks++
				res.bytes += int64(len(b.RawData()))
				if res.bytes > maxBytes {
					return fmt.Errorf("dataset %s: more than %d bytes of blocks arrived: %w", root, maxBytes, ErrTooLarge)
				}
				links, err := s.links(b, depth == 0, res)
				if err != nil {
					return err
				}
				// A file whose blocks repeat (one leaf linked many times)
				// reads as far more bytes than it stores: bound what it
				// expands to as well.
				if depth == 0 && res.size > uint64(maxBytes) {
					return fmt.Errorf("dataset %s: a %s of %d bytes, limit %d: %w", root, res.kind, res.size, maxBytes, ErrTooLarge)
				}
				for _, l := range links {
					k := l.Cid.KeyString()
					if _, ok := res.visited[k]; ok {
						continue
					}
					res.visited[k] = struct{}{}
					claimed += l.Size
					next = append(next, l.Cid)
				}
				return nil
			})
			if err != nil {
				return res, err
			}
			_ = got
		}
		// Early refusal: the links' cumulative sizes claim more than the
		// budget left (the actual bytes are still counted as they arrive).
		if claimed > uint64(maxBytes-res.bytes) && maxBytes >= res.bytes {
			return res, fmt.Errorf("dataset %s: its links claim %d more bytes, %d left under the limit of %d: %w", root, claimed, maxBytes-res.bytes, maxBytes, ErrTooLarge)
		}
		level = next
	}
	res.visited[root.KeyString()] = struct{}{}
	return res, nil
}

// window fetches ks, calling fn for each block as it arrives. It fails when
// no block arrives for StallTimeout, naming the peers asked.
func (s *Service) window(ctx context.Context, root cid.Cid, ks []cid.Cid, get getFn, fn func(blocks.Block) error) (int, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := time.AfterFunc(s.o.StallTimeout, cancel)
	defer t.Stop()
	want := make(map[string]struct{}, len(ks))
	for _, c := range ks {
		want[c.KeyString()] = struct{}{}
	}
	n := 0
	for b := range get(wctx, ks) {
		t.Reset(s.o.StallTimeout)
		if _, ok := want[b.Cid().KeyString()]; !ok {
			continue
		}
		delete(want, b.Cid().KeyString())
		n++
		if err := fn(b); err != nil {
			return n, err
		}
	}
	if len(want) == 0 {
		return n, nil
	}
	if err := ctx.Err(); err != nil {
		return n, fmt.Errorf("dataset %s: %w", root, err)
	}
	var missing []string
	for _, c := range ks {
		if _, ok := want[c.KeyString()]; ok {
			missing = append(missing, c.String())
		}
	}
	peers := s.peers()
	return n, fmt.Errorf("dataset %s: %d block(s) (first %s) not received within %s from the %d peer(s) asked %v: %w",
		root, len(missing), missing[0], s.o.StallTimeout, len(peers), peers, ErrUnreachable)
}

func (s *Service) peers() []string {
	var out []string
	for _, p := range s.h.Network().Peers() {
		out = append(out, p.String())
	}
	sort.Strings(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// links decodes a block and checks the per-node limits.
func (s *Service) links(b blocks.Block, isRoot bool, res *walkResult) ([]linkInfo, error) {
	c := b.Cid()
	if err := checkCID(c); err != nil {
		return nil, err
	}
	if c.Prefix().Codec == cid.Raw {
		if isRoot {
			res.kind, res.size = "raw", uint64(len(b.RawData()))
		}
		return nil, nil
	}
	pn, err := merkledag.DecodeProtobuf(b.RawData())
	if err != nil {
		return nil, fmt.Errorf("block %s: %v: %w", c, err, ErrBadDAG)
	}
	if len(pn.Links()) > s.o.MaxLinks {
		return nil, fmt.Errorf("block %s: %d links, limit %d: %w", c, len(pn.Links()), s.o.MaxLinks, ErrTooWide)
	}
	fsn, err := unixfs.FSNodeFromBytes(pn.Data())
	if err != nil {
		return nil, fmt.Errorf("block %s: not a UnixFS node: %v: %w", c, err, ErrBadDAG)
	}
	if isRoot {
		switch fsn.Type() {
		case unixfs.TDirectory, unixfs.THAMTShard:
			res.kind = "directory"
		default:
			res.kind, res.size = "file", fsn.FileSize()
		}
	}
	out := make([]linkInfo, 0, len(pn.Links()))
	for _, l := range pn.Links() {
		if err := checkCID(l.Cid); err != nil {
			return nil, fmt.Errorf("block %s: link %q: %w", c, l.Name, err)
		}
		out = append(out, linkInfo{Cid: l.Cid, Size: l.Size})
	}
	return out, nil
}

type linkInfo struct {
	Cid  cid.Cid
	Size uint64
}

// ImportMeta describes an upload.
type ImportMeta struct {
	Name        string
	Layout      string
	Encrypted   bool
	DatasetHash string
	// Owner is the DID that pins the dataset (its quota is charged); the
	// CAR's root must be Root when Root is defined.
	Owner string
	Root  cid.Cid
}

// Import stores a CARv1 stream with one root, verifying every block, and
// pins the root once its whole DAG is present within the limits. A refused
// import deletes the blocks it wrote.
func (s *Service) Import(ctx context.Context, r io.Reader, meta ImportMeta) (*Record, error) {
	var written []cid.Cid
	var total int64
	pins := s.pins.Load()
	failed := false
	defer func() {
		if failed {
			s.reclaim(ctx, written, pins)
		}
		s.sweepIfDue(ctx)
	}()
	var q *charge
	if meta.Owner != "" {
		var err error
		if q, err = s.reserve(ctx, meta.Owner); err != nil {
			return nil, err
		}
		defer q.done()
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	cr, err := NewCARReader(io.LimitReader(r, s.o.MaxBytes*2+(1<<20)))
	if err != nil {
		return nil, err
	}
	if meta.Root.Defined() && !meta.Root.Equals(cr.Root) {
		return nil, fmt.Errorf("import: the CAR's root is %s; the signed request names %s: %w", cr.Root, meta.Root, ErrUnsigned)
	}
	cleanup := func() { failed = true; s.orphan(written, nil, total) }
	for {
		b, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			cleanup()
			return nil, err
		}
		total += int64(len(b.RawData()))
		if total > s.o.MaxBytes {
			cleanup()
			return nil, fmt.Errorf("import %s: more than %d bytes of blocks: %w", cr.Root, s.o.MaxBytes, ErrTooLarge)
		}
		if err := q.add(int64(len(b.RawData()))); err != nil {
			cleanup()
			return nil, fmt.Errorf("import %s: %w", cr.Root, err)
		}
		if ok, err := s.bs.Has(ctx, b.Cid()); err != nil {
			cleanup()
			return nil, err
		} else if !ok {
			if err := s.bs.Put(ctx, b); err != nil {
				cleanup()
				return nil, err
			}
			written = append(written, b.Cid())
		}
	}
	res, err := s.walk(ctx, cr.Root, s.local.GetBlocks, s.o.MaxBytes, nil)
	if err != nil {
		cleanup()
		if errors.Is(err, ErrUnreachable) {
			err = fmt.Errorf("import %s: the CAR does not hold the whole DAG: %w", cr.Root, errors.Unwrap(err))
			return nil, fmt.Errorf("%w (%w)", err, ErrBadDAG)
		}
		return nil, err
	}
	// Blocks in the CAR that the DAG does not reach are not kept.
	s.orphan(written, res.visited, total-res.bytes)
	rec := s.record(cr.Root, res, "added")
	rec.Name, rec.Layout, rec.Encrypted, rec.DatasetHash = meta.Name, meta.Layout, meta.Encrypted, meta.DatasetHash
	s.recMu.Lock()
	if old, err := s.Get(ctx, cr.Root); err == nil {
		rec.Owners = old.Owners
	}
	rec.Owners = addOwner(rec.Owners, meta.Owner)
	err = s.put(ctx, cr.Root, rec)
	s.recMu.Unlock()
	if err != nil {
		cleanup()
		return nil, err
	}
	if err := s.bswap.NotifyNewBlocks(ctx); err != nil {
		s.log.Debug("notify bitswap", "err", err)
	}
	s.log.Info("dataset added", "cid", rec.CID, "bytes", rec.DAGBytes, "blocks", rec.Blocks)
	return rec, nil
}

// deleteBlocks deletes cs except those in keep.
func (s *Service) deleteBlocks(ctx context.Context, cs []cid.Cid, keep map[string]struct{}) {
	ctx = context.WithoutCancel(ctx)
	for _, c := range cs {
		if _, ok := keep[c.KeyString()]; ok {
			continue
		}
		if err := s.bs.DeleteBlock(ctx, c); err != nil {
			s.log.Warn("delete block", "cid", c, "err", err)
		}
	}
}

func (s *Service) record(root cid.Cid, res *walkResult, source string) *Record {
	return &Record{CID: root.String(), Ref: "ipfs://" + root.String(), Kind: res.kind, Size: res.size, DAGBytes: res.bytes, Blocks: res.blocks, Source: source}
}

func (s *Service) put(ctx context.Context, root cid.Cid, rec *Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.pins.Add(1)
	return s.bs.PutDataset(ctx, root, b)
}

// reclaim deletes at once the blocks a failed transfer wrote when that is
// safe without a sweep: no other transfer is in flight (gc free) and no
// dataset was pinned since the transfer started (so none relies on a block
// it wrote). Otherwise they stay orphans for the sweep.
func (s *Service) reclaim(ctx context.Context, written []cid.Cid, pinsAtStart int64) {
	if len(written) == 0 || !s.gc.TryLock() {
		return
	}
	defer s.gc.Unlock()
	if s.pins.Load() != pinsAtStart {
		return
	}
	s.deleteBlocks(ctx, written, nil)
	s.orphanMu.Lock()
	for _, c := range written {
		delete(s.orphans, string(c.Hash()))
	}
	s.orphanMu.Unlock()
}

// Get returns the record of a held dataset, or ErrNotHeld.
func (s *Service) Get(ctx context.Context, root cid.Cid) (*Record, error) {
	b, err := s.bs.GetDataset(ctx, root)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, fmt.Errorf("dataset %s: %w", root, ErrNotHeld)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("dataset %s: record: %w", root, err)
	}
	// A record is keyed by multihash: report the CID asked for.
	rec.CID, rec.Ref = root.String(), "ipfs://"+root.String()
	return &rec, nil
}

// Fetch makes the node hold root: from its store when already pinned, else
// over bitswap from connected peers (and the routing, when configured), with
// every block verified and every limit checked as blocks arrive. maxBytes
// (≤ the node's limit; 0 for the node's limit) bounds the dataset.
func (s *Service) Fetch(ctx context.Context, root cid.Cid, maxBytes int64) (*Record, error) {
	return s.FetchFor(ctx, root, maxBytes, "")
}

// FetchFor is Fetch pinning the dataset for owner (a DID, charged to its
// quota); "" pins it for the node itself.
func (s *Service) FetchFor(ctx context.Context, root cid.Cid, maxBytes int64, owner string) (*Record, error) {
	if err := checkCID(root); err != nil {
		return nil, err
	}
	if maxBytes <= 0 || maxBytes > s.o.MaxBytes {
		maxBytes = s.o.MaxBytes
	}
	if rec, err := s.Get(ctx, root); err == nil {
		if rec.DAGBytes > maxBytes {
			return nil, fmt.Errorf("dataset %s: %d bytes, limit %d: %w", root, rec.DAGBytes, maxBytes, ErrTooLarge)
		}
		if owner == "" || slices.Contains(rec.Owners, owner) {
			return rec, nil
		}
		q, err := s.reserve(ctx, owner)
		if err != nil {
			return nil, err
		}
		defer q.done()
		if err := q.add(rec.DAGBytes); err != nil {
			return nil, fmt.Errorf("dataset %s: %w", root, err)
		}
		s.recMu.Lock()
		defer s.recMu.Unlock()
		if rec, err = s.Get(ctx, root); err != nil {
			return nil, err
		}
		rec.Owners = addOwner(rec.Owners, owner)
		if err := s.put(ctx, root, rec); err != nil {
			return nil, err
		}
		return rec, nil
	}
	var q *charge
	byQuota := false
	if owner != "" {
		var err error
		if q, err = s.reserve(ctx, owner); err != nil {
			return nil, err
		}
		defer q.done()
		if room := q.room(); room < maxBytes {
			maxBytes, byQuota = room, true
			if room == 0 {
				return nil, fmt.Errorf("dataset %s: %w", root, q.add(1))
			}
		}
	}
	pins := s.pins.Load()
	var fresh []cid.Cid
	failed := false
	defer func() {
		if failed {
			s.reclaim(ctx, fresh, pins)
		}
		s.sweepIfDue(ctx)
	}()
	s.gc.RLock()
	defer s.gc.RUnlock()
	start := time.Now()
	sess := blockservice.NewSession(ctx, s.net)
	res, err := s.walk(ctx, root, sess.GetBlocks, maxBytes, func(c cid.Cid) { fresh = append(fresh, c) })
	if err != nil {
		failed = true
		s.orphan(fresh, nil, int64(len(fresh))*avgBlockGuess)
		if byQuota && errors.Is(err, ErrTooLarge) {
			if q.limit < s.o.QuotaBytes {
				err = fmt.Errorf("%v: %s may take %d more bytes under the %d its balance funds (%s): %w", err, owner, maxBytes, q.limit, q.basis, ErrFunds)
			} else {
				err = fmt.Errorf("%v: %s may take %d more bytes under the per-DID limit of %d (node flag --dataset-did-bytes): %w", err, owner, maxBytes, q.limit, ErrQuota)
			}
		}
		return nil, err
	}
	if err := q.add(res.bytes); err != nil {
		failed = true
		s.orphan(fresh, nil, res.bytes)
		return nil, fmt.Errorf("dataset %s: %w", root, err)
	}
	rec := s.record(root, res, "fetched")
	rec.Owners = addOwner(nil, owner)
	s.recMu.Lock()
	if old, err := s.Get(ctx, root); err == nil {
		rec.Owners = addOwner(old.Owners, owner)
	}
	err = s.put(ctx, root, rec)
	s.recMu.Unlock()
	if err != nil {
		failed = true
		s.orphan(fresh, nil, res.bytes)
		return nil, err
	}
	s.log.Info("dataset fetched", "cid", rec.CID, "bytes", rec.DAGBytes, "blocks", rec.Blocks, "seconds", time.Since(start).Seconds())
	return rec, nil
}

// List returns the held datasets.
func (s *Service) List(ctx context.Context) ([]Record, error) {
	out := []Record{}
	err := s.bs.Datasets(ctx, func(b []byte) error {
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("dataset record: %w", err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// RemoveFor drops owner's pin of root: refused unless owner pinned it; the
// dataset itself goes (Remove) once no DID pins it. It returns the DIDs
// that still pin it.
func (s *Service) RemoveFor(ctx context.Context, root cid.Cid, owner string) ([]string, error) {
	s.gc.Lock()
	defer s.gc.Unlock()
	s.recMu.Lock()
	defer s.recMu.Unlock()
	rec, err := s.Get(ctx, root)
	if err != nil {
		return nil, err
	}
	switch {
	case len(rec.Owners) == 0:
		return nil, fmt.Errorf("dataset %s was fetched for this node itself (no signed import or fetch pinned it): no DID may remove it: %w", root, ErrNotOwner)
	case !slices.Contains(rec.Owners, owner):
		return nil, fmt.Errorf("dataset %s is pinned by %d other DID(s), not by %s: only a DID that pinned it removes its pin: %w", root, len(rec.Owners), owner, ErrNotOwner)
	case len(rec.Owners) > 1:
		rec.Owners = slices.DeleteFunc(slices.Clone(rec.Owners), func(d string) bool { return d == owner })
		if err := s.put(ctx, root, rec); err != nil {
			return nil, err
		}
		s.log.Info("dataset unpinned for one DID", "cid", root.String(), "did", owner, "still_pinned_by", len(rec.Owners))
		return rec.Owners, nil
	}
	return []string{}, s.removeLocked(ctx, root)
}

// Remove unpins root whoever pinned it and deletes its blocks that no
// other held dataset reaches (the node's own use; the HTTP API removes
// through RemoveFor).
func (s *Service) Remove(ctx context.Context, root cid.Cid) error {
	s.gc.Lock()
	defer s.gc.Unlock()
	if _, err := s.Get(ctx, root); err != nil {
		return err
	}
	return s.removeLocked(ctx, root)
}

// removeLocked removes root; the caller holds gc exclusively.
func (s *Service) removeLocked(ctx context.Context, root cid.Cid) error {
	if err := s.bs.DeleteDataset(ctx, root); err != nil {
		return err
	}
	keep, err := s.held(ctx)
	if err != nil {
		return err
	}
	s.sweepLocked(ctx, keep)
	res, err := s.walk(ctx, root, s.local.GetBlocks, 1<<62, nil)
	if err != nil && res == nil {
		return err
	}
	for k := range res.visited {
		if _, ok := keep[mhKey(k)]; ok {
			continue
		}
		c, err := cid.Cast([]byte(k))
		if err == nil {
			_ = s.bs.DeleteBlock(ctx, c)
		}
	}
	s.log.Info("dataset removed", "cid", root.String())
	return nil
}

// avgBlockGuess sizes the orphans of a failed fetch for the sweep's
// trigger (their exact sizes are not kept).
const avgBlockGuess = 256 << 10

// held returns the multihash keys of every block a held dataset reaches.
// The caller holds gc exclusively.
func (s *Service) held(ctx context.Context) (map[string]struct{}, error) {
	keep := map[string]struct{}{}
	others, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, o := range others {
		c, err := cid.Decode(o.CID)
		if err != nil {
			continue
		}
		res, err := s.walk(ctx, c, s.local.GetBlocks, 1<<62, nil)
		if err != nil {
			s.log.Warn("walk held dataset", "cid", o.CID, "err", err)
			continue
		}
		for k := range res.visited {
			keep[mhKey(k)] = struct{}{}
		}
	}
	return keep, nil
}

// orphan records blocks a transfer wrote and does not keep (except those
// in reached) for the next sweep.
func (s *Service) orphan(cs []cid.Cid, reached map[string]struct{}, bytes int64) {
	s.orphanMu.Lock()
	defer s.orphanMu.Unlock()
	if s.orphans == nil {
		s.orphans = map[string]cid.Cid{}
	}
	for _, c := range cs {
		if _, ok := reached[c.KeyString()]; ok {
			continue
		}
		s.orphans[string(c.Hash())] = c
	}
	s.orphanBytes += bytes
}

// sweepIfDue sweeps orphans once they pass MaxBytes (bytes of failed
// transfers), so failed imports cannot fill the disk.
func (s *Service) sweepIfDue(ctx context.Context) {
	s.orphanMu.Lock()
	due := s.orphanBytes > s.o.MaxBytes
	s.orphanMu.Unlock()
	if !due {
		return
	}
	s.gc.Lock()
	defer s.gc.Unlock()
	keep, err := s.held(context.WithoutCancel(ctx))
	if err != nil {
		s.log.Warn("dataset orphan sweep", "err", err)
		return
	}
	s.sweepLocked(ctx, keep)
}

// sweepLocked deletes the orphans no held dataset reaches; the caller
// holds gc exclusively.
func (s *Service) sweepLocked(ctx context.Context, keep map[string]struct{}) {
	s.orphanMu.Lock()
	orphans := s.orphans
	s.orphans, s.orphanBytes = nil, 0
	s.orphanMu.Unlock()
	var del []cid.Cid
	for k, c := range orphans {
		if _, ok := keep[k]; !ok {
			del = append(del, c)
		}
	}
	s.deleteBlocks(ctx, del, nil)
}

// Orphans is the number of blocks failed transfers left for the next sweep.
func (s *Service) Orphans() int {
	s.orphanMu.Lock()
	defer s.orphanMu.Unlock()
	return len(s.orphans)
}

func mhKey(k string) string {
	c, err := cid.Cast([]byte(k))
	if err != nil {
		return k
	}
	return string(c.Hash())
}

// Peers lists the connected peers (the ones a fetch asks).
func (s *Service) Peers() []string { return s.peers() }

// Has reports whether root is held complete.
func (s *Service) Has(ctx context.Context, root cid.Cid) bool {
	_, err := s.Get(ctx, root)
	return err == nil
}

// httpStatus maps an error to an HTTP status.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrBadCID), errors.Is(err, ErrBadDAG), errors.Is(err, ErrBadCAR):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrTooDeep), errors.Is(err, ErrTooWide), errors.Is(err, store.ErrBlockMismatch):
		return http.StatusUnprocessableEntity
	case errors.Is(err, ErrUnreachable):
		return http.StatusGatewayTimeout
	case errors.Is(err, ErrNotHeld):
		return http.StatusNotFound
	case errors.Is(err, ErrUnsigned):
		return http.StatusUnauthorized
	case errors.Is(err, ErrNotOwner):
		return http.StatusForbidden
	case errors.Is(err, ErrQuota):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrFunds):
		return http.StatusPaymentRequired
	}
	return http.StatusInternalServerError
}
