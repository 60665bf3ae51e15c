package runroot

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/transparency-dev/merkle"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"

	"github.com/tenzro/train/wire"
)

// Domain is the run root's domain tag (wire.DomainRunRoot).
const Domain = wire.DomainRunRoot

// Prefix bytes of RFC 6962 §2.1.
const (
	LeafPrefix = 0x00
	NodePrefix = 0x01
)

// MaxLeaves bounds a tree (far above 1 + rounds + 1 for any real run).
const MaxLeaves = 1 << 24

// MaxProofLen bounds an inclusion proof (a tree of 2^64 leaves needs 64).
const MaxProofLen = 64

// ErrProof is wrapped by every inclusion-proof failure.
var ErrProof = errors.New("runroot: inclusion proof does not verify")

// Hasher is the run root's merkle.LogHasher.
type Hasher struct{}

var _ merkle.LogHasher = Hasher{}

// EmptyRoot is SHA-256(Domain).
func (Hasher) EmptyRoot() []byte {
	h := sha256.Sum256([]byte(Domain))
	return h[:]
}

// HashLeaf is SHA-256(0x00 ‖ Domain ‖ leaf).
func (Hasher) HashLeaf(leaf []byte) []byte {
	h := sha256.New()
	h.Write([]byte{LeafPrefix})
	h.Write([]byte(Domain))
	h.Write(leaf)
	return h.Sum(nil)
}

// HashChildren is SHA-256(0x01 ‖ Domain ‖ l ‖ r).
func (Hasher) HashChildren(l, r []byte) []byte {
	h := sha256.New()
	h.Write([]byte{NodePrefix})
	h.Write([]byte(Domain))
	h.Write(l)
	h.Write(r)
	return h.Sum(nil)
}

// Size is 32.
func (Hasher) Size() int { return sha256.Size }

// LeafHash returns Hasher{}.HashLeaf(leaf) as a wire.Hash.
func LeafHash(leaf []byte) wire.Hash { return wire.Hash(Hasher{}.HashLeaf(leaf)) }

var factory = &compact.RangeFactory{Hash: Hasher{}.HashChildren}

// build appends every leaf to a compact range, reporting every perfect
// node to visit (nil: none).
func build(leaves [][]byte, visit compact.VisitFn) (*compact.Range, error) {
	if len(leaves) > MaxLeaves {
		return nil, fmt.Errorf("runroot: %d leaves, limit %d", len(leaves), MaxLeaves)
	}
	r := factory.NewEmptyRange(0)
	for i, l := range leaves {
		if err := r.Append(Hasher{}.HashLeaf(l), visit); err != nil {
			return nil, fmt.Errorf("runroot: leaf %d: %w", i, err)
		}
	}
	return r, nil
}

// Root returns the tree hash of leaves (EmptyRoot for none). It panics only
// if there are more than MaxLeaves leaves.
func Root(leaves [][]byte) wire.Hash {
	if len(leaves) == 0 {
		return wire.Hash(Hasher{}.EmptyRoot())
	}
	r, err := build(leaves, nil)
	if err != nil {
		panic(err)
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		panic(fmt.Sprintf("runroot: %v", err)) // begin is 0: cannot happen
	}
	return wire.Hash(root)
}

// InclusionProof returns the RFC 6962 audit path of leaves[index] in the
// tree of all leaves, from the leaf's sibling up to the root's child.
func InclusionProof(leaves [][]byte, index uint64) ([]wire.Hash, error) {
	size := uint64(len(leaves))
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, fmt.Errorf("runroot: inclusion proof: %w", err)
	}
	want := make(map[compact.NodeID]int, len(nodes.IDs))
	for i, id := range nodes.IDs {
		want[id] = i
	}
	hashes := make([][]byte, len(nodes.IDs))
	if _, err := build(leaves, func(id compact.NodeID, h []byte) {
		if i, ok := want[id]; ok {
			hashes[i] = h
		}
	}); err != nil {
		return nil, err
	}
	for i, h := range hashes {
		if h == nil {
			return nil, fmt.Errorf("runroot: inclusion proof: node %+v missing", nodes.IDs[i])
		}
	}
	path, err := nodes.Rehash(hashes, Hasher{}.HashChildren)
	if err != nil {
		return nil, fmt.Errorf("runroot: inclusion proof: %w", err)
	}
	out := make([]wire.Hash, len(path))
	for i, h := range path {
		out[i] = wire.Hash(h)
	}
	return out, nil
}

// VerifyInclusion checks that leaf is the index-th of size leaves under
// root, given its audit path. Any failure wraps ErrProof.
func VerifyInclusion(leaf []byte, index, size uint64, path []wire.Hash, root wire.Hash) error {
	if len(path) > MaxProofLen {
		return fmt.Errorf("%w: %d hashes, limit %d", ErrProof, len(path), MaxProofLen)
	}
	p := make([][]byte, len(path))
	for i := range path {
		p[i] = path[i][:]
	}
	if err := proof.VerifyInclusion(Hasher{}, index, size, Hasher{}.HashLeaf(leaf), p, root[:]); err != nil {
		return fmt.Errorf("%w: leaf %d of %d: %v", ErrProof, index, size, err)
	}
	return nil
}
