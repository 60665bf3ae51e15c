//go:build unix

package store

import (
	"fmt"
	"os"
	"syscall"
)

// mmapFile maps size bytes of f read-only and shared: the pages are the
// page cache's, so a mapped blob costs no heap and is dropped under memory
// pressure like any cached file.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if size <= 0 {
		return []byte{}, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("%d bytes do not fit the address space", size)
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return syscall.Munmap(b)
}

// lockDir takes an exclusive, non-blocking lock on f.
func lockDir(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

// startWriteBack asks the kernel to start writing n bytes of f at off to
// disk and returns at once (Linux sync_file_range; elsewhere a no-op). It
// is only a head start for the fsync that follows; errors surface there.
func startWriteBack(f *os.File, off, n int64) { startWriteBackOS(f, off, n) }
