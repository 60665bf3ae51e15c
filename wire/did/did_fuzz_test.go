package did_test

import (
	"bytes"
	"testing"

	"github.com/tenzro/train/wire/did"
)

// FuzzParse: did.Parse never panics, and what it accepts re-encodes to the
// exact input (the parse is strict: one spelling per key).
func FuzzParse(f *testing.F) {
	k, _ := did.FromSeed(did.KindMachine, bytes.Repeat([]byte{7}, 32))
	h, _ := did.FromSeed(did.KindHuman, bytes.Repeat([]byte{9}, 32))
	for _, s := range []string{k.DID.String(), h.DID.String(), "did:tenzro:machine:z", "did:tenzro:robot:z6Mk", "did:key:z6Mk", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := did.Parse(s)
		if err != nil {
			return
		}
		if d.String() != s {
			t.Fatalf("Parse(%q) re-encodes to %q", s, d.String())
		}
		if err := did.Verify(s, []byte("m"), make([]byte, 64)); err == nil {
			t.Fatal("a zero signature verified")
		}
	})
}
