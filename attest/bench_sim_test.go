//go:build !production

package attest_test

import (
	"context"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

func BenchmarkVerifySimulated(b *testing.B) {
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, vendor := range []string{"tdx", "snp", "nitro"} {
		b.Run(vendor, func(b *testing.B) {
			p, err := enclave.NewSimulated(vendor, b.TempDir(), func() time.Time { return at })
			if err != nil {
				b.Fatal(err)
			}
			ev, err := p.Evidence(context.Background(), wire.SHA256([]byte("bench")))
			if err != nil {
				b.Fatal(err)
			}
			pol, err := attest.ParsePolicy([]byte(`{"version":1,"allow_simulated":true,"tdx":{},"snp":{"smt_allowed":true},"nitro":{"max_age":"5m"}}`), "Verified")
			if err != nil {
				b.Fatal(err)
			}
			c := attest.NewChecker(attest.Options{})
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := c.Verify(context.Background(), ev, pol, at, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
