package chain

// lightstore.go: the light client's trusted headers on disk, so that a
// restart resumes from the last verified header instead of re-deriving
// trust from the genesis (asking the primary for its latest header).
//
// The file (<dir>/headers.log) is an append-only log of records:
//
//	record  = length u32 (big endian) | sha256(payload) [32] | payload
//	payload = 'H' | magic | len(chain id) u8 | chain id | genesis hash [32]   (first record, once)
//	        | 'B' | CometBFT LightBlock (protobuf)                             (heights strictly increasing)
//
// Each verified header is appended and synced; past 2×keep blocks the file
// is rewritten with the last keep (temporary file, sync, rename, sync of
// the directory). A record that is cut short (a torn write) or fails its
// checksum makes the whole file damaged: nothing in it is trusted, the
// client re-derives trust and starts a new file. A file of another chain
// id or genesis is refused.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	"github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/wire"
)

const (
	// LightStoreFile is the light client's trusted headers, in its home.
	LightStoreFile = "headers.log"
	// DefaultLightStoreKeep is how many trusted headers the store keeps
	// after pruning.
	DefaultLightStoreKeep = 100
	lightStoreMagic       = "tenzro-light-store/1"
	// maxLightRecord bounds one record (a light block with its validator
	// set: ~150 bytes a validator).
	maxLightRecord = 4 << 20
	// maxLightStoreBlocks bounds the blocks one file may hold (pruning
	// keeps it at most 2×keep).
	maxLightStoreBlocks = 4096
	// maxLightStoreFile bounds the file read at start.
	maxLightStoreFile = 256 << 20
	lightRecordHead   = 4 + sha256.Size
)

// errLightStoreDamaged marks a store file that cannot be trusted (torn,
// corrupted, or not a store): the client re-derives trust.
var errLightStoreDamaged = errors.New("light client store damaged")

// lightStoreHead is the identity of the network a store's headers belong
// to.
type lightStoreHead struct {
	chainID string
	genesis wire.Hash
}

func (h lightStoreHead) payload() []byte {
	b := append([]byte{'H'}, lightStoreMagic...)
	b = append(b, byte(len(h.chainID)))
	b = append(b, h.chainID...)
	return append(b, h.genesis[:]...)
}

// lightRecord frames a payload.
func lightRecord(payload []byte) []byte {
	out := make([]byte, lightRecordHead, lightRecordHead+len(payload))
	binary.BigEndian.PutUint32(out, uint32(len(payload)))
	sum := sha256.Sum256(payload)
	copy(out[4:], sum[:])
	return append(out, payload...)
}

// lightBlockRecord is the record of a light block.
func lightBlockRecord(lb *types.LightBlock) ([]byte, error) {
	pb, err := lb.ToProto()
	if err != nil {
		return nil, fmt.Errorf("light block %d: %w", lb.Height, err)
	}
	raw, err := pb.Marshal()
	if err != nil {
		return nil, fmt.Errorf("light block %d: %w", lb.Height, err)
	}
	if len(raw)+1 > maxLightRecord {
		return nil, fmt.Errorf("light block %d: %d bytes, limit %d", lb.Height, len(raw), maxLightRecord)
	}
	return lightRecord(append([]byte{'B'}, raw...)), nil
}

// parseLightStore reads a store file strictly: every record whole and
// matching its checksum, the head first and once, then light blocks of one
// chain at strictly increasing heights, each valid on its own. Any flaw is
// errLightStoreDamaged.
func parseLightStore(raw []byte) (lightStoreHead, []*types.LightBlock, error) {
	var head lightStoreHead
	var blocks []*types.LightBlock
	damaged := func(off int, format string, a ...any) (lightStoreHead, []*types.LightBlock, error) {
		return lightStoreHead{}, nil, fmt.Errorf("%w: record at byte %d: %s", errLightStoreDamaged, off, fmt.Sprintf(format, a...))
	}
	if len(raw) > maxLightStoreFile {
		return damaged(0, "file of %d bytes, limit %d", len(raw), maxLightStoreFile)
	}
	for off, i := 0, 0; off < len(raw); i++ {
		if len(raw)-off < lightRecordHead {
			return damaged(off, "cut short: %d bytes of a %d-byte record head (a torn write)", len(raw)-off, lightRecordHead)
		}
		n := int(binary.BigEndian.Uint32(raw[off:]))
		if n < 1 || n > maxLightRecord {
			return damaged(off, "length %d outside 1..%d", n, maxLightRecord)
		}
		if len(raw)-off-lightRecordHead < n {
			return damaged(off, "cut short: %d of %d payload bytes (a torn write)", len(raw)-off-lightRecordHead, n)
		}
		payload := raw[off+lightRecordHead : off+lightRecordHead+n]
		if sum := sha256.Sum256(payload); !bytes.Equal(sum[:], raw[off+4:off+lightRecordHead]) {
			return damaged(off, "checksum mismatch")
		}
		switch {
		case i == 0:
			want := len(lightStoreMagic) + 2
			if payload[0] != 'H' || len(payload) < want || string(payload[1:want-1]) != lightStoreMagic {
				return damaged(off, "not a %s head", lightStoreMagic)
			}
			cl := int(payload[want-1])
			if cl == 0 || len(payload) != want+cl+len(head.genesis) {
				return damaged(off, "head of %d bytes with a chain id of %d", len(payload), cl)
			}
			head.chainID = string(payload[want : want+cl])
			copy(head.genesis[:], payload[want+cl:])
		case payload[0] != 'B':
			return damaged(off, "kind %q, want a light block", payload[0])
		default:
			if len(blocks) >= maxLightStoreBlocks {
				return damaged(off, "more than %d light blocks", maxLightStoreBlocks)
			}
			var pb cmtproto.LightBlock
			if err := pb.Unmarshal(payload[1:]); err != nil {
				return damaged(off, "light block: %v", err)
			}
			lb, err := types.LightBlockFromProto(&pb)
			if err != nil {
				return damaged(off, "light block: %v", err)
			}
			if err := lb.ValidateBasic(head.chainID); err != nil {
				return damaged(off, "light block %d: %v", lb.Height, err)
			}
			if again, err := lightBlockRecord(lb); err != nil || !bytes.Equal(again, raw[off:off+lightRecordHead+n]) {
				return damaged(off, "light block %d not in its canonical encoding", lb.Height)
			}
			if k := len(blocks); k > 0 && lb.Height <= blocks[k-1].Height {
				return damaged(off, "light block %d after %d", lb.Height, blocks[k-1].Height)
			}
			blocks = append(blocks, lb)
		}
		off += lightRecordHead + n
	}
	if head.chainID == "" {
		return damaged(0, "empty file (no head)")
	}
	return head, blocks, nil
}

// lightStore appends trusted light blocks to the store file.
type lightStore struct {
	path string
	head lightStoreHead
	keep int
	log  *slog.Logger

	f    *os.File
	recs [][]byte // the file's block records, oldest first
	last int64    // the last stored height
	// broken: a write failed; the next append rewrites the file whole.
	broken bool
}

// openLightStore opens (or creates) the store in dir for chainID and
// genesis: it returns the stored light blocks, none when the file is new or
// was damaged (logged, kept aside as headers.log.damaged), and an error
// when it belongs to another network.
func openLightStore(dir string, head lightStoreHead, keep int, log *slog.Logger) (*lightStore, []*types.LightBlock, error) {
	if keep < 1 {
		keep = DefaultLightStoreKeep
	}
	s := &lightStore{path: filepath.Join(dir, LightStoreFile), head: head, keep: keep, log: log}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("light client store: %w", err)
	}
	var raw []byte
	st, err := os.Stat(s.path)
	if err == nil && st.Size() <= maxLightStoreFile {
		raw, err = readCapped(s.path, maxLightStoreFile)
	}
	var blocks []*types.LightBlock
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("light client store: %w", err)
	default:
		var got lightStoreHead
		if raw == nil {
			err = fmt.Errorf("%w: %d bytes, limit %d", errLightStoreDamaged, st.Size(), maxLightStoreFile)
		} else {
			got, blocks, err = parseLightStore(raw)
		}
		if err != nil {
			aside := s.path + ".damaged"
			if rerr := os.Rename(s.path, aside); rerr != nil {
				return nil, nil, fmt.Errorf("light client store: %w (and moving it aside: %v)", err, rerr)
			}
			log.Warn("light client: the stored trusted headers are damaged (a torn or corrupted write): nothing in them is trusted; re-deriving trust as at a first start",
				"file", s.path, "kept_as", aside, "err", err)
			blocks = nil
			break
		}
		if got.chainID != head.chainID || got.genesis != head.genesis {
			return nil, nil, fmt.Errorf("light client store %s holds headers of chain %q (genesis hash %s), not of this network's chain %q (genesis hash %s): it belongs to another network; move it away to follow this one",
				s.path, got.chainID, got.genesis, head.chainID, head.genesis)
		}
		for _, lb := range blocks {
			rec, err := lightBlockRecord(lb)
			if err != nil {
				return nil, nil, fmt.Errorf("light client store: %w", err)
			}
			s.recs = append(s.recs, rec)
			s.last = lb.Height
		}
	}
	if blocks == nil {
		// A new file (or one replacing a damaged file).
		s.recs, s.last = nil, 0
		if err := s.rewrite(); err != nil {
			return nil, nil, err
		}
		return s, nil, nil
	}
	if s.f, err = os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, nil, fmt.Errorf("light client store: %w", err)
	}
	return s, blocks, nil
}

// rewrite replaces the file with the head and the last keep records,
// atomically.
func (s *lightStore) rewrite() error {
	if len(s.recs) > s.keep {
		s.recs = append([][]byte(nil), s.recs[len(s.recs)-s.keep:]...)
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("light client store: %w", err)
	}
	buf := lightRecord(s.head.payload())
	for _, r := range s.recs {
		buf = append(buf, r...)
	}
	if _, err := f.Write(buf); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err == nil {
		s.f, err = os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	}
	if err != nil {
		os.Remove(tmp)
		s.broken = true
		return fmt.Errorf("light client store: rewriting %s: %w", s.path, err)
	}
	s.broken = false
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// append stores the light blocks above the last stored height (in the
// order given, which must be increasing) and syncs; past 2×keep it prunes
// to the last keep.
func (s *lightStore) append(lbs ...*types.LightBlock) error {
	var buf []byte
	for _, lb := range lbs {
		if lb == nil || lb.Height <= s.last {
			continue
		}
		rec, err := lightBlockRecord(lb)
		if err != nil {
			return fmt.Errorf("light client store: %w", err)
		}
		s.recs = append(s.recs, rec)
		s.last = lb.Height
		buf = append(buf, rec...)
	}
	if buf == nil && !s.broken {
		return nil
	}
	if s.broken || len(s.recs) > 2*s.keep {
		return s.rewrite()
	}
	_, err := s.f.Write(buf)
	if err == nil {
		err = s.f.Sync()
	}
	if err != nil {
		// A partial record may be on disk: the next append rewrites the
		// file whole (and a restart before it finds the torn record).
		s.broken = true
		return fmt.Errorf("light client store: appending to %s: %w", s.path, err)
	}
	return nil
}

// Close closes the file.
func (s *lightStore) Close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
