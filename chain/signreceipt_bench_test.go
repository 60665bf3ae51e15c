package chain

import (
	"fmt"
	"testing"
)

// BenchmarkSignReceiptDeliver is a sign_receipt transaction's delivery
// through the chain app's FinalizeBlock (the block's timers, the ante, the
// handler, the state tree's update), against an empty block's FinalizeBlock
// on the same state (sub-benchmark "empty"): the difference is the
// transaction's DeliverTx cost. The block is finalized again at the same
// height every iteration and never committed, as CometBFT re-finalizes a
// block it did not commit, so every iteration signs the same unsigned
// receipt. The run has rounds × 4 fragments (M = K = 2); the signature was
// verified once before the loop, as CheckTx does on a node.
//
//	go test ./chain -run '^$' -bench SignReceiptDeliver -benchtime 200x -count 5
func BenchmarkSignReceiptDeliver(b *testing.B) {
	for _, rounds := range []int{1, 16} {
		h, w, task := signerTrainsRun(b, rounds, 4)
		raw := h.signReceipt(task, w.t1)
		if res := h.finalize(raw); res.TxResults[0].Code != CodeOK {
			b.Fatalf("sign_receipt: %d %s", res.TxResults[0].Code, res.TxResults[0].Log)
		}
		b.Run(fmt.Sprintf("rounds=%d/sign", rounds), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if res := h.finalize(raw); res.TxResults[0].Code != CodeOK {
					b.Fatalf("sign_receipt: %d %s", res.TxResults[0].Code, res.TxResults[0].Log)
				}
			}
		})
		b.Run(fmt.Sprintf("rounds=%d/empty", rounds), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.finalize()
			}
		})
	}
}
