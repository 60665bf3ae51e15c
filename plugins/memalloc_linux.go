//go:build linux

package plugins

import (
	"context"
	"fmt"
	"unsafe"

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
//
// The reservation of the instance being created is recorded in *hold, so
// that the host can map staged data straight into the guest's blocks
// (stage_linux.go) instead of copying it into fresh pages.
func withGuestMemory(ctx context.Context, hold **mmapMemory) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(cap, max uint64) experimental.LinearMemory {
		m := allocateGuestMemory(cap, max)
		if mm, ok := m.(*mmapMemory); ok && hold != nil {
			*hold = mm
		}
		return m
	}))
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

// mapStage replaces the reservation's pages [at, at+n) (page-aligned, inside
// the reservation) by the pages [off, off+n) of the memfd fd: shared, the
// guest's writes land in the memfd; private, they stay the guest's own
// (copy on write) and the memfd is only read. A shared mapping is populated
// at once (one system call instead of a write fault per page the guest
// writes: 15-25 ms less for an aggregate of 2^24 f32); a private one is not
// (populating it writable would copy every page).
func (m *mmapMemory) mapStage(at, n uint64, fd int, off int64, shared bool) error {
	if m.buf == nil || at+n > uint64(len(m.buf)) || at%pageSize != 0 || n%pageSize != 0 || uint64(off)%pageSize != 0 {
		return fmt.Errorf("plugins: mapping [%d,+%d) outside the guest reservation or unaligned", at, n)
	}
	flags := unix.MAP_FIXED | unix.MAP_PRIVATE
	if shared {
		flags = unix.MAP_FIXED | unix.MAP_SHARED | unix.MAP_POPULATE
	}
	_, err := unix.MmapPtr(fd, off, unsafe.Pointer(&m.buf[at]), uintptr(n), unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return fmt.Errorf("plugins: mapping staged data into guest memory: %w", err)
	}
	return nil
}
