//go:build !linux

package plugins

import (
	"os"

	"github.com/tenzro/train/syncer"
)

// openValues opens stored values by path, read through the file's
// descriptor (mapping is Linux-only here).
func (e *Engine) openValues(path string, ranges []syncer.ByteRange) (*source, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return readerSource(f, ranges), func() { _ = f.Close() }, nil
}
