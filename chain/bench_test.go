package chain

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
)

// BenchmarkStateRoot measures the app hash's state root, recomputed over the
// whole state every block, for states of 10k and 100k entries (~300-byte
// values, the size of a submission record), against the floor of one
// SHA-256 pass over the same bytes (reported as ratio_vs_sha256).
//
//	go test ./chain -run '^$' -bench StateRoot -benchtime 5x
func BenchmarkStateRoot(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			db, err := store.OpenInMemory()
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			var batch syncer.Batch
			val := make([]byte, 300)
			var raw []byte
			for i := 0; i < n; i++ {
				k := []byte(fmt.Sprintf("sub/bench/%020d/%010d/did:tenzro:machine:z%d", 0, i%256, i))
				batch.Set(ksState, k, val)
				raw = append(append(raw, k...), val...)
			}
			if err := db.Commit(ctx, &batch); err != nil {
				b.Fatal(err)
			}
			o := newOverlay(db, nil)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := stateRoot(ctx, db, o); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			per := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(per*1000, "ms/root")
			start := time.Now()
			for i := 0; i < b.N; i++ {
				sha256.Sum256(raw)
			}
			if base := time.Since(start).Seconds() / float64(b.N); base > 0 {
				b.ReportMetric(per/base, "ratio_vs_sha256")
			}
		})
	}
}
