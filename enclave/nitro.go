package enclave

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hf/nsm"
	"github.com/hf/nsm/request"

	"github.com/tenzro/train/wire"
)

// NitroProvider gets attestation documents from /dev/nsm.
type NitroProvider struct{}

// Vendor implements Provider.
func (NitroProvider) Vendor() string { return "nitro" }

// Simulated implements Provider.
func (NitroProvider) Simulated() bool { return false }

// Evidence implements Provider: user_data and nonce both carry reportData.
func (NitroProvider) Evidence(ctx context.Context, rd wire.Hash) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := nsm.OpenDefaultSession()
	if err != nil {
		return nil, fmt.Errorf("nsm: %w", err)
	}
	defer s.Close()
	res, err := s.Send(&request.Attestation{UserData: rd[:], Nonce: rd[:]})
	if err != nil {
		return nil, fmt.Errorf("nsm attestation: %w", err)
	}
	if res.Error != "" || res.Attestation == nil {
		return nil, fmt.Errorf("nsm attestation: %s", res.Error)
	}
	return json.Marshal(map[string]any{"vendor": "nitro", "evidence": res.Attestation.Document})
}

// SealingKey implements Provider.
// Nitro has no local sealing primitive: ErrNoLocalSealing (use the key
// broker).
func (NitroProvider) SealingKey(context.Context, string) ([]byte, error) {
	return nil, fmt.Errorf("nitro sealing key: %w", ErrNoLocalSealing)
}
