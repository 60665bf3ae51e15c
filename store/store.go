package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tenzro/train/machine"
)

// FormatVersion is the on-disk format this package reads and writes. It is
// recorded in the meta key when a database is created; Open refuses any
// other version. Bump it whenever keyspace prefixes or the meta encoding
// change.
const FormatVersion uint64 = 1

// Size limits. They bound what one caller can make the node hold in memory
// and write in one fsync.
const (
	// MaxKeySize bounds a key inside its keyspace (the keyspace prefix is not
	// counted). Keys are ids, DIDs, hashes and round numbers: 1 KiB is ample.
	MaxKeySize = 1 << 10
	// MaxValueSize is the hard ceiling on one value: 1 GiB, for content-
	// addressed payload blobs. Sensible values are far smaller: a fragment
	// payload of the seed's 200M-parameter model is ~33 MB, and values above
	// ~64 MiB make every Commit copy that much into the batch and the WAL.
	// Options.MaxValueSize lowers the ceiling per database.
	MaxValueSize = 1 << 30
	// MaxBatchSize bounds the sum of key and value bytes in one Commit
	// (Pebble's own ceiling is 4 GiB).
	MaxBatchSize = 2 << 30
)

// Errors. Each is wrapped with context; test with errors.Is / errors.As.
var (
	// ErrNotStore: the directory holds something that is not a Tenzro store
	// (a foreign Pebble database, or unrelated files).
	ErrNotStore = errors.New("not a Tenzro store")
	// ErrClosed: the DB was used after Close.
	ErrClosed = errors.New("store closed")
	// ErrUnknownKeyspace: a keyspace this format does not know.
	ErrUnknownKeyspace = errors.New("unknown keyspace")
	// ErrLimit: a key, value or batch exceeds the size limits, or a key is empty.
	ErrLimit = errors.New("size limit")
)

// FormatError says that a directory holds a Tenzro store of another on-disk
// format version.
type FormatError struct {
	Dir   string
	Found uint64
	Want  uint64
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("store %s: on-disk format version %d, this build reads version %d", e.Dir, e.Found, e.Want)
}

// Options tune a database. The zero value is usable.
type Options struct {
	// Logger receives Pebble's messages; slog.Default() when nil.
	Logger *slog.Logger
	// MemTableSize is Pebble's memtable size (default 64 MiB). Batches larger
	// than half of it are applied as their own flushable memtable.
	MemTableSize uint64
	// CacheSize is the block cache size (default 64 MiB).
	CacheSize int64
	// MaxValueSize lowers the per-value ceiling below the package's
	// MaxValueSize (default: MaxValueSize).
	MaxValueSize int64
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 64 << 20
	}
	if o.CacheSize == 0 {
		o.CacheSize = 64 << 20
	}
	if o.MaxValueSize <= 0 || o.MaxValueSize > MaxValueSize {
		o.MaxValueSize = MaxValueSize
	}
	return o
}

// DB is a Tenzro store. It implements syncer.KV and is safe for concurrent
// use. Calls made after Close return ErrClosed.
type DB struct {
	db       *pebble.DB
	dir      string
	maxValue int64
	log      *slog.Logger

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
}

var _ machine.KV = (*DB)(nil)

// keyspacePrefix is part of the on-disk format: never renumber within a
// FormatVersion. 0x00 is reserved for the store's own keys.
var keyspacePrefix = map[machine.Keyspace]byte{
	machine.KSRuns:       0x01,
	machine.KSReceipts:   0x02,
	machine.KSLedger:     0x03,
	machine.KSTranscript: 0x04,
	machine.KSWeights:    0x05,
	machine.KSBlobs:      0x06,
	machine.KSMeta:       0x07,
	machine.KSPlugins:    0x08,
	machine.KSEvidence:   0x09,
}

const internalPrefix = 0x00

// formatKey is the meta key recording the format version.
var formatKey = []byte("\x00tenzro/store/format")

// formatMagic starts the format record's value.
const formatMagic = "tenzro-train/store"

// encodeFormat renders the format record: magic followed by the version as
// 8 big-endian bytes.
func encodeFormat(v uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(formatMagic), v)
}

// decodeFormat parses the format record strictly.
func decodeFormat(b []byte) (uint64, error) {
	if len(b) != len(formatMagic)+8 || !bytes.HasPrefix(b, []byte(formatMagic)) {
		return 0, fmt.Errorf("format record is %d bytes, want %q and an 8-byte version: %w", len(b), formatMagic, ErrNotStore)
	}
	return binary.BigEndian.Uint64(b[len(formatMagic):]), nil
}

// pebbleFormat is pinned so that upgrading the Pebble module never silently
// ratchets the on-disk format of existing stores.
const pebbleFormat = pebble.FormatTableFormatV6

// Open opens the store in dir, creating it (and dir) when absent. It fails
// with ErrNotStore when dir holds a foreign Pebble database or unrelated
// files, and with a *FormatError when the store has another FormatVersion.
func Open(ctx context.Context, dir string, opts Options) (*DB, error) {
	return open(ctx, dir, opts, vfs.Default)
}

// OpenInMemory opens a fresh store held in memory, for tests of other
// packages. It is lost on Close.
func OpenInMemory() (*DB, error) {
	return open(context.Background(), "mem", Options{MemTableSize: 4 << 20, CacheSize: 8 << 20}, vfs.NewMem())
}

// pebbleFile reports whether name is a file Pebble creates in its directory.
func pebbleFile(name string) bool {
	switch {
	case name == "LOCK", strings.HasPrefix(name, "OPTIONS-"), strings.HasPrefix(name, "MANIFEST-"),
		strings.HasPrefix(name, "marker."), strings.HasSuffix(name, ".log"), strings.HasSuffix(name, ".sst"),
		strings.HasSuffix(name, ".blob"), strings.HasPrefix(name, "temporary."), strings.HasSuffix(name, ".dbtmp"):
		return true
	}
	return false
}

// open is Open on an arbitrary vfs.FS (the crash tests' hook).
func open(ctx context.Context, dir string, opts Options, fs vfs.FS) (*DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	opts = opts.withDefaults()
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return nil, fmt.Errorf("open store %s: inspect directory: %w", dir, err)
	}
	if !desc.Exists {
		names, err := fs.List(dir)
		if err != nil {
			return nil, fmt.Errorf("open store %s: %w", dir, err)
		}
		for _, n := range names {
			if !pebbleFile(n) {
				return nil, fmt.Errorf("open store %s: directory holds %q and no database: %w", dir, n, ErrNotStore)
			}
		}
	}

	cache := pebble.NewCache(opts.CacheSize)
	defer cache.Unref()
	po := &pebble.Options{
		FS:                 fs,
		Cache:              cache,
		MemTableSize:       opts.MemTableSize,
		FormatMajorVersion: pebbleFormat,
		Logger:             slogLogger{opts.Logger},
	}
	// A block is finished before any entry that would take it past the
	// target block size, however little it holds (Pebble's default keeps
	// adding to a block below 90% of the target). So a large value (a
	// fragment's weights) gets blocks of its own, and scans of the small
	// keys sorted before it (the runs, every timer tick) never read and
	// decompress it. Readers are unaffected: this is a writer choice.
	po.Levels[0].BlockSizeThreshold = 1
	pdb, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	d := &DB{db: pdb, dir: dir, maxValue: opts.MaxValueSize, log: opts.Logger}
	if err := d.checkFormat(desc.Exists); err != nil {
		_ = pdb.Close()
		return nil, err
	}
	return d, nil
}

// checkFormat reads the format record, writing it into a new (empty)
// database. An existing database without the record is accepted only when
// it holds no key at all: that is a store whose creation was interrupted
// between Pebble's own setup and our first synced write.
func (d *DB) checkFormat(existed bool) error {
	v, closer, err := d.db.Get(formatKey)
	switch {
	case err == nil:
		defer closer.Close()
		found, err := decodeFormat(v)
		if err != nil {
			return fmt.Errorf("open store %s: %w", d.dir, err)
		}
		if found != FormatVersion {
			return &FormatError{Dir: d.dir, Found: found, Want: FormatVersion}
		}
		return nil
	case !errors.Is(err, pebble.ErrNotFound):
		return fmt.Errorf("open store %s: read format record: %w", d.dir, err)
	}
	if existed {
		it, err := d.db.NewIter(nil)
		if err != nil {
			return fmt.Errorf("open store %s: %w", d.dir, err)
		}
		nonEmpty := it.First()
		ierr := it.Close()
		if ierr != nil {
			return fmt.Errorf("open store %s: %w", d.dir, ierr)
		}
		if nonEmpty {
			return fmt.Errorf("open store %s: Pebble database without a Tenzro format record: %w", d.dir, ErrNotStore)
		}
	}
	if err := d.db.Set(formatKey, encodeFormat(FormatVersion), pebble.Sync); err != nil {
		return fmt.Errorf("open store %s: write format record: %w", d.dir, err)
	}
	d.log.Info("store created", "dir", d.dir, "format_version", FormatVersion)
	return nil
}

func (d *DB) acquire() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.inflight.Add(1)
	return true
}

func (d *DB) release() { d.inflight.Done() }

// Close waits for in-flight calls and closes the database. Calling it again
// returns nil.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.inflight.Wait()
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", d.dir, err)
	}
	return nil
}

// encodeKey returns the keyspace prefix followed by key.
func encodeKey(ks machine.Keyspace, key []byte) ([]byte, error) {
	p, ok := keyspacePrefix[ks]
	if !ok {
		return nil, fmt.Errorf("keyspace %q: %w", ks, ErrUnknownKeyspace)
	}
	if len(key) > MaxKeySize {
		return nil, fmt.Errorf("key in %s is %d bytes, limit %d: %w", ks, len(key), MaxKeySize, ErrLimit)
	}
	out := make([]byte, 1+len(key))
	out[0] = p
	copy(out[1:], key)
	return out, nil
}

// Get returns a copy of the value stored under key, or syncer.ErrNotFound.
func (d *DB) Get(ctx context.Context, ks machine.Keyspace, key []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store get: %w", err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("store get %s: empty key: %w", ks, ErrLimit)
	}
	k, err := encodeKey(ks, key)
	if err != nil {
		return nil, fmt.Errorf("store get: %w", err)
	}
	if !d.acquire() {
		return nil, fmt.Errorf("store get: %w", ErrClosed)
	}
	defer d.release()
	v, closer, err := d.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, machine.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store get %s/%x: %w", ks, key, err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("store get %s/%x: %w", ks, key, err)
	}
	return out, nil
}

// upperBound returns the smallest key greater than every key with prefix p,
// or nil when none exists. p always starts with a keyspace byte below 0xff,
// so the result is never nil here.
func upperBound(p []byte) []byte {
	u := bytes.Clone(p)
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] != 0xff {
			u[i]++
			return u[:i+1]
		}
	}
	return nil
}

// Scan calls fn for every key in ks that starts with prefix, in ascending
// order. The slices passed to fn are valid only during the call. An error
// from fn stops the scan and is returned as is. ctx is checked before each
// key.
func (d *DB) Scan(ctx context.Context, ks machine.Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store scan: %w", err)
	}
	lower, err := encodeKey(ks, prefix)
	if err != nil {
		return fmt.Errorf("store scan: %w", err)
	}
	if !d.acquire() {
		return fmt.Errorf("store scan: %w", ErrClosed)
	}
	defer d.release()
	it, err := d.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lower, UpperBound: upperBound(lower)})
	if err != nil {
		return fmt.Errorf("store scan %s: %w", ks, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			_ = it.Close()
			return fmt.Errorf("store scan %s: %w", ks, err)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("store scan %s: %w", ks, err)
		}
		if err := fn(it.Key()[1:], v); err != nil {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store scan %s: %w", ks, err)
	}
	return nil
}

// Commit writes every op of b as one Pebble batch and syncs the WAL before
// returning: when it returns nil the whole batch is durable; when it returns
// an error nothing of it was applied (validation errors) or the outcome is
// that of a failed fsync, which Pebble treats as fatal. ctx is checked before
// the write starts; a started write is not interrupted. An empty batch is a
// no-op.
func (d *DB) Commit(ctx context.Context, b *machine.Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store commit: %w", err)
	}
	if b == nil || len(b.Ops) == 0 {
		return nil
	}
	keys := make([][]byte, len(b.Ops))
	var total int64
	for i, op := range b.Ops {
		if len(op.Key) == 0 {
			return fmt.Errorf("store commit: op %d in %s: empty key: %w", i, op.KS, ErrLimit)
		}
		k, err := encodeKey(op.KS, op.Key)
		if err != nil {
			return fmt.Errorf("store commit: op %d: %w", i, err)
		}
		if int64(len(op.Value)) > d.maxValue {
			return fmt.Errorf("store commit: op %d: value in %s is %d bytes, limit %d: %w", i, op.KS, len(op.Value), d.maxValue, ErrLimit)
		}
		keys[i] = k
		total += int64(len(k)) + int64(len(op.Value)) + 16
	}
	if total > MaxBatchSize {
		return fmt.Errorf("store commit: batch of %d ops is %d bytes, limit %d: %w", len(b.Ops), total, int64(MaxBatchSize), ErrLimit)
	}
	if !d.acquire() {
		return fmt.Errorf("store commit: %w", ErrClosed)
	}
	defer d.release()
	pb := d.db.NewBatchWithSize(int(total))
	defer pb.Close()
	for i, op := range b.Ops {
		var err error
		if op.Value == nil {
			err = pb.Delete(keys[i], nil)
		} else {
			err = pb.Set(keys[i], op.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("store commit: op %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store commit: %w", err)
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("store commit: %w", err)
	}
	return nil
}

// slogLogger adapts slog to Pebble's logger.
type slogLogger struct{ l *slog.Logger }

// Infof is Pebble's chatter (WAL replay, flushes): debug level.
func (s slogLogger) Infof(format string, args ...any) {
	s.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (s slogLogger) Errorf(format string, args ...any) {
	s.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is called by Pebble on unrecoverable errors (a failed fsync among
// them): the process must not go on with a store in an unknown state.
func (s slogLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.l.Error(msg, "component", "pebble", "fatal", true)
	fmt.Fprintln(os.Stderr, "pebble fatal:", msg)
	os.Exit(70)
}
