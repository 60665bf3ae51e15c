package chain

import (
	"context"
	"fmt"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

// BenchmarkStateHash measures the incremental state hash of one block that
// writes 100 ~300-byte values (submission records) over states of 10k and
// 100k entries: its cost follows the block's writes, not the state's size
// (the full RFC 6962 recompute it replaced took 124 ms per block at 100k).
//
//	go test ./chain -run '^$' -bench StateHash -benchtime 200x
func BenchmarkStateHash(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db, err := store.OpenInMemory()
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var batch machine.Batch
			val := make([]byte, 300)
			for i := 0; i < n; i++ {
				batch.Set(ksState, StateKey(machine.KSTranscript, []byte(fmt.Sprintf("s/bench/%010d", i))), val)
			}
			if err := db.Commit(ctx, &batch); err != nil {
				b.Fatal(err)
			}
			var prev wire.Hash
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o := machine.NewOverlay(stateKV{db})
				var blk machine.Batch
				for j := 0; j < 100; j++ {
					blk.Set(machine.KSTranscript, []byte(fmt.Sprintf("s/bench/%010d", (i*100+j)%n)), val)
				}
				_ = o.Commit(ctx, &blk)
				prev = StateHash(prev, int64(i), blockWrites(o))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/block")
		})
	}
}
