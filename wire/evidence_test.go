package wire_test

import (
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestClaimEvidenceDigestRefuses: the digest an enrolment signs is read
// strictly: unknown claim fields, trailing data, an envelope without vendor
// or evidence and an oversized claim are refused with the reason; the GPU
// part changes the digest.
func TestClaimEvidenceDigestRefuses(t *testing.T) {
	ok := `{"envelope":{"vendor":"snp","evidence":"AAE="},"nonce":"AA==","program_hash":"` + strings.Repeat("00", 32) + `"}`
	gpu := `{"envelope":{"vendor":"snp","evidence":"AAE=","gpu":{"vendor":"nvidia","report":"Ag=="}},"nonce":"AA==","program_hash":"` + strings.Repeat("00", 32) + `"}`
	a, err := wire.ClaimEvidenceDigest([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.ClaimEvidenceDigest([]byte(gpu))
	if err != nil || a == b {
		t.Fatalf("gpu part: %v, same digest %v", err, a == b)
	}
	for name, c := range map[string]struct{ claim, want string }{
		"unknown field": {`{"envelope":{"vendor":"snp","evidence":"AAE="},"extra":1}`, "unknown field"},
		"trailing":      {ok + `{}`, "trailing"},
		"no vendor":     {`{"envelope":{"evidence":"AAE="}}`, "vendor and evidence"},
		"no evidence":   {`{"envelope":{"vendor":"snp"}}`, "vendor and evidence"},
		"not json":      {`nope`, "attestation claim"},
		"too large":     {`{"envelope":"` + strings.Repeat("A", wire.MaxClaimBytes) + `"}`, "limit"},
	} {
		if _, err := wire.ClaimEvidenceDigest([]byte(c.claim)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// FuzzClaimEvidenceDigest: any input either is refused or gives a digest
// that is stable (the same bytes give the same digest).
func FuzzClaimEvidenceDigest(f *testing.F) {
	f.Add([]byte(`{"envelope":{"vendor":"snp","evidence":"AAE="},"nonce":"AA==","program_hash":"` + strings.Repeat("00", 32) + `"}`))
	f.Add([]byte(`{"envelope":{"vendor":"tdx","evidence":"BAQE","gpu":{"vendor":"nvidia","report":"CQk="}}}`))
	f.Add([]byte(`{"envelope":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d1, err := wire.ClaimEvidenceDigest(b)
		if err != nil {
			return
		}
		if d2, _ := wire.ClaimEvidenceDigest(b); d1 != d2 {
			t.Fatal("digest not stable")
		}
	})
}
