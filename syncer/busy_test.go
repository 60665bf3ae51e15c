package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// busyChain refuses the first busy election proofs it is given as a
// node's CheckTx does when their signer has its mempool share waiting.
type busyChain struct {
	syncer.Chain
	busy, refused, submitted int
}

func (b *busyChain) Submit(ctx context.Context, tx []byte) (machine.Pending, error) {
	if d, err := wire.DecodeTx(tx); err == nil && d.Type == wire.TxElectionProof {
		if b.refused < b.busy {
			b.refused++
			return nil, machine.SenderBusy("mempool share used: the node's key already has 250 transactions waiting")
		}
		b.submitted++
	}
	return b.Chain.Submit(ctx, tx)
}

// Changed: a block has already come (the wait is for one).
func (b *busyChain) Changed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// TestNodeKeyWaitsOutItsMempoolShare: a transaction signed by the node's
// key (here its election proof) that its chain node refuses for the key's
// mempool share is sent again after the next block instead of failing.
func TestNodeKeyWaitsOutItsMempoolShare(t *testing.T) {
	kv, kerr := store.OpenInMemory()
	if kerr != nil {
		t.Fatal(kerr)
	}
	h := newHarness(t, kv)
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	bc := &busyChain{Chain: h.chain, busy: 3}
	n, err := syncer.NewNode(h.ctx, syncer.Config{Chain: bc, Blobs: syncer.KVBlobs{KV: h.kv}, Local: h.kv, Engine: h.eng,
		Signer: syncer.KeySigner{Key: h.syncerKey()}, Dev: true, Clock: func() time.Time { return h.now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h.node = n
	if err := h.post(spec(h.task, h.sponsor.DID.String(), 2, 2, 2, 1), initWeights(t, 2, 16)); err != nil {
		t.Fatal(err)
	}
	if bc.refused != 3 || bc.submitted != 1 {
		t.Fatalf("refused %d, then submitted %d: the node did not send its election proof again after the refusals", bc.refused, bc.submitted)
	}
}
