package dataset

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	carv2 "github.com/ipld/go-car/v2"

	"github.com/tenzro/train/store"
)

// CARv1 (https://ipld.io/specs/transport/car/carv1/): a dag-cbor header
// {"roots": [CID], "version": 1} and then sections varint(len) ‖ CID ‖ bytes,
// each prefixed by its length.

// carHeader encodes the dag-cbor header with one root: keys in dag-cbor's
// length-first order, the CID as tag 42 over a 0x00-prefixed byte string.
func carHeader(root cid.Cid) ([]byte, []byte) {
	cb := append([]byte{0}, root.Bytes()...)
	h := []byte{0xa2, 0x65, 'r', 'o', 'o', 't', 's', 0x81, 0xd8, 0x2a}
	switch {
	case len(cb) < 24:
		h = append(h, 0x40|byte(len(cb)))
	case len(cb) < 256:
		h = append(h, 0x58, byte(len(cb)))
	default:
		h = append(h, 0x59, byte(len(cb)>>8), byte(len(cb)))
	}
	h = append(h, cb...)
	h = append(h, 0x67, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x01)
	return binary.AppendUvarint(nil, uint64(len(h))), h
}

// CARWriter is a DAGService that streams every node added to it as a CARv1
// section. Repeated blocks (equal chunks) are written once.
type CARWriter struct {
	mu   sync.Mutex
	w    *bufio.Writer
	seen map[string]struct{}
	err  error
	// Blocks and Bytes count what was written.
	Blocks, Bytes int64
}

// NewCARWriter writes the header naming root to w.
func NewCARWriter(w io.Writer, root cid.Cid) (*CARWriter, error) {
	cw := &CARWriter{w: bufio.NewWriterSize(w, 1<<20), seen: map[string]struct{}{}}
	ln, h := carHeader(root)
	if _, err := cw.w.Write(append(ln, h...)); err != nil {
		return nil, fmt.Errorf("car: write header: %w", err)
	}
	return cw, nil
}

// Flush writes out buffered sections.
func (c *CARWriter) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// Add writes one section.
func (c *CARWriter) Add(_ context.Context, nd ipld.Node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	k := nd.Cid().KeyString()
	if _, ok := c.seen[k]; ok {
		return nil
	}
	c.seen[k] = struct{}{}
	cb, data := nd.Cid().Bytes(), nd.RawData()
	sec := binary.AppendUvarint(nil, uint64(len(cb)+len(data)))
	if _, err := c.w.Write(append(sec, cb...)); err != nil {
		c.err = fmt.Errorf("car: write: %w", err)
		return c.err
	}
	if _, err := c.w.Write(data); err != nil {
		c.err = fmt.Errorf("car: write: %w", err)
		return c.err
	}
	c.Blocks++
	c.Bytes += int64(len(data))
	return nil
}

// AddMany writes sections in order.
func (c *CARWriter) AddMany(ctx context.Context, nds []ipld.Node) error {
	for _, nd := range nds {
		if err := c.Add(ctx, nd); err != nil {
			return err
		}
	}
	return nil
}

// Get is not supported: the writer keeps nothing.
func (c *CARWriter) Get(_ context.Context, k cid.Cid) (ipld.Node, error) {
	return nil, ipld.ErrNotFound{Cid: k}
}

// GetMany is not supported.
func (c *CARWriter) GetMany(context.Context, []cid.Cid) <-chan *ipld.NodeOption {
	ch := make(chan *ipld.NodeOption)
	close(ch)
	return ch
}

// Remove is not supported.
func (c *CARWriter) Remove(context.Context, cid.Cid) error { return errors.New("car: remove") }

// RemoveMany is not supported.
func (c *CARWriter) RemoveMany(context.Context, []cid.Cid) error { return errors.New("car: remove") }

// ErrBadCAR: the upload is not a well-formed CARv1 stream within the limits.
var ErrBadCAR = errors.New("malformed CAR")

// maxCARHeader bounds the CAR header (one root needs ~60 bytes).
const maxCARHeader = 4 << 10

// CARReader reads a CARv1 stream with exactly one root, strictly: the
// header at most 4 KiB, each section at most store.MaxBlockSize plus its
// CID, and every block's bytes must hash to its CID.
type CARReader struct {
	br   *carv2.BlockReader
	Root cid.Cid
}

// NewCARReader reads the header.
func NewCARReader(r io.Reader) (*CARReader, error) {
	br, err := carv2.NewBlockReader(r, carv2.MaxAllowedHeaderSize(maxCARHeader), carv2.MaxAllowedSectionSize(store.MaxBlockSize+128))
	if err != nil {
		return nil, fmt.Errorf("car: header: %v: %w", err, ErrBadCAR)
	}
	if br.Version != 1 {
		return nil, fmt.Errorf("car: version %d: want a CARv1 stream: %w", br.Version, ErrBadCAR)
	}
	if len(br.Roots) != 1 {
		return nil, fmt.Errorf("car: %d roots: want exactly one: %w", len(br.Roots), ErrBadCAR)
	}
	if err := checkCID(br.Roots[0]); err != nil {
		return nil, fmt.Errorf("car: root: %w", err)
	}
	return &CARReader{br: br, Root: br.Roots[0]}, nil
}

// Next returns the next verified block, or io.EOF at the end.
func (c *CARReader) Next() (blocks.Block, error) {
	b, err := c.br.Next()
	if err == io.EOF {
		return nil, io.EOF
	}
	if err != nil && strings.Contains(err.Error(), "mismatch in content integrity") {
		// go-car re-hashes too; give its refusal our sentinel.
		return nil, fmt.Errorf("car: section: %v: %w", err, store.ErrBlockMismatch)
	}
	if err != nil {
		return nil, fmt.Errorf("car: section: %v: %w", err, ErrBadCAR)
	}
	if err := checkCID(b.Cid()); err != nil {
		return nil, fmt.Errorf("car: %w", err)
	}
	if err := store.VerifyBlock(b.Cid(), b.RawData()); err != nil {
		return nil, fmt.Errorf("car: %w", err)
	}
	return b, nil
}
