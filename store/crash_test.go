package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tenzro/train/machine"
)

// The crash tests follow Pebble's own style: run the store on a crashable
// in-memory filesystem, take CrashClones (which keep everything synced and a
// random part of what was not) while batches are being committed, reopen
// each clone and check that every batch whose Commit had returned before the
// clone is fully present and that no batch is partially present.

// testBatch builds batch i of writer w. Batches of one writer are committed
// in order, so after any crash the writer's batches present must be exactly
// 0..head, where head is the index recorded in the batch itself.
func testBatch(w, i int, large bool) *machine.Batch {
	var b machine.Batch
	for j, ks := range batchKeyspaces(i) {
		b.Set(ks, batchKey(w, i, j), batchValue(w, i, j, large && j == 0))
	}
	b.Set(machine.KSMeta, []byte(fmt.Sprintf("head/w%d", w)), binary.BigEndian.AppendUint64(nil, uint64(i)))
	if i > 0 {
		b.Delete(machine.KSRuns, []byte(fmt.Sprintf("pending/w%d/%06d", w, i-1)))
	}
	b.Set(machine.KSRuns, []byte(fmt.Sprintf("pending/w%d/%06d", w, i)), []byte{})
	return &b
}

// batchKeyspaces varies which and how many keyspaces a batch touches.
func batchKeyspaces(i int) []machine.Keyspace {
	n := 2 + i%4
	out := make([]machine.Keyspace, n)
	for j := range out {
		out[j] = machine.AllKeyspaces[(i+j)%len(machine.AllKeyspaces)]
	}
	return out
}

func batchKey(w, i, j int) []byte { return []byte(fmt.Sprintf("w%d/b%06d/%d", w, i, j)) }

func batchValue(w, i, j int, large bool) []byte {
	n := 16 + (i*131+j*17)%512
	if large {
		n = 300 << 10 // larger than half the test memtable: a flushable batch
	}
	v := bytes.Repeat([]byte{byte(w*31 + i + j)}, n)
	copy(v, fmt.Sprintf("w%d-b%d-%d;", w, i, j))
	return v
}

// checkWriters verifies atomicity and durability for writers 0..nw-1 given
// the highest batch index whose Commit had returned for each (-1: none).
func checkWriters(t *testing.T, db *DB, nw int, returned []int64, large func(int) bool) {
	t.Helper()
	ctx := context.Background()
	for w := 0; w < nw; w++ {
		head := int64(-1)
		if v, err := db.Get(ctx, machine.KSMeta, []byte(fmt.Sprintf("head/w%d", w))); err == nil {
			head = int64(binary.BigEndian.Uint64(v))
		} else if err != machine.ErrNotFound {
			t.Fatal(err)
		}
		if head < returned[w] {
			t.Fatalf("writer %d: batch %d returned from Commit but head is %d: durable batch lost", w, returned[w], head)
		}
		// Every batch 0..head fully present, nothing beyond.
		counts := map[int]int{}
		for _, ks := range machine.AllKeyspaces {
			err := db.Scan(ctx, ks, []byte(fmt.Sprintf("w%d/b", w)), func(k, v []byte) error {
				parts := strings.Split(string(k), "/")
				i, _ := strconv.Atoi(strings.TrimPrefix(parts[1], "b"))
				j, _ := strconv.Atoi(parts[2])
				if batchKeyspaces(i)[j] != ks {
					return fmt.Errorf("key %q in wrong keyspace %s", k, ks)
				}
				if !bytes.Equal(v, batchValue(w, i, j, large(i) && j == 0)) {
					return fmt.Errorf("key %q: wrong value", k)
				}
				counts[i]++
				return nil
			})
			if err != nil {
				t.Fatalf("writer %d: %v", w, err)
			}
		}
		for i, n := range counts {
			if int64(i) > head {
				t.Fatalf("writer %d: batch %d present (%d keys) beyond head %d: partial or reordered batch", w, i, n, head)
			}
		}
		for i := int64(0); i <= head; i++ {
			if want := len(batchKeyspaces(int(i))); counts[int(i)] != want {
				t.Fatalf("writer %d: batch %d has %d of %d keys: partial batch", w, i, counts[int(i)], want)
			}
		}
		var pending []string
		err := db.Scan(ctx, machine.KSRuns, []byte(fmt.Sprintf("pending/w%d/", w)), func(k, v []byte) error {
			pending = append(pending, string(k))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case head < 0 && len(pending) != 0:
			t.Fatalf("writer %d: pending keys %q without a head", w, pending)
		case head >= 0 && (len(pending) != 1 || pending[0] != fmt.Sprintf("pending/w%d/%06d", w, head)):
			t.Fatalf("writer %d: head %d but pending keys %q: a delete and a set of one batch split", w, head, pending)
		}
	}
}

type crashClone struct {
	fs       *vfs.MemFS
	returned []int64
	at       string
}

func crashOpts() Options {
	return Options{MemTableSize: 256 << 10, CacheSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
}

func reopenAndCheck(t *testing.T, clones []crashClone, nw int, large func(int) bool) {
	t.Helper()
	for _, c := range clones {
		db, err := open(context.Background(), "db", crashOpts(), c.fs)
		if err != nil {
			t.Fatalf("clone %s: reopen: %v", c.at, err)
		}
		checkWriters(t, db, nw, c.returned, large)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func isLarge(i int) bool { return i%7 == 3 }

func TestCrashCloneSequential(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 0x7e2a))
			fs := vfs.NewCrashableMem()
			db, err := open(ctx, "db", crashOpts(), fs)
			if err != nil {
				t.Fatal(err)
			}
			const n = 120
			var clones []crashClone
			returned := int64(-1)
			for i := 0; i < n; i++ {
				if rng.IntN(12) == 0 {
					clones = append(clones, crashClone{
						fs:       fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(i)))}),
						returned: []int64{returned},
						at:       fmt.Sprintf("before batch %d", i),
					})
				}
				if err := db.Commit(ctx, testBatch(0, i, isLarge(i))); err != nil {
					t.Fatal(err)
				}
				returned = int64(i)
			}
			clones = append(clones, crashClone{fs: fs.CrashClone(vfs.CrashCloneCfg{}), returned: []int64{returned}, at: "end, synced only"})
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			reopenAndCheck(t, clones, 1, isLarge)
		})
	}
}

func TestCrashCloneConcurrent(t *testing.T) {
	for _, seed := range []uint64{11, 12} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			fs := vfs.NewCrashableMem()
			db, err := open(ctx, "db", crashOpts(), fs)
			if err != nil {
				t.Fatal(err)
			}
			const writers, perWriter = 3, 50
			returned := make([]atomic.Int64, writers)
			for w := range returned {
				returned[w].Store(-1)
			}
			var wg sync.WaitGroup
			var done atomic.Int32
			for w := 0; w < writers; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer done.Add(1)
					for i := 0; i < perWriter; i++ {
						if err := db.Commit(ctx, testBatch(w, i, isLarge(i))); err != nil {
							t.Error(err)
							return
						}
						returned[w].Store(int64(i))
					}
				}()
			}
			// Clone while the writers run: the snapshot of what returned is
			// taken before the clone, so everything in it must survive.
			var clones []crashClone
			for k := 0; done.Load() < writers; k++ {
				snap := make([]int64, writers)
				for w := range snap {
					snap[w] = returned[w].Load()
				}
				clones = append(clones, crashClone{
					fs:       fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, uint64(k)))}),
					returned: snap,
					at:       fmt.Sprintf("concurrent clone %d at %v", k, snap),
				})
				// Let the writers make a random amount of progress between clones.
				step := int64(1 + rng.IntN(8))
				for w := 0; w < writers && done.Load() < writers; w++ {
					target := min(snap[w]+step, perWriter-1)
					for returned[w].Load() < target && done.Load() < writers {
						runtime.Gosched()
					}
				}
			}
			wg.Wait()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if len(clones) < 3 {
				t.Fatalf("only %d clones taken", len(clones))
			}
			t.Logf("%d clones", len(clones))
			reopenAndCheck(t, clones, writers, isLarge)
		})
	}
}
