package dataset

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// Limits of the DAG walk. Options may lower them.
const (
	// MaxLinksPerNode bounds the links of one node (a wide DAG or directory).
	MaxLinksPerNode = 10_000
	// DefaultMaxDepth bounds the DAG's depth: a balanced file DAG of 174-link
	// nodes reaches 174^6 chunks at depth 6; directories add their nesting.
	DefaultMaxDepth = 32
	// MaxCIDLength bounds a CID string.
	MaxCIDLength = 128
)

// ErrBadCID: the text is not a CID this node accepts.
var ErrBadCID = errors.New("malformed CID")

// checkCID accepts the CIDs UnixFS datasets use: dag-pb or raw, SHA-256.
func checkCID(c cid.Cid) error {
	if !c.Defined() {
		return fmt.Errorf("undefined CID: %w", ErrBadCID)
	}
	p := c.Prefix()
	if p.Codec != cid.DagProtobuf && p.Codec != cid.Raw {
		return fmt.Errorf("CID %s: codec 0x%x: want dag-pb (0x70) or raw (0x55): %w", c, p.Codec, ErrBadCID)
	}
	if p.MhType != mh.SHA2_256 || p.MhLength != 32 {
		return fmt.Errorf("CID %s: multihash 0x%x/%d bytes: want sha2-256: %w", c, p.MhType, p.MhLength, ErrBadCID)
	}
	return nil
}

// ParseRef parses "ipfs://<cid>[/path]", "/ipfs/<cid>[/path]" or a bare
// CID (CIDv0 Qm… or CIDv1 in any multibase) and returns the CID and the path
// inside it ("" for none).
func ParseRef(s string) (cid.Cid, string, error) {
	if len(s) > 4096 {
		return cid.Undef, "", fmt.Errorf("dataset ref is %d bytes, limit 4096: %w", len(s), ErrBadCID)
	}
	rest, ok := strings.CutPrefix(s, "ipfs://")
	if !ok {
		rest, _ = strings.CutPrefix(s, "/ipfs/")
	}
	cs, path, _ := strings.Cut(rest, "/")
	if cs == "" || len(cs) > MaxCIDLength {
		return cid.Undef, "", fmt.Errorf("%q: want ipfs://<cid>[/path] with a CID of 1..%d characters: %w", trunc(s), MaxCIDLength, ErrBadCID)
	}
	c, err := cid.Decode(cs)
	if err != nil {
		return cid.Undef, "", fmt.Errorf("%q: %v: %w", trunc(cs), err, ErrBadCID)
	}
	if err := checkCID(c); err != nil {
		return cid.Undef, "", err
	}
	for _, seg := range strings.Split(path, "/") {
		if path != "" && (seg == "" || seg == "." || seg == "..") {
			return cid.Undef, "", fmt.Errorf("%q: path segment %q: %w", trunc(s), seg, ErrBadCID)
		}
	}
	return c, path, nil
}

func trunc(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
