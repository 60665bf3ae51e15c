//go:build !unix

package store

import (
	"io"
	"os"
)

// mmapFile reads the file where mmap is not available.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

func unmap([]byte) error { return nil }

func lockDir(*os.File) error { return nil }

func startWriteBack(*os.File, int64, int64) {}
