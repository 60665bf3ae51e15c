package enclave

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/go-sev-guest/client"
	labi "github.com/google/go-sev-guest/client/linuxabi"
	sevtest "github.com/google/go-sev-guest/testing"
)

func TestSNPSealingKey(t *testing.T) {
	ctx := context.Background()
	// The library's fake sev-guest device answers MSG_KEY_REQ for the
	// exact request it is told about: VMRK (root key select 1), the
	// sealing fields, VMPL 0, GUEST_SVN and TCB version 0.
	req := &labi.SnpDerivedKeyReqABI{RootKeySelect: 1, GuestFieldSelect: SNPSealingFields.ABI()}
	derived := bytes.Repeat([]byte{0x5a}, 32)
	dev := &sevtest.Device{Keys: map[string][]byte{sevtest.DerivedKeyRequestToString(req): derived}}
	if err := dev.Open("/dev/sev-guest"); err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	a, err := SNPSealingKey(ctx, dev, 0, "label-a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SNPSealingKey(ctx, dev, 0, "label-b")
	a2, _ := SNPSealingKey(ctx, dev, 0, "label-a")
	if len(a) != 32 || bytes.Equal(a, b) || !bytes.Equal(a, a2) || bytes.Equal(a, derived) {
		t.Fatalf("keys a=%x b=%x a2=%x", a, b, a2)
	}
	// Another VMPL is another request (unanswered here): no key.
	if _, err := SNPSealingKey(ctx, dev, 1, "label-a"); err == nil {
		t.Fatal("unmapped request answered")
	}
	if SNPSealingFields.ABI()&(1<<5|1<<4) != 0 {
		t.Fatal("sealing key must not depend on TCB version or GUEST_SVN")
	}
	var _ client.Device = dev
}

func TestNoLocalSealing(t *testing.T) {
	for _, p := range []Provider{NitroProvider{}, &TSMProvider{vendor: "tdx"}} {
		_, err := p.SealingKey(context.Background(), "x")
		if !errors.Is(err, ErrNoLocalSealing) {
			t.Fatalf("%s: %v", p.Vendor(), err)
		}
	}
}
