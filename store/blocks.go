package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	blockstore "github.com/ipfs/boxo/blockstore"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

// IPFS blocks and dataset records live beside the syncer's keyspaces under
// two prefixes of their own (they are not syncer.Keyspaces: the syncer never
// reads them). Blocks are keyed by multihash, as every IPFS blockstore does,
// so a CIDv0 and a CIDv1 of the same bytes share one block.
const (
	blockPrefix   = 0x40
	datasetPrefix = 0x41
)

// MaxBlockSize bounds one stored block: bitswap refuses blocks above 2 MiB,
// and UnixFS chunkers produce at most 1 MiB.
const MaxBlockSize = 2 << 20

// Blocks is a boxo blockstore over the node's Pebble database, plus the
// dataset records (pins) that say which DAGs are held complete. It is safe
// for concurrent use.
type Blocks struct{ d *DB }

// Blocks returns the block store of d.
func (d *DB) Blocks() *Blocks { return &Blocks{d} }

var _ blockstore.Blockstore = (*Blocks)(nil)

func blockKey(c cid.Cid) []byte {
	h := c.Hash()
	k := make([]byte, 1+len(h))
	k[0] = blockPrefix
	copy(k[1:], h)
	return k
}

func (b *Blocks) get(key []byte) ([]byte, error) {
	if !b.d.acquire() {
		return nil, ErrClosed
	}
	defer b.d.release()
	v, closer, err := b.d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// size returns the stored value's length, or -1 when absent, without
// copying it.
func (b *Blocks) size(key []byte) (int, error) {
	if !b.d.acquire() {
		return -1, ErrClosed
	}
	defer b.d.release()
	v, closer, err := b.d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	n := len(v)
	closer.Close()
	return n, nil
}

// Has reports whether the block is stored.
func (b *Blocks) Has(ctx context.Context, c cid.Cid) (bool, error) {
	n, err := b.size(blockKey(c))
	if err != nil {
		return false, fmt.Errorf("store: has block %s: %w", c, err)
	}
	return n >= 0, nil
}

// Get returns the block, or an ipld.ErrNotFound.
func (b *Blocks) Get(ctx context.Context, c cid.Cid) (blocks.Block, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := b.get(blockKey(c))
	if err != nil {
		return nil, fmt.Errorf("store: get block %s: %w", c, err)
	}
	if v == nil {
		return nil, ipld.ErrNotFound{Cid: c}
	}
	return blocks.NewBlockWithCid(v, c)
}

// GetSize returns the block's size, or an ipld.ErrNotFound.
func (b *Blocks) GetSize(ctx context.Context, c cid.Cid) (int, error) {
	n, err := b.size(blockKey(c))
	if err != nil {
		return -1, fmt.Errorf("store: get block %s: %w", c, err)
	}
	if n < 0 {
		return -1, ipld.ErrNotFound{Cid: c}
	}
	return n, nil
}

// Put stores a block. Its bytes must hash to its CID: the store re-hashes
// them, so a block that lies about its content is refused here too.
func (b *Blocks) Put(ctx context.Context, blk blocks.Block) error {
	return b.PutMany(ctx, []blocks.Block{blk})
}

// PutMany stores blocks in one unsynced batch (a later synced dataset
// record makes them durable: Pebble's WAL is ordered).
func (b *Blocks) PutMany(ctx context.Context, bs []blocks.Block) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !b.d.acquire() {
		return ErrClosed
	}
	defer b.d.release()
	batch := b.d.db.NewBatch()
	defer batch.Close()
	for _, blk := range bs {
		if err := VerifyBlock(blk.Cid(), blk.RawData()); err != nil {
			return fmt.Errorf("store: put block: %w", err)
		}
		if err := batch.Set(blockKey(blk.Cid()), blk.RawData(), nil); err != nil {
			return fmt.Errorf("store: put block %s: %w", blk.Cid(), err)
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("store: put blocks: %w", err)
	}
	return nil
}

// ErrBlockMismatch: a block's bytes do not hash to its CID.
var ErrBlockMismatch = errors.New("block bytes do not match their CID")

// VerifyBlock checks that data is at most MaxBlockSize bytes and hashes to c.
func VerifyBlock(c cid.Cid, data []byte) error {
	if len(data) > MaxBlockSize {
		return fmt.Errorf("block %s is %d bytes, limit %d: %w", c, len(data), MaxBlockSize, ErrLimit)
	}
	got, err := c.Prefix().Sum(data)
	if err != nil {
		return fmt.Errorf("block %s: hash: %w", c, err)
	}
	if !got.Equals(c) {
		return fmt.Errorf("block %s: bytes hash to %s: %w", c, got, ErrBlockMismatch)
	}
	return nil
}

// DeleteBlock removes a block (absent blocks are not an error).
func (b *Blocks) DeleteBlock(ctx context.Context, c cid.Cid) error {
	if !b.d.acquire() {
		return ErrClosed
	}
	defer b.d.release()
	if err := b.d.db.Delete(blockKey(c), pebble.NoSync); err != nil {
		return fmt.Errorf("store: delete block %s: %w", c, err)
	}
	return nil
}

// AllKeysChan lists every stored block as a CIDv1 raw (keys are
// multihashes; the codec is not stored).
func (b *Blocks) AllKeysChan(ctx context.Context) (<-chan cid.Cid, error) {
	if !b.d.acquire() {
		return nil, ErrClosed
	}
	it, err := b.d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{blockPrefix}, UpperBound: []byte{blockPrefix + 1}})
	if err != nil {
		b.d.release()
		return nil, fmt.Errorf("store: list blocks: %w", err)
	}
	ch := make(chan cid.Cid, 64)
	go func() {
		defer b.d.release()
		defer close(ch)
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			c := cid.NewCidV1(cid.Raw, append([]byte(nil), it.Key()[1:]...))
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// HashOnRead is a no-op: blocks are verified when they are written.
func (b *Blocks) HashOnRead(bool) {}

// PutDataset writes a dataset record under its root CID, synced: once it
// returns, the record and every block written before it survive a crash.
func (b *Blocks) PutDataset(ctx context.Context, root cid.Cid, record []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(record) > 64<<10 {
		return fmt.Errorf("store: dataset record is %d bytes, limit 64 KiB: %w", len(record), ErrLimit)
	}
	if !b.d.acquire() {
		return ErrClosed
	}
	defer b.d.release()
	if err := b.d.db.Set(datasetKey(root), record, pebble.Sync); err != nil {
		return fmt.Errorf("store: put dataset %s: %w", root, err)
	}
	return nil
}

func datasetKey(root cid.Cid) []byte {
	return append([]byte{datasetPrefix}, root.Hash()...)
}

// GetDataset returns the record of root, or nil when there is none.
func (b *Blocks) GetDataset(ctx context.Context, root cid.Cid) ([]byte, error) {
	v, err := b.get(datasetKey(root))
	if err != nil {
		return nil, fmt.Errorf("store: get dataset %s: %w", root, err)
	}
	return v, nil
}

// DeleteDataset removes the record of root (synced).
func (b *Blocks) DeleteDataset(ctx context.Context, root cid.Cid) error {
	if !b.d.acquire() {
		return ErrClosed
	}
	defer b.d.release()
	if err := b.d.db.Delete(datasetKey(root), pebble.Sync); err != nil {
		return fmt.Errorf("store: delete dataset %s: %w", root, err)
	}
	return nil
}

// Datasets calls fn with every dataset record, in key order.
func (b *Blocks) Datasets(ctx context.Context, fn func(record []byte) error) error {
	if !b.d.acquire() {
		return ErrClosed
	}
	defer b.d.release()
	it, err := b.d.db.NewIter(&pebble.IterOptions{LowerBound: []byte{datasetPrefix}, UpperBound: []byte{datasetPrefix + 1}})
	if err != nil {
		return fmt.Errorf("store: list datasets: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(append([]byte(nil), it.Value()...)); err != nil {
			return err
		}
	}
	return it.Error()
}
