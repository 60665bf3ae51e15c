package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	chunker "github.com/ipfs/boxo/chunker"
	"github.com/ipfs/boxo/ipld/merkledag"
	"github.com/ipfs/boxo/ipld/unixfs/importer/balanced"
	"github.com/ipfs/boxo/ipld/unixfs/importer/helpers"
	uio "github.com/ipfs/boxo/ipld/unixfs/io"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	mh "github.com/multiformats/go-multihash"
)

// Layout says how a file becomes a UnixFS DAG. Two implementations that
// agree on the layout compute the same CID.
type Layout struct {
	// CIDVersion is 0 (Qm…, dag-pb everywhere, no raw leaves) or 1.
	CIDVersion int
	// RawLeaves stores file chunks as raw blocks (CIDv1 only).
	RawLeaves bool
	// Chunker is "size-<bytes>" (fixed-size chunks).
	Chunker string
	// MaxLinks is the balanced layout's links per node (default 174).
	MaxLinks int
}

// DefaultLayout is the layout `tenzro dataset add` uses: CIDv1, raw leaves,
// 1 MiB chunks (fewer blocks and round trips than Kubo's 256 KiB; bitswap
// carries blocks up to 2 MiB).
var DefaultLayout = Layout{CIDVersion: 1, RawLeaves: true, Chunker: "size-1048576", MaxLinks: helpers.DefaultLinksPerBlock}

// KuboV0Layout is the classic `ipfs add` layout that Debian's ipfs_cid
// prints (CIDv0, 256 KiB chunks, dag-pb leaves).
var KuboV0Layout = Layout{CIDVersion: 0, RawLeaves: false, Chunker: "size-262144", MaxLinks: helpers.DefaultLinksPerBlock}

// MaxChunkSize bounds the chunker's block size (bitswap's block limit is 2 MiB).
const MaxChunkSize = 1 << 20

// Check validates the layout.
func (l Layout) Check() error {
	if l.CIDVersion != 0 && l.CIDVersion != 1 {
		return fmt.Errorf("layout: cid version %d: want 0 or 1", l.CIDVersion)
	}
	if l.CIDVersion == 0 && l.RawLeaves {
		return errors.New("layout: raw leaves need CIDv1 (a CIDv0 can only name dag-pb)")
	}
	if _, err := l.chunkSize(); err != nil {
		return err
	}
	if l.MaxLinks < 2 || l.MaxLinks > MaxLinksPerNode {
		return fmt.Errorf("layout: %d links per node: want 2..%d", l.MaxLinks, MaxLinksPerNode)
	}
	return nil
}

func (l Layout) chunkSize() (int64, error) {
	s, ok := strings.CutPrefix(l.Chunker, "size-")
	if !ok {
		return 0, fmt.Errorf("layout: chunker %q: want size-<bytes>", l.Chunker)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > MaxChunkSize || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("layout: chunker %q: want size-<bytes> with 1..%d bytes", l.Chunker, MaxChunkSize)
	}
	return n, nil
}

func (l Layout) prefix() cid.Prefix {
	p := merkledag.V0CidPrefix()
	if l.CIDVersion == 1 {
		p = merkledag.V1CidPrefix()
	}
	p.MhType = mh.SHA2_256
	return p
}

// String is the layout as `tenzro dataset add` flags would set it.
func (l Layout) String() string {
	return fmt.Sprintf("unixfs/balanced cid-version=%d raw-leaves=%t chunker=%s max-links=%d", l.CIDVersion, l.RawLeaves, l.Chunker, l.MaxLinks)
}

// ImportFile builds the UnixFS DAG of r into ds.
func ImportFile(ds ipld.DAGService, r io.Reader, l Layout) (ipld.Node, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	n, _ := l.chunkSize()
	p := l.prefix()
	dbp := helpers.DagBuilderParams{Dagserv: ds, RawLeaves: l.RawLeaves, Maxlinks: l.MaxLinks, CidBuilder: &p}
	db, err := dbp.New(chunker.NewSizeSplitter(r, n))
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	nd, err := balanced.Layout(db)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	return nd, nil
}

// ImportPath builds the DAG of a file or a directory tree (entries in name
// order; symlinks and special files are refused). progress, when not nil,
// receives the bytes of each file read.
func ImportPath(ctx context.Context, ds ipld.DAGService, path string, l Layout, progress func(n int64)) (ipld.Node, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	switch {
	case fi.Mode().IsRegular():
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		defer f.Close()
		var r io.Reader = f
		if progress != nil {
			r = &countingReader{r: f, fn: progress}
		}
		return ImportFile(ds, r, l)
	case fi.IsDir():
		if err := l.Check(); err != nil {
			return nil, err
		}
		p := l.prefix()
		dir, err := uio.NewDirectory(ds, uio.WithCidBuilder(&p))
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			child, err := ImportPath(ctx, ds, filepath.Join(path, e.Name()), l, progress)
			if err != nil {
				return nil, err
			}
			if err := dir.AddChild(ctx, e.Name(), child); err != nil {
				return nil, fmt.Errorf("import %s: %w", path, err)
			}
		}
		nd, err := dir.GetNode()
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
		if err := ds.Add(ctx, nd); err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
		return nd, nil
	default:
		return nil, fmt.Errorf("import %s: not a regular file or directory (%s)", path, fi.Mode().Type())
	}
}

type countingReader struct {
	r  io.Reader
	fn func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.fn(int64(n))
	}
	return n, err
}

// hashOnly is a DAGService that keeps nothing: it lets `add` compute the
// root CID before streaming (the CAR header names the root first).
type hashOnly struct{}

func (hashOnly) Get(ctx context.Context, c cid.Cid) (ipld.Node, error) {
	return nil, ipld.ErrNotFound{Cid: c}
}
func (hashOnly) GetMany(ctx context.Context, cs []cid.Cid) <-chan *ipld.NodeOption {
	ch := make(chan *ipld.NodeOption)
	close(ch)
	return ch
}
func (hashOnly) Add(context.Context, ipld.Node) error        { return nil }
func (hashOnly) AddMany(context.Context, []ipld.Node) error  { return nil }
func (hashOnly) Remove(context.Context, cid.Cid) error       { return nil }
func (hashOnly) RemoveMany(context.Context, []cid.Cid) error { return nil }

// RootCID computes the CID that adding path with layout l gives, storing
// nothing.
func RootCID(ctx context.Context, path string, l Layout) (cid.Cid, error) {
	nd, err := ImportPath(ctx, hashOnly{}, path, l, nil)
	if err != nil {
		return cid.Undef, err
	}
	return nd.Cid(), nil
}
