package store

import (
	"context"
	"encoding/binary"
	"log/slog"
	"testing"

	"github.com/tenzro/train/machine"
)

func benchDB(b *testing.B) *DB {
	b.Helper()
	db, err := Open(context.Background(), b.TempDir(), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkCommit33MB commits one 33 MB payload blob per synced batch, the
// size of one fragment of the seed's 200M-parameter bf16 model.
func BenchmarkCommit33MB(b *testing.B) {
	ctx := context.Background()
	db := benchDB(b)
	payload := make([]byte, 33<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var batch machine.Batch
		batch.Set(machine.KSBlobs, binary.BigEndian.AppendUint64(nil, uint64(i)), payload)
		batch.Set(machine.KSTranscript, binary.BigEndian.AppendUint64(nil, uint64(i)), []byte("entry"))
		if err := db.Commit(ctx, &batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommitSmall commits small synced batches (a state transition:
// a few hundred bytes over three keyspaces); ns/op is the inverse of
// commits per second.
func BenchmarkCommitSmall(b *testing.B) {
	ctx := context.Background()
	db := benchDB(b)
	val := make([]byte, 200)
	for i := 0; b.Loop(); i++ {
		k := binary.BigEndian.AppendUint64(nil, uint64(i))
		var batch machine.Batch
		batch.Set(machine.KSRuns, []byte("run-1"), val)
		batch.Set(machine.KSLedger, k, val)
		batch.Set(machine.KSTranscript, k, val)
		if err := db.Commit(ctx, &batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}
