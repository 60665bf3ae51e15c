package gossip

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/tenzro/train/wire"
)

// Finding 8 of issue 22: 4 fresh identities × 2 unread blob streams held
// all 8 shared serve slots for the 2-minute stream deadline, stopping blob
// serving, light-client bootstrap and attestation nonces. Now the control
// protocols have slots of their own, a peer holds at most 2 blob serves of
// 16, and a reader that stops reading is cut after the idle deadline.
func TestUnreadBlobStreamsStarveNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	big := blobBytes(7, 24<<20) // larger than the stream windows: an unread answer blocks the server
	hBig := wire.ContentHash(big)
	server := newNode(t, ctx, Config{}, Handlers{
		Blob: func(h wire.Hash) ([]byte, bool) { return big, h == hBig },
		Nonce: func(context.Context, wire.NonceParams) (*wire.NonceResult, error) {
			return &wire.NonceResult{Nonce: []byte("0123456789abcdef")}, nil
		},
		ChainInfo: func() (*ChainInfo, error) { return testChainInfo(), nil },
	})
	server.idle = 3 * time.Second // the production idle deadline is 15 s
	srvID, err := peer.Decode(server.PeerID())
	if err != nil {
		t.Fatal(err)
	}
	// Four attackers, each opening three blob streams that are never read.
	var held []network.Stream
	busy := 0
	for a := 0; a < 4; a++ {
		atk := newNode(t, ctx, Config{}, Handlers{})
		connect(t, ctx, atk, server)
		for k := 0; k < 3; k++ {
			s, err := atk.h.NewStream(ctx, srvID, protocol.ID(BlobProtocol))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Write(BlobRequest{Hash: hBig, Limit: uint64(len(big))}.Marshal()); err != nil {
				t.Fatal(err)
			}
			_ = s.CloseWrite()
			var st [1]byte
			if _, err := io.ReadFull(s, st[:]); err != nil {
				t.Fatal(err)
			}
			if st[0] == blobBusy {
				busy++
				_ = s.Close()
				continue
			}
			held = append(held, s) // status OK read; the rest is never read
		}
	}
	if busy != 4 || len(held) != 8 {
		t.Fatalf("%d streams refused busy, %d served; want 4 (the third of each peer) and 8", busy, len(held))
	}
	waitFor(t, ctx, "8 blob serves in flight", func() bool { return len(server.serveSem) == 8 })

	// An honest node still gets chain info, a nonce and the blob itself.
	honest := newNode(t, ctx, Config{}, Handlers{})
	connect(t, ctx, honest, server)
	if ci, _, err := honest.RequestChainInfo(ctx, server.Addrs()[0]); err != nil || ci.ChainID != "tenzro-testnet" {
		t.Fatalf("chain info during the flood: %+v, %v", ci, err)
	}
	if res, err := honest.RequestNonce(ctx, wire.NonceParams{TaskID: "t", DID: "d"}); err != nil || len(res.Nonce) != 16 {
		t.Fatalf("nonce during the flood: %+v, %v", res, err)
	}
	got, err := honest.FetchBlob(ctx, server.PeerID(), hBig)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("blob during the flood: %d bytes, %v", len(got), err)
	}
	// The unread streams are cut after the idle deadline: their slots free.
	waitFor(t, ctx, "stalled serves cut", func() bool { return len(server.serveSem) == 0 })
	for _, s := range held {
		_ = s.Reset()
	}
}
