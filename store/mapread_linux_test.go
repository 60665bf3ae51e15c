package store

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkMappedRead: mapping and reading once a page-cached 34.6 MB blob
// (a K=6 bench input) the way mmapFile does, against MAP_POPULATE and
// madvise(MADV_WILLNEED) — whether prefaulting would shorten a commit's
// first touch of its inputs (bench/results/finalize.md, issue 21 item 2).
//
//	go test ./store -run X -bench MappedRead -benchtime 30x
func BenchmarkMappedRead(b *testing.B) {
	const size = 34_600_080
	path := filepath.Join(b.TempDir(), "blob")
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		b.Fatal(err)
	}
	scan := func(m []byte) (x uint32) {
		for i := 0; i+4 <= len(m); i += 4 {
			x = max(x, binary.LittleEndian.Uint32(m[i:])&0x7fffffff)
		}
		return x
	}
	for _, c := range []struct {
		name     string
		flags    int
		willneed bool
	}{{"plain", syscall.MAP_SHARED, false}, {"populate", syscall.MAP_SHARED | syscall.MAP_POPULATE, false}, {"willneed", syscall.MAP_SHARED, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				f, err := os.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, c.flags)
				if err != nil {
					b.Fatal(err)
				}
				if c.willneed {
					_ = unix.Madvise(m, unix.MADV_WILLNEED)
				}
				scan(m)
				_ = syscall.Munmap(m)
				f.Close()
			}
		})
	}
}
