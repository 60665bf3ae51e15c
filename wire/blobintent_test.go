package wire

import (
	"strings"
	"testing"
)

func TestBlobIntentRoundTrip(t *testing.T) {
	sig := make([]byte, 64)
	sig[0] = 0xab
	for _, in := range []BlobIntent{
		{DID: "did:tenzro:human:z6Mkabc", Size: 0, Expires: 1, Sig: sig},
		{DID: "did:tenzro:human:z6Mkabc", Size: 1 << 40, Expires: 1764300000, Task: "run-7", Sig: sig},
	} {
		got, err := ParseBlobIntent(in.String())
		if err != nil || got.String() != in.String() {
			t.Fatalf("%q → %+v, %v", in.String(), got, err)
		}
	}
	good := "v1 did:tenzro:human:z6Mkabc 10 20 - " + strings.Repeat("ab", 64)
	if _, err := ParseBlobIntent(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"", "v2" + good[2:], strings.Replace(good, " 10 ", " 010 ", 1), strings.Replace(good, " 10 ", " +10 ", 1),
		strings.Replace(good, " 10 ", "  10 ", 1), strings.Replace(good, "did:tenzro", "did:web", 1),
		strings.Replace(good, " - ", "  ", 1), strings.ToUpper(good[len(good)-128:]), good + " x", good[:len(good)-2],
		strings.Replace(good, " 20 ", " 18446744073709551616 ", 1), good + strings.Repeat("a", 600),
	} {
		if _, err := ParseBlobIntent(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// The preimage is fixed: a change here changes every client's signature
// (trainer/tests/test_blobs.py checks the same bytes).
func TestBlobIntentPreimageVector(t *testing.T) {
	var h Hash
	for i := range h {
		h[i] = byte(i)
	}
	got := SHA256(BlobIntentPreimage("tenzro-dev", h, 1234, "did:tenzro:human:z6Mkabc", 1764300000, "run-7"))
	const want = "6da14de647a4a1ccc0f8fea0569a83a8253b01d892a5e8544cf9b60e63b5a468"
	if got.String() != want {
		t.Fatalf("preimage digest %s, want %s", got, want)
	}
}

func FuzzParseBlobIntent(f *testing.F) {
	f.Add("v1 did:tenzro:human:z6Mkabc 10 20 - " + strings.Repeat("ab", 64))
	f.Add("v1 did:tenzro:x 0 0 task " + strings.Repeat("00", 64))
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBlobIntent(s)
		if err != nil {
			return
		}
		// Whatever parses renders back to the same header.
		if b.String() != s {
			t.Fatalf("%q renders as %q", s, b.String())
		}
	})
}
