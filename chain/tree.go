package chain

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"

	"github.com/cosmos/iavl"
	idb "github.com/cosmos/iavl/db"
	ics23 "github.com/cosmos/ics23/go"

	"github.com/tenzro/train/wire"
)

// StateDBDir is where a home keeps the state tree (cosmos/iavl over its
// goleveldb backend): the Merkle tree whose root is the state part of the
// app hash. The chain's flat store (AppDBDir) keeps the same keys for the
// machine's reads and scans.
const StateDBDir = "data/tenzro-state"

// treeCacheNodes is how many IAVL nodes the tree keeps in memory.
const treeCacheNodes = 100_000

// stateTree is the replicated state as an IAVL tree, one version per
// committed height. The working tree holds the writes of the finalized
// block that is not committed yet; committed is the last saved version,
// served to proofs and snapshots.
type stateTree struct {
	db idb.DB
	t  *iavl.MutableTree
	// prunedTo: versions up to it are deleted.
	prunedTo int64
}

// openStateTree opens the tree in dir ("" = in memory, for tests and
// Manual over an in-memory store) at its latest saved version.
func openStateTree(dir string) (*stateTree, error) {
	var db idb.DB
	if dir == "" {
		db = idb.NewMemDB()
	} else {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("state tree: %w", err)
		}
		ldb, err := idb.NewGoLevelDB("state", dir)
		if err != nil {
			return nil, fmt.Errorf("state tree %s: %w", dir, err)
		}
		db = ldb
	}
	t := iavl.NewMutableTree(db, treeCacheNodes, true, iavl.NewNopLogger(), iavl.SyncOption(true))
	if _, err := t.Load(); err != nil {
		db.Close()
		return nil, fmt.Errorf("state tree: load: %w", err)
	}
	return &stateTree{db: db, t: t}, nil
}

func (s *stateTree) close() error { return s.db.Close() }

// version is the last saved version (0: none).
func (s *stateTree) version() int64 { return s.t.Version() }

// rewind makes version h the latest saved one, deleting any later version
// (a crash after the tree saved a height and before the flat store
// committed it). h = 0 empties the tree.
func (s *stateTree) rewind(h int64) error {
	if h == 0 {
		if v := s.t.Version(); v > 0 {
			if err := s.t.DeleteVersionsFrom(1); err != nil {
				return fmt.Errorf("state tree: delete versions from 1: %w", err)
			}
		}
		// A fresh tree over the same db forgets the in-memory root.
		s.t = iavl.NewMutableTree(s.db, treeCacheNodes, true, iavl.NewNopLogger(), iavl.SyncOption(true))
		_, err := s.t.Load()
		return err
	}
	if err := s.t.LoadVersionForOverwriting(h); err != nil {
		return fmt.Errorf("state tree: rewind to %d: %w", h, err)
	}
	return nil
}

// apply writes ws into the working tree.
func (s *stateTree) apply(ws []write) error {
	for _, w := range ws {
		if w.value == nil {
			if _, _, err := s.t.Remove(w.key); err != nil {
				return fmt.Errorf("state tree: remove %q: %w", w.key, err)
			}
			continue
		}
		if _, err := s.t.Set(w.key, w.value); err != nil {
			return fmt.Errorf("state tree: set %q: %w", w.key, err)
		}
	}
	return nil
}

// emptyTreeRoot is the root of an empty tree (IAVL's: SHA-256 of nothing).
var emptyTreeRoot = wire.Hash(sha256.Sum256(nil))

// workingRoot is the root of the working tree, as it will be saved.
func (s *stateTree) workingRoot() wire.Hash {
	if s.t.IsEmpty() {
		return emptyTreeRoot
	}
	return wire.Hash(s.t.WorkingHash())
}

// begin starts the working tree of height h from the last saved version
// (discarding unsaved writes: CometBFT finalizes a block again after a
// crash). The first saved version is the chain's first block height.
func (s *stateTree) begin(h int64) {
	s.t.Rollback()
	if s.t.Version() == 0 && h != 1 {
		s.t.SetInitialVersion(uint64(h))
	}
}

// save saves the working tree as version h.
func (s *stateTree) save(h int64) (wire.Hash, error) {
	root, v, err := s.t.SaveVersion()
	if err != nil {
		return wire.Hash{}, fmt.Errorf("state tree: save height %d: %w", h, err)
	}
	if v != h {
		return wire.Hash{}, fmt.Errorf("state tree: saved version %d, want height %d", v, h)
	}
	return wire.Hash(root), nil
}

// prune deletes the versions older than the keep newest (keep ≤ 0: keeps
// all). A version a snapshot is still exporting is not deleted: the next
// call tries again.
func (s *stateTree) prune(h, keep int64) error {
	to := h - keep
	if keep <= 0 || to < 1 || to <= s.prunedTo {
		return nil
	}
	if err := s.t.DeleteVersionsTo(to); err != nil {
		return fmt.Errorf("state tree: prune to %d: %w", to, err)
	}
	s.prunedTo = to
	return nil
}

// at is the saved version h, read-only (safe for concurrent readers while
// the version exists).
func (s *stateTree) at(h int64) (*iavl.ImmutableTree, error) {
	it, err := s.t.GetImmutable(h)
	if err != nil {
		return nil, fmt.Errorf("state tree: version %d: %w", h, err)
	}
	return it, nil
}

// immutableRoot is a read-only tree's root hash.
func immutableRoot(it *iavl.ImmutableTree) wire.Hash { return wire.Hash(it.Hash()) }

// proveKey returns key's value in it (nil when absent) and an ics23
// existence or non-existence proof of it against the tree's root.
func proveKey(it *iavl.ImmutableTree, key []byte) ([]byte, *ics23.CommitmentProof, error) {
	has, err := it.Has(key)
	if err != nil {
		return nil, nil, fmt.Errorf("state tree: get %q: %w", key, err)
	}
	var v []byte
	var p *ics23.CommitmentProof
	if has {
		if v, err = it.Get(key); err != nil {
			return nil, nil, fmt.Errorf("state tree: get %q: %w", key, err)
		}
		if v == nil {
			v = []byte{}
		}
		p, err = it.GetMembershipProof(key)
	} else {
		p, err = it.GetNonMembershipProof(key)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("state tree: prove %q: %w", key, err)
	}
	return v, p, nil
}

var errTreeMissing = errors.New("chain: the state tree is missing or behind the chain store")
