package enclave

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/google/go-sev-guest/client"
	"golang.org/x/crypto/hkdf"
)

// ErrNoLocalSealing is returned by SealingKey on TDX and Nitro: neither
// gives a guest a key derived from its measurement (TDX has no TD
// equivalent of SGX's EGETKEY; the Nitro Security Module has no key
// derivation call). Keys that must survive a restart there are held by the
// key broker and released to the enclave's evidence (Broker.Release).
var ErrNoLocalSealing = errors.New("no local sealing primitive on this TEE: use the key broker (enclave.Broker) to release keys to this enclave's evidence")

// SNPSealingFields is what the SEV-SNP sealing key is derived from, besides
// the VM root key: the launch measurement, guest policy, image ID and
// family ID. GUEST_SVN and the TCB version are left out, so a firmware
// update does not make sealed keys unreadable; a different image or policy
// does.
var SNPSealingFields = client.GuestFieldSelect{Measurement: true, GuestPolicy: true, ImageID: true, FamilyID: true}

// SNPSealingKey derives a 32-byte sealing key for label with MSG_KEY_REQ
// through go-sev-guest: the AMD secure processor derives 32 bytes from the
// VM root key (VMRK, not the chip-wide VCEK) mixed with SNPSealingFields at
// VMPL vmpl, and HKDF-SHA256 binds the label.
func SNPSealingKey(ctx context.Context, dev client.Device, vmpl uint32, label string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp, err := client.GetDerivedKeyAcknowledgingItsLimitations(dev, &client.SnpDerivedKeyReq{
		UseVCEK: false, GuestFieldSelect: SNPSealingFields, Vmpl: vmpl,
	})
	if err != nil {
		return nil, fmt.Errorf("sev-snp MSG_KEY_REQ: %w", err)
	}
	if resp.Status != 0 {
		return nil, fmt.Errorf("sev-snp MSG_KEY_REQ: status 0x%x", resp.Status)
	}
	k := make([]byte, 32)
	if _, err := io.ReadFull(hkdf.New(sha256.New, resp.Data[:], nil, []byte("tenzro/enclave/snp-seal/v1/"+label)), k); err != nil {
		return nil, err
	}
	return k, nil
}
