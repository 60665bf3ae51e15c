//go:build !linux

package enclave

import (
	"context"
	"errors"
)

func snpDeviceSealingKey(context.Context, string, uint32, string) ([]byte, error) {
	return nil, errors.New("sealing key: /dev/sev-guest is only supported on Linux")
}
