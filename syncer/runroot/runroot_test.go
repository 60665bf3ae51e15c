package runroot

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/bits"
	"testing"

	"github.com/tenzro/train/wire"
)

// naive is RFC 6962 §2.1 MTH written recursively from the definition.
func naive(leaves [][]byte) []byte {
	switch n := len(leaves); n {
	case 0:
		h := sha256.Sum256([]byte(Domain))
		return h[:]
	case 1:
		h := sha256.Sum256(append(append([]byte{0x00}, Domain...), leaves[0]...))
		return h[:]
	default:
		k := 1 << (bits.Len(uint(n-1)) - 1) // largest power of two < n
		l, r := naive(leaves[:k]), naive(leaves[k:])
		pre := append(append([]byte{0x01}, Domain...), l...)
		h := sha256.Sum256(append(pre, r...))
		return h[:]
	}
}

// naivePath is RFC 6962 §2.1.1 PATH(m, D[n]).
func naivePath(m int, leaves [][]byte) [][]byte {
	n := len(leaves)
	if n <= 1 {
		return nil
	}
	k := 1 << (bits.Len(uint(n-1)) - 1)
	if m < k {
		return append(naivePath(m, leaves[:k]), naive(leaves[k:]))
	}
	return append(naivePath(m-k, leaves[k:]), naive(leaves[:k]))
}

func testLeaves(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		h := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
		out[i] = h[:]
	}
	return out
}

func TestRootMatchesNaive(t *testing.T) {
	for n := 0; n <= 70; n++ {
		leaves := testLeaves(n)
		if got, want := Root(leaves), naive(leaves); !bytes.Equal(got[:], want) {
			t.Fatalf("size %d: Root = %x, naive = %x", n, got, want)
		}
	}
	// Leaves of any length, including empty.
	odd := [][]byte{{}, []byte("a"), make([]byte, 100)}
	if got, want := Root(odd), naive(odd); !bytes.Equal(got[:], want) {
		t.Fatalf("odd leaves: %x vs %x", got, want)
	}
}

func TestInclusionProofs(t *testing.T) {
	for n := 1; n <= 70; n++ {
		leaves := testLeaves(n)
		root := Root(leaves)
		for i := range n {
			p, err := InclusionProof(leaves, uint64(i))
			if err != nil {
				t.Fatalf("size %d index %d: %v", n, i, err)
			}
			want := naivePath(i, leaves)
			if len(p) != len(want) {
				t.Fatalf("size %d index %d: %d hashes, naive %d", n, i, len(p), len(want))
			}
			for j := range p {
				if !bytes.Equal(p[j][:], want[j]) {
					t.Fatalf("size %d index %d: hash %d differs from naive", n, i, j)
				}
			}
			if err := VerifyInclusion(leaves[i], uint64(i), uint64(n), p, root); err != nil {
				t.Fatalf("size %d index %d: %v", n, i, err)
			}
		}
	}
}

func TestInclusionRefused(t *testing.T) {
	leaves := testLeaves(13)
	root := Root(leaves)
	p, err := InclusionProof(leaves, 5)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []wire.Hash {
		q := append([]wire.Hash{}, p...)
		q[i][3] ^= 0x10
		return q
	}
	otherRoot := root
	otherRoot[0] ^= 1
	cases := []struct {
		name        string
		leaf        []byte
		index, size uint64
		path        []wire.Hash
		root        wire.Hash
	}{
		{"tampered first hash", leaves[5], 5, 13, flip(0), root},
		{"tampered last hash", leaves[5], 5, 13, flip(len(p) - 1), root},
		{"wrong leaf", leaves[6], 5, 13, p, root},
		{"wrong index", leaves[5], 4, 13, p, root},
		// RFC 6962 proofs do not bind the size where the path shape is the
		// same (sizes 9..16 here): the verifier takes size from the receipt.
		{"wrong size", leaves[5], 5, 8, p, root},
		{"index beyond size", leaves[5], 13, 13, p, root},
		{"short path", leaves[5], 5, 13, p[:len(p)-1], root},
		{"long path", leaves[5], 5, 13, append(append([]wire.Hash{}, p...), wire.Hash{}), root},
		{"wrong root", leaves[5], 5, 13, p, otherRoot},
		{"oversized path", leaves[5], 5, 13, make([]wire.Hash, MaxProofLen+1), root},
		{"leaf hash as leaf", Hasher{}.HashLeaf(leaves[5]), 5, 13, p, root},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := VerifyInclusion(c.leaf, c.index, c.size, c.path, c.root); !errors.Is(err, ErrProof) {
				t.Fatalf("VerifyInclusion = %v, want ErrProof", err)
			}
		})
	}
	if _, err := InclusionProof(leaves, 13); err == nil {
		t.Error("proof for index 13 of 13 built")
	}
	if _, err := InclusionProof(nil, 0); err == nil {
		t.Error("proof in empty tree built")
	}
}

// TestDomainSeparation: a node hash cannot pass as a leaf hash and the tag
// matters.
func TestDomainSeparation(t *testing.T) {
	a, b := []byte("a"), []byte("b")
	node := Hasher{}.HashChildren(Hasher{}.HashLeaf(a), Hasher{}.HashLeaf(b))
	if bytes.Equal(Hasher{}.HashLeaf(append(append([]byte{}, Hasher{}.HashLeaf(a)...), Hasher{}.HashLeaf(b)...)), node) {
		t.Fatal("leaf and node hashes collide")
	}
	plain := sha256.Sum256(append([]byte{0}, a...))
	if bytes.Equal(plain[:], Hasher{}.HashLeaf(a)) {
		t.Fatal("domain tag not applied")
	}
}

func BenchmarkRoot1026(b *testing.B)  { benchRoot(b, 1026) }
func BenchmarkRoot12290(b *testing.B) { benchRoot(b, 1024*12+2) }

func benchRoot(b *testing.B, n int) {
	leaves := testLeaves(n)
	for b.Loop() {
		Root(leaves)
	}
}

func BenchmarkVerifyInclusion1026(b *testing.B) {
	leaves := testLeaves(1026)
	root := Root(leaves)
	p, err := InclusionProof(leaves, 777)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := VerifyInclusion(leaves[777], 777, 1026, p, root); err != nil {
			b.Fatal(err)
		}
	}
}
