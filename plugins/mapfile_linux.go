//go:build linux

package plugins

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tenzro/train/syncer"
)

// openValues opens stored values by path, mapped read-only (stored blob
// files never change): a source whose bytes are the file's page cache, read
// in place by native rules and copied from there into a guest's block by
// the others, with no read into a buffer of this process. Values in one run
// of the file are plain bytes; scattered ranges read through the mapping.
// The mapping is counted in the stage pool's total (a worker's RLIMIT_AS
// grows with it). Its pages are faulted in as they are read (by the rule's
// goroutines, on every core), not populated up front: populating 8 files'
// pages on one thread cost more worker CPU per commit (node_finalize.py's
// worker_cpu_ms). release unmaps it. A file that cannot be mapped is read
// through its descriptor instead.
func (e *Engine) openValues(path string, ranges []syncer.ByteRange) (*source, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	size := st.Size()
	rs := coalesce(ranges)
	for _, r := range rs {
		if r.Off < 0 || r.Len < 0 || r.Off+r.Len > size {
			_ = f.Close()
			return nil, nil, fmt.Errorf("plugins: values [%d,+%d) outside %s (%d bytes)", r.Off, r.Len, path, size)
		}
	}
	sp := e.stages
	if size <= 0 || size != int64(int(size)) || sp == nil {
		return readerSource(f, ranges), func() { _ = f.Close() }, nil
	}
	sp.mu.Lock()
	sp.total += size
	total := sp.total
	sp.mu.Unlock()
	unaccount := func() {
		sp.mu.Lock()
		sp.total -= size
		sp.mu.Unlock()
	}
	if sp.reserve != nil {
		sp.reserve(total)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		unaccount()
		return readerSource(f, ranges), func() { _ = f.Close() }, nil
	}
	_ = f.Close() // the mapping keeps the file
	release := func() {
		_ = unix.Munmap(mem)
		unaccount()
	}
	if len(rs) == 1 {
		return bytesSource(mem[rs[0].Off : rs[0].Off+rs[0].Len : rs[0].Off+rs[0].Len]), release, nil
	}
	return readerSource(bytes.NewReader(mem), ranges), release, nil
}
