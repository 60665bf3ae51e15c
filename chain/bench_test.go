package chain

import (
	"context"
	"fmt"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

// BenchmarkStateRoot measures the state part of the app hash for one block
// that writes 100 ~300-byte values (submission records) over states of 10k
// and 100k entries, through the path Commit takes: the IAVL state tree on
// disk (apply the block's writes, root, save the version, synced), against
// the incremental hash chain it replaced (state-delta/v1, one SHA-256 over
// the block's writes, which could prove nothing) in the same run.
//
//	go test ./chain -run '^$' -bench StateRoot -benchtime 200x
func BenchmarkStateRoot(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		ctx := context.Background()
		db, err := store.OpenInMemory()
		if err != nil {
			b.Fatal(err)
		}
		var batch machine.Batch
		val := make([]byte, 300)
		var ws []write
		for i := 0; i < n; i++ {
			k := StateKey(machine.KSTranscript, []byte(fmt.Sprintf("s/bench/%010d", i)))
			batch.Set(ksState, k, val)
			ws = append(ws, write{key: k, value: val})
		}
		if err := db.Commit(ctx, &batch); err != nil {
			b.Fatal(err)
		}
		block := func(i int) []write {
			o := machine.NewOverlay(stateKV{db})
			var blk machine.Batch
			for j := 0; j < 100; j++ {
				blk.Set(machine.KSTranscript, []byte(fmt.Sprintf("s/bench/%010d", (i*100+j)%n)), val)
			}
			_ = o.Commit(ctx, &blk)
			return blockWrites(o)
		}
		b.Run(fmt.Sprintf("iavl/entries=%d", n), func(b *testing.B) {
			t, err := openStateTree(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer t.close()
			t.begin(1)
			if err := t.apply(ws); err != nil {
				b.Fatal(err)
			}
			if _, err := t.save(1); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h := int64(i + 2)
				t.begin(h)
				if err := t.apply(block(i)); err != nil {
					b.Fatal(err)
				}
				r := t.workingRoot()
				if got, err := t.save(h); err != nil || got != r {
					b.Fatal(err, got, r)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/block")
			it, err := t.at(int64(b.N + 1))
			if err != nil {
				b.Fatal(err)
			}
			_, p, err := proveKey(it, ws[n/2].key)
			if err != nil {
				b.Fatal(err)
			}
			pb, _ := p.Marshal()
			b.ReportMetric(float64(len(pb)), "proof-bytes")
		})
		b.Run(fmt.Sprintf("hashchain/entries=%d", n), func(b *testing.B) {
			var prev wire.Hash
			for i := 0; i < b.N; i++ {
				prev = hashChain(prev, int64(i), block(i))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/block")
		})
		db.Close()
	}
}

// hashChain is the state hash the tree replaced (state-delta/v1), kept
// here only as the benchmark's baseline.
func hashChain(prev wire.Hash, height int64, ws []write) wire.Hash {
	c := wire.NewCanon("tenzro/train/state-delta/v1").Hash(prev).U64(uint64(height))
	for _, w := range ws {
		c.Bytes(w.key)
		if w.value == nil {
			c.U64(0).Bytes(nil)
		} else {
			c.U64(1).Bytes(w.value)
		}
	}
	return c.Sum()
}
