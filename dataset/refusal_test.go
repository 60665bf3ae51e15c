package dataset

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/boxo/ipld/merkledag"
	"github.com/ipfs/boxo/ipld/unixfs"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"

	"github.com/tenzro/train/store"
)

// assertNothingHeld: no dataset record and no block left behind.
func assertNothingHeld(t *testing.T, n *testNode) {
	t.Helper()
	l, err := n.svc.List(context.Background())
	if err != nil || len(l) != 0 {
		t.Fatalf("datasets left: %+v %v", l, err)
	}
	if k := countBlocks(t, n); k != 0 {
		t.Fatalf("%d blocks left behind", k)
	}
}

func TestParseRefRefusals(t *testing.T) {
	for _, s := range []string{
		"", "ipfs://", "ipfs://notacid", "ipfs://Qm", "ipfs://bafy" + strings.Repeat("a", 200),
		"ipfs://bafyreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy", // dag-cbor
		"ipfs://bafkqaaa", // identity multihash
		"ipfs://bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu/../x",
		"ipfs://bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu//x",
	} {
		if _, _, err := ParseRef(s); !errors.Is(err, ErrBadCID) {
			t.Errorf("ParseRef(%q) = %v, want ErrBadCID", s, err)
		}
	}
	for _, s := range []string{
		"ipfs://QmcjN2jviid8mYuJ8VoAMFhNDrdaev2BzbdN5TTno1f6UJ",
		"/ipfs/bafybeigv2uo6y6zznsc6g5rwbdzwhj6yymeel7tvm2ahtbzg7o2rg5bm2m/a/b.csv",
		"bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu",
	} {
		if _, _, err := ParseRef(s); err != nil {
			t.Errorf("ParseRef(%q): %v", s, err)
		}
	}
}

// TestUnreachable: a CID no connected peer has fails after the stall
// timeout with an error naming the peers asked; nothing is stored.
func TestUnreachable(t *testing.T) {
	a := newTestNode(t, Options{}, nil)
	b := newTestNode(t, Options{StallTimeout: 2 * time.Second}, nil)
	connect(t, b, a)
	path, _ := randomFile(t, 1000)
	root, _ := carOf(t, path, DefaultLayout) // a never gets it
	_, err := b.svc.Fetch(context.Background(), root, 0)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), a.h.ID().String()) {
		t.Fatalf("err %v, want ErrUnreachable naming %s", err, a.h.ID())
	}
	assertNothingHeld(t, b)
}

// TestImportTamperedBlock: a CAR section whose bytes do not hash to its CID
// is refused and the blocks written before it are deleted.
func TestImportTamperedBlock(t *testing.T) {
	a := newTestNode(t, Options{}, nil)
	path, data := randomFile(t, 3<<20)
	_, car := carOf(t, path, DefaultLayout)
	// Flip a byte of the last chunk's data (raw leaves: data appears verbatim).
	i := bytes.LastIndex(car, data[len(data)-4096:])
	if i < 0 {
		t.Fatal("chunk not found in CAR")
	}
	car[i+100] ^= 0xff
	_, err := a.svc.Import(context.Background(), bytes.NewReader(car), ImportMeta{})
	if !errors.Is(err, store.ErrBlockMismatch) {
		t.Fatalf("err %v, want ErrBlockMismatch", err)
	}
	assertNothingHeld(t, a)
}

// corrupting serves every raw block with one byte flipped: a hostile peer.
type corrupting struct{ BlockStore }

func (c corrupting) Get(ctx context.Context, k cid.Cid) (blocks.Block, error) {
	b, err := c.BlockStore.Get(ctx, k)
	if err != nil || k.Prefix().Codec != cid.Raw {
		return b, err
	}
	d := append([]byte(nil), b.RawData()...)
	d[0] ^= 0xff
	return blocks.NewBlockWithCid(d, k)
}

// TestFetchTamperedBlocks: a peer that serves bytes not matching their CIDs
// never gets them stored; the fetch fails and leaves nothing behind.
func TestFetchTamperedBlocks(t *testing.T) {
	a := newTestNode(t, Options{}, func(bs BlockStore) BlockStore { return corrupting{bs} })
	b := newTestNode(t, Options{StallTimeout: 2 * time.Second}, nil)
	connect(t, b, a)
	path, _ := randomFile(t, 3<<20)
	root, car := carOf(t, path, DefaultLayout)
	if _, err := a.svc.Import(context.Background(), bytes.NewReader(car), ImportMeta{}); err != nil {
		t.Fatal(err)
	}
	_, err := b.svc.Fetch(context.Background(), root, 0)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err %v, want the tampered blocks never to arrive", err)
	}
	assertNothingHeld(t, b)
}

// TestTooLarge: the size limit refuses an import and a fetch (per call and
// per node), leaving nothing behind.
func TestTooLarge(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	small := newTestNode(t, Options{MaxBytes: 1 << 20}, nil)
	b := newTestNode(t, Options{}, nil)
	connect(t, b, a)
	connect(t, small, a)
	path, _ := randomFile(t, 3<<20)
	root, car := carOf(t, path, DefaultLayout)
	if _, err := small.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("import: %v, want ErrTooLarge", err)
	}
	assertNothingHeld(t, small)
	if _, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := small.svc.Fetch(ctx, root, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("fetch under the node limit: %v, want ErrTooLarge", err)
	}
	assertNothingHeld(t, small)
	if _, err := b.svc.Fetch(ctx, root, 2<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("fetch under the call's limit: %v, want ErrTooLarge", err)
	}
	assertNothingHeld(t, b)
}

// liar is a file node whose links claim tiny sizes: only the bytes that
// arrive can catch it.
func TestTooLargeLyingSizes(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	b := newTestNode(t, Options{MaxBytes: 1 << 20}, nil)
	connect(t, b, a)
	var buf bytes.Buffer
	fsn := unixfs.NewFSNode(unixfs.TFile)
	root := merkledag.NodeWithData(nil)
	root.SetCidBuilder(merkledag.V1CidPrefix())
	var leaves []ipld.Node
	for i := 0; i < 3; i++ {
		d := bytes.Repeat([]byte{byte(i)}, 1<<19)
		leaf := merkledag.NewRawNode(d)
		leaves = append(leaves, leaf)
		fsn.AddBlockSize(1)
		if err := root.AddRawLink("", &ipld.Link{Cid: leaf.Cid(), Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := fsn.GetBytes()
	root.SetData(data)
	cw, err := NewCARWriter(&buf, root.Cid())
	if err != nil {
		t.Fatal(err)
	}
	_ = cw.Add(ctx, root)
	_ = cw.AddMany(ctx, leaves)
	_ = cw.Flush()
	if _, err := a.svc.Import(ctx, bytes.NewReader(buf.Bytes()), ImportMeta{}); err != nil {
		t.Fatal(err)
	}
	_, err = b.svc.Fetch(ctx, root.Cid(), 0)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "arrived") {
		t.Fatalf("fetch: %v, want ErrTooLarge as blocks arrive", err)
	}
	assertNothingHeld(t, b)
}

// chain builds a dag-pb chain of depth d (each node links to the next) and
// a node with w links, as CARs.
func chainCAR(t *testing.T, depth, width int) (cid.Cid, []byte) {
	t.Helper()
	ctx := context.Background()
	var nodes []ipld.Node
	leaf := merkledag.NewRawNode([]byte("leaf"))
	nodes = append(nodes, leaf)
	var cur ipld.Node = leaf
	for i := 0; i < depth; i++ {
		fsn := unixfs.NewFSNode(unixfs.TFile)
		n := merkledag.NodeWithData(nil)
		n.SetCidBuilder(merkledag.V1CidPrefix())
		for j := 0; j < max(1, width); j++ {
			fsn.AddBlockSize(4)
			if err := n.AddRawLink("", &ipld.Link{Cid: cur.Cid(), Size: 4}); err != nil {
				t.Fatal(err)
			}
		}
		d, _ := fsn.GetBytes()
		n.SetData(d)
		nodes = append(nodes, n)
		cur = n
	}
	var buf bytes.Buffer
	cw, err := NewCARWriter(&buf, cur.Cid())
	if err != nil {
		t.Fatal(err)
	}
	for i := len(nodes) - 1; i >= 0; i-- {
		_ = cw.Add(ctx, nodes[i])
	}
	_ = cw.Flush()
	return cur.Cid(), buf.Bytes()
}

func TestTooDeepTooWide(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		depth, width int
		want         error
	}{
		{"deep", DefaultMaxDepth + 2, 1, ErrTooDeep},
		{"wide", 1, 101, ErrTooWide},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestNode(t, Options{}, nil)
			b := newTestNode(t, Options{MaxLinks: 100}, nil)
			connect(t, b, a)
			root, car := chainCAR(t, tc.depth, tc.width)
			if tc.want == ErrTooWide {
				if _, err := b.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); !errors.Is(err, tc.want) {
					t.Fatalf("import: %v, want %v", err, tc.want)
				}
				assertNothingHeld(t, b)
				if _, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); !errors.Is(err, tc.want) {
					t.Fatalf("import: %v, want %v", err, tc.want)
				}
				assertNothingHeld(t, a)
				// Serve it from a node that does not check: put the blocks straight in.
				rd, _ := NewCARReader(bytes.NewReader(car))
				for {
					blk, err := rd.Next()
					if err != nil {
						break
					}
					_ = a.db.Blocks().Put(ctx, blk)
				}
			}
			if _, err := b.svc.Fetch(ctx, root, 0); !errors.Is(err, tc.want) {
				t.Fatalf("fetch: %v, want %v", err, tc.want)
			}
			assertNothingHeld(t, b)
		})
	}
}

// TestImportIncomplete: a CAR that lacks blocks of its DAG is refused.
func TestImportIncomplete(t *testing.T) {
	a := newTestNode(t, Options{}, nil)
	path, _ := randomFile(t, 3<<20)
	_, car := carOf(t, path, DefaultLayout)
	_, err := a.svc.Import(context.Background(), bytes.NewReader(car[:len(car)-(1<<20)-50]), ImportMeta{})
	if err == nil {
		t.Fatal("a truncated CAR was accepted")
	}
	assertNothingHeld(t, a)
}

// TestRepeatedLeafBomb: a file node that links one small leaf many times
// stores little but reads as a huge file: its declared size is refused.
func TestRepeatedLeafBomb(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{MaxBytes: 1 << 20}, nil)
	leaf := merkledag.NewRawNode(bytes.Repeat([]byte{7}, 1<<16))
	fsn := unixfs.NewFSNode(unixfs.TFile)
	root := merkledag.NodeWithData(nil)
	root.SetCidBuilder(merkledag.V1CidPrefix())
	for i := 0; i < 1000; i++ { // 64 MB of file from 64 KiB of blocks
		fsn.AddBlockSize(1 << 16)
		if err := root.AddRawLink("", &ipld.Link{Cid: leaf.Cid(), Size: 1 << 16}); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := fsn.GetBytes()
	root.SetData(d)
	var buf bytes.Buffer
	cw, _ := NewCARWriter(&buf, root.Cid())
	_ = cw.Add(ctx, root)
	_ = cw.Add(ctx, leaf)
	_ = cw.Flush()
	if _, err := a.svc.Import(ctx, bytes.NewReader(buf.Bytes()), ImportMeta{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("import: %v, want ErrTooLarge", err)
	}
	assertNothingHeld(t, a)
}
