//go:build !linux

package plugins

import (
	"context"
	"errors"
)

// withGuestMemory keeps wazero's default allocator off Linux.
func withGuestMemory(ctx context.Context, _ **mmapMemory) context.Context { return ctx }

// mmapMemory exists only on Linux.
type mmapMemory struct{}

func (*mmapMemory) mapStage(uint64, uint64, int, int64, bool) error {
	return errors.New("plugins: no staged mappings on this system")
}
