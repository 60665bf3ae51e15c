package store

import (
	"context"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// BenchmarkStateWrite compares what a syncer's commit waits for when it
// stores the new state (two 34.6 MB blobs, at once, as writeState does):
// WriteBlob (hash, write, fsync, rename: durable before it returns) and
// WriteBlobAfter (hash as copied into memory; durable later); wall and the
// process's CPU time of that part (cpu-ms/op).
//
//	go test ./store -run '^$' -bench StateWrite -benchtime 10x
func BenchmarkStateWrite(b *testing.B) {
	const n = 34_600_000
	w, m := blobData(1, n), blobData(2, n)
	for _, mode := range []string{"WriteBlob", "WriteBlobAfter"} {
		b.Run(mode, func(b *testing.B) {
			s, err := OpenBlobs(b.TempDir(), BlobOptions{Logger: discard()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.SetBytes(2 * n)
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				c0 := cpuTime()
				// Other bytes each time (a new state each round).
				w[0], m[0] = byte(i), byte(i)
				w[1], m[1] = byte(i>>8), byte(i>>8)
				var wg sync.WaitGroup
				var hs [2]wire.Hash
				for k, p := range [][]byte{w, m} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						put := func(wr io.Writer) error { _, err := wr.Write(p); return err }
						var err error
						if mode == "WriteBlob" {
							hs[k], err = s.WriteBlob(ctx, 0, put)
						} else {
							hs[k], err = s.WriteBlobAfter(ctx, int64(len(p)), put)
						}
						if err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				cpu += cpuTime() - c0
				for _, h := range hs {
					if err := s.Durable(ctx, h); err != nil {
						b.Fatal(err)
					}
					_ = s.Delete(ctx, h)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
