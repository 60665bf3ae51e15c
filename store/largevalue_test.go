package store

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tenzro/train/machine"
)

// largeValueDB holds what a node's database holds after a run is posted: in
// one batch, the run's small state, ledger entries and its fragment weights
// (67 MB), flushed to an sstable.
func largeValueDB(t testing.TB) *DB {
	t.Helper()
	db, err := Open(context.Background(), t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var b machine.Batch
	b.Set(machine.KSRuns, []byte("run-1"), []byte(`{"status":"running"}`))
	b.Set(machine.KSLedger, []byte("acct/1"), []byte("100"))
	w := make([]byte, 67<<20)
	for i := range w {
		w[i] = byte(i * 7)
	}
	b.Set(machine.KSWeights, []byte("w/run-1/0"), w)
	b.Set(machine.KSMeta, []byte("cand/x"), []byte("{}"))
	if err := db.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if err := db.db.Flush(); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestScanSkipsLargeValues: scanning the runs (as the node's timer does
// every 100 ms) must not read the block of a large value stored beside
// them. With Pebble's default block-size threshold the run's small keys
// and the 67 MB value shared one block, and every scan decompressed it.
func TestScanSkipsLargeValues(t *testing.T) {
	db := largeValueDB(t)
	lower := []byte{keyspacePrefix[machine.KSRuns]}
	it, err := db.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upperBound(lower)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	st := it.Stats()
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d runs", n)
	}
	if read := st.InternalStats.BlockBytes; read > 1<<20 {
		t.Fatalf("scanning one small run read %d bytes of blocks", read)
	}
	// The large value itself still reads back.
	v, err := db.Get(context.Background(), machine.KSWeights, []byte("w/run-1/0"))
	if err != nil || len(v) != 67<<20 {
		t.Fatalf("large value: %d bytes, %v", len(v), err)
	}
}

func BenchmarkScanBesideLargeValue(b *testing.B) {
	db := largeValueDB(b)
	ctx := context.Background()
	for b.Loop() {
		if err := db.Scan(ctx, machine.KSRuns, nil, func(k, v []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
