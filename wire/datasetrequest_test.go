package wire

import (
	"strings"
	"testing"
)

func TestDatasetRequestRoundTrip(t *testing.T) {
	sig := make([]byte, 64)
	sig[0] = 0xcd
	for _, in := range []DatasetRequest{
		{DID: "did:tenzro:human:z6Mkabc", Op: DatasetOpImport, CID: "bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu", Expires: 1, Nonce: 0, Sig: sig},
		{DID: "did:tenzro:machine:z6Mkdef", Op: DatasetOpRemove, CID: "QmAccept", Expires: 1764300000, Nonce: 18446744073709551615, Sig: sig},
		{DID: "did:tenzro:machine:z6Mkdef", Op: DatasetOpFetch, CID: "QmAccept", Expires: 7, Nonce: 42, Sig: sig},
	} {
		got, err := ParseDatasetRequest(in.String())
		if err != nil || got.String() != in.String() {
			t.Fatalf("%q → %+v, %v", in.String(), got, err)
		}
	}
	good := "v1 did:tenzro:human:z6Mkabc remove QmAccept 20 7 " + strings.Repeat("ab", 64)
	if _, err := ParseDatasetRequest(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"", "v2" + good[2:], strings.Replace(good, " 20 ", " 020 ", 1), strings.Replace(good, " 20 ", " -20 ", 1),
		strings.Replace(good, " remove ", " delete ", 1), strings.Replace(good, " remove ", " Remove ", 1),
		strings.Replace(good, " QmAccept ", " ipfs://QmAccept ", 1), strings.Replace(good, " QmAccept ", " Qm/Accept ", 1),
		strings.Replace(good, " QmAccept ", " "+strings.Repeat("a", 129)+" ", 1), strings.Replace(good, "did:tenzro", "did:web", 1),
		strings.Replace(good, " remove ", "  remove ", 1), strings.ToUpper(good[len(good)-128:]), good + " x", good[:len(good)-2],
		strings.Replace(good, " 20 ", " 18446744073709551616 ", 1), good + strings.Repeat("a", 600),
		strings.Replace(good, " 7 ", " 07 ", 1), strings.Replace(good, " 7 ", " ", 1), strings.Replace(good, " 7 ", " x ", 1),
	} {
		if _, err := ParseDatasetRequest(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// The preimage is fixed: a change here changes every client's signature.
func TestDatasetRequestPreimageVector(t *testing.T) {
	got := SHA256(DatasetRequestPreimage("tenzro-dev", DatasetOpRemove, "QmAccept", "did:tenzro:human:z6Mkabc", 1764300000, 7))
	const want = "15fb467bf8d8401321f74eec046ee1b6bad9259a032edac9a3520badad43a279"
	if got.String() != want {
		t.Fatalf("preimage digest %s, want %s", got, want)
	}
}

func FuzzParseDatasetRequest(f *testing.F) {
	f.Add("v1 did:tenzro:human:z6Mkabc remove QmAccept 20 7 " + strings.Repeat("ab", 64))
	f.Add("v1 did:tenzro:x import bafy 0 0 " + strings.Repeat("00", 64))
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDatasetRequest(s)
		if err != nil {
			return
		}
		// Whatever parses renders back to the same header.
		if d.String() != s {
			t.Fatalf("%q renders as %q", s, d.String())
		}
	})
}
