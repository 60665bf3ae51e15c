//go:build linux

package plugins

import (
	"context"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// withGuestMemory makes wazero back guest memories with one anonymous
// mapping of the memory's maximum size, reserved up front and committed by
// the kernel only where the guest touches it. Growing never copies (by
// default wazero grows a Go slice by reallocation, which needs up to twice
// the memory and made a memory.grow loop cost gigabytes of Go heap), and
// freeing returns the pages to the system at once. Guests see the same
// semantics: fresh pages read as zero, growth fails only past the limit.
func withGuestMemory(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(allocateGuestMemory))
}

type mmapMemory struct{ buf []byte }

func allocateGuestMemory(_, max uint64) experimental.LinearMemory {
	if max == 0 {
		max = 1
	}
	size := (max + uint64(unix.Getpagesize()) - 1) &^ (uint64(unix.Getpagesize()) - 1)
	buf, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		// No address space for the reservation (a worker's RLIMIT_AS):
		// grow a Go slice as wazero would by default.
		return &sliceMemory{max: max}
	}
	return &mmapMemory{buf: buf}
}

// sliceMemory is wazero's default behaviour: a Go slice grown by copying.
type sliceMemory struct {
	buf []byte
	max uint64
}

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	nb := make([]byte, size, min(max(size, 2*uint64(cap(m.buf))), m.max))
	copy(nb, m.buf)
	m.buf = nb
	return m.buf
}

func (m *sliceMemory) Free() { m.buf = nil }

func (m *mmapMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size]
}

func (m *mmapMemory) Free() {
	if m.buf != nil {
		_ = unix.Munmap(m.buf)
		m.buf = nil
	}
}
