//go:build !linux

package enclave

import (
	"context"
	"errors"

	"github.com/google/go-sev-guest/client"
)

var errSEVGuestLinuxOnly = errors.New("/dev/sev-guest is only supported on Linux")

func openSEVGuest(string) (client.Device, error) { return nil, errSEVGuestLinuxOnly }

func snpDeviceSealingKey(context.Context, string, uint32, string) ([]byte, error) {
	return nil, errors.New("sealing key: " + errSEVGuestLinuxOnly.Error())
}
