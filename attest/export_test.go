package attest

import (
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/snp"
)

type (
	snpPolicy   = snp.Policy
	nitroPolicy = nitro.Policy
)

var snpRoots = snp.Roots

func nitroTime(t testing.TB, raw []byte) time.Time {
	ev, err := nitro.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ev.IssuedAt
}

var _ = os.ReadFile

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}
