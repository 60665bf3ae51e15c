//go:build !production

package attest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/nitro"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

// vcase is one verification: evidence, policy, time and expected binding.
type vcase struct {
	name   string
	env    []byte
	policy *attest.Policy
	at     time.Time
	expect *wire.Hash
	opts   attest.Options // CollateralDir defaults to the test collateral
}

func (v vcase) params() attest.VerifyParams {
	return attest.VerifyParams{Policy: v.policy, At: v.at, Expect: v.expect}
}

// cached is the cache state a case must meet when it runs on a warmed
// checker: it hits a verified entry of its vendor, finds one outside its
// window (expired), or neither is required.
type cached int

const (
	anyLookup cached = iota
	mustHit
	mustExpire
)

type cacheCase struct {
	vcase
	warm   *vcase // run first on the cached checker; must be accepted
	want   string // the failed check; "" accepted
	lookup cached
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func newCheckers(opts attest.Options) (cached, uncached *attest.Checker) {
	if opts.CollateralDir == "" {
		opts.CollateralDir = "testdata/tdx/collateral"
	}
	u := opts
	u.CacheEntries = -1
	return attest.NewChecker(opts), attest.NewChecker(u)
}

// same fails unless the two verifications gave the same Result (every
// check, detail, claim) and the same error.
func same(t *testing.T, what string, r1 *attest.Result, e1 error, r2 *attest.Result, e2 error) {
	t.Helper()
	if errText(e1) != errText(e2) || !reflect.DeepEqual(r1, r2) {
		var c1, c2 []attest.Check
		if r1 != nil {
			c1 = r1.Checks
		}
		if r2 != nil {
			c2 = r2.Checks
		}
		t.Fatalf("%s: uncached and cached verification differ\nuncached: %v\n%+v\ncached:   %v\n%+v", what, e1, c1, e2, c2)
	}
}

func vendorOf(t *testing.T, envelope []byte) string {
	e, err := attest.ParseEnvelope(envelope)
	if err != nil {
		return ""
	}
	return e.Vendor
}

// withCert replaces the envelope's first loose certificate by f(cert).
func withCert(t *testing.T, envelope []byte, f func([]byte) []byte) []byte {
	t.Helper()
	e, err := attest.ParseEnvelope(envelope)
	if err != nil {
		t.Fatal(err)
	}
	e.Certs[0] = f(append([]byte(nil), e.Certs[0]...))
	return e.Marshal()
}

// flipPEM changes one base64 character near the end of the first PEM
// certificate inside b (the PCK certificate's signature in a TDX quote).
func flipPEM(b []byte) []byte {
	i := bytes.Index(b, []byte("-----END CERTIFICATE-----"))
	for j := i - 12; j > 0; j-- {
		if c := b[j]; c >= 'A' && c <= 'Y' {
			b[j]++
			return b
		}
	}
	return b
}

func TestCachedMatchesUncached(t *testing.T) {
	tdxQuote := raw(t, "testdata/tdx/phala_tdx_quote")
	tdxEnv := envelope("tdx", tdxQuote)
	tdxWithCollateral := (&attest.Envelope{Vendor: "tdx", Evidence: tdxQuote, Collateral: json.RawMessage(raw(t, "testdata/tdx/collateral/b0c06f000000.json"))}).Marshal()
	vcek := envFiles(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der")
	vlek := envFiles(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der")
	nitroDoc := raw(t, "testdata/nitro/blocky_nitro_attestation.cbor")
	nitroEnv := envelope("nitro", nitroDoc)
	nitroTS := nitroIssued(t, nitroDoc)
	debugDoc := raw(t, "testdata/nitro/blocky_nitro_attestation_debug.cbor")
	selfSigned := raw(t, "testdata/nitro/blocky_selfsigned_attestation.cbor")
	smt := true
	provisional := &attest.Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}
	strict := &attest.Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt}}
	nitroPol := &attest.Policy{Version: 1, Nitro: &nitro.Policy{MaxAge: "1h"}}
	tdxMRTD, _ := attest.Template("Verified", "tdx")
	vcekOnly, err := snp.Roots(false)
	if err != nil {
		t.Fatal(err)
	}
	other := wire.Hash{0xa5, 0x5a} // a binding no fixture carries

	simTDX := simEvidence(t, "tdx", enclave.SimulatedOptions{}, simAt)
	simSNP := simEvidence(t, "snp", enclave.SimulatedOptions{}, simAt)
	simNitro := simEvidence(t, "nitro", enclave.SimulatedOptions{}, simAt)
	simNitroDoc, _ := attest.ParseEnvelope(simNitro)
	allow, prod := simPolicy(t, true), simPolicy(t, false)

	tdxOK := &vcase{name: "tdx ok", env: tdxEnv, at: pin(2025, 7, 1)}
	vcekOK := &vcase{name: "vcek ok", env: vcek, policy: provisional, at: pin(2025, 1, 1)}
	vlekOK := &vcase{name: "vlek ok", env: vlek, policy: provisional, at: pin(2025, 6, 1)}
	nitroOK := &vcase{name: "nitro ok", env: nitroEnv, at: nitroTS}
	simTDXOK := &vcase{name: "sim tdx ok", env: simTDX, policy: allow, at: simAt}
	simSNPOK := &vcase{name: "sim snp ok", env: simSNP, policy: allow, at: simAt}
	simNitroOK := &vcase{name: "sim nitro ok", env: simNitro, policy: allow, at: simAt}

	cases := []cacheCase{
		// TDX, real evidence (Phala's quote and collateral).
		{vcase: *tdxOK, warm: tdxOK, lookup: mustHit},
		{vcase: vcase{name: "tdx real: collateral in the envelope", env: tdxWithCollateral, at: pin(2025, 7, 1)}, warm: tdxOK, lookup: mustHit},
		{vcase: vcase{name: "tdx real: cached, then collateral expired", env: tdxEnv, at: pin(2026, 6, 1)}, warm: tdxOK, want: "tdx.collateral.expired", lookup: mustExpire},
		{vcase: vcase{name: "tdx real: cached, then before the TCB signing certificate", env: tdxEnv, at: pin(2015, 1, 1)}, warm: tdxOK, want: "tdx.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "tdx real v5: no matching TCB level", env: envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote_outdated")), at: pin(2026, 3, 1)}, want: "tdx.tcb_status"},
		{vcase: vcase{name: "tdx real: wrong MRTD", env: tdxEnv, policy: tdxMRTD, at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.mrtd", lookup: mustHit},
		{vcase: vcase{name: "tdx real: wrong binding", env: tdxEnv, at: pin(2025, 7, 1), expect: &other}, warm: tdxOK, want: "binding.report_data", lookup: mustHit},
		{vcase: vcase{name: "tdx real: tampered MRTD", env: withEvidence(t, tdxEnv, flip(0x30+0x88)), at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "tdx real: tampered REPORTDATA", env: withEvidence(t, tdxEnv, flip(0x30+0x208)), at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "tdx real: tampered quote signature", env: withEvidence(t, tdxEnv, flip(0x27c+5)), at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "tdx real: tampered QE report", env: withEvidence(t, tdxEnv, flip(0x27c+128+6+0x140)), at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "tdx real: tampered QE report signature", env: withEvidence(t, tdxEnv, flip(0x27c+128+6+384+7)), at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "tdx real: tampered PCK certificate", env: withEvidence(t, tdxEnv, flipPEM), at: pin(2025, 7, 1)}, warm: tdxOK, want: "tdx.chain"},
		{vcase: vcase{name: "tdx real: no collateral", env: tdxEnv, at: pin(2025, 7, 1), opts: attest.Options{CollateralDir: t.TempDir()}}, want: "tdx.collateral"},
		// SEV-SNP, real evidence (trustee's VCEK and VLEK reports).
		{vcase: *vcekOK, warm: vcekOK, lookup: mustHit},
		{vcase: *vlekOK, warm: vlekOK, lookup: mustHit},
		{vcase: vcase{name: "snp real: VCEK, authenticity only", env: vcek, at: pin(2025, 1, 1)}, warm: vcekOK, lookup: mustHit},
		{vcase: vcase{name: "snp real: provisional firmware refused", env: vcek, policy: strict, at: pin(2025, 1, 1)}, warm: vcekOK, want: "snp.tcb.provisional_firmware", lookup: mustHit},
		{vcase: vcase{name: "snp real: cached, then VLEK expired", env: vlek, policy: provisional, at: pin(2026, 6, 1)}, warm: vlekOK, want: "snp.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "snp real: cached, then VCEK expired", env: vcek, policy: provisional, at: pin(2033, 1, 1)}, warm: vcekOK, want: "snp.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "snp real: cached, then before the VCEK", env: vcek, policy: provisional, at: pin(2015, 1, 1)}, warm: vcekOK, want: "snp.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "snp real: wrong binding", env: vcek, policy: provisional, at: pin(2025, 1, 1), expect: &other}, warm: vcekOK, want: "binding.report_data", lookup: mustHit},
		{vcase: vcase{name: "snp real: tampered body", env: withEvidence(t, vcek, flip(0x90)), policy: provisional, at: pin(2025, 1, 1)}, warm: vcekOK, want: "snp.signature"},
		{vcase: vcase{name: "snp real: tampered REPORTDATA", env: withEvidence(t, vcek, flip(0x50)), policy: provisional, at: pin(2025, 1, 1)}, warm: vcekOK, want: "snp.signature"},
		{vcase: vcase{name: "snp real: tampered signature", env: withEvidence(t, vcek, flip(0x2A0+3)), policy: provisional, at: pin(2025, 1, 1)}, warm: vcekOK, want: "snp.signature"},
		{vcase: vcase{name: "snp real: tampered VCEK certificate", env: withCert(t, vcek, flip(-3)), policy: provisional, at: pin(2025, 1, 1)}, warm: vcekOK, want: "snp.chain"},
		{vcase: vcase{name: "snp real: tampered VLEK certificate", env: withCert(t, vlek, flip(-3)), policy: provisional, at: pin(2025, 6, 1)}, warm: vlekOK, want: "snp.chain"},
		{vcase: vcase{name: "snp real: missing certificate", env: envFiles(t, "snp", "trustee_test-report.bin"), at: pin(2025, 1, 1)}, warm: vcekOK, want: "snp.certs"},
		{vcase: vcase{name: "snp real: VLEK against VCEK-only roots", env: vlek, at: pin(2025, 6, 1), opts: attest.Options{SNPRoots: vcekOnly}}, want: "snp.chain"},
		// Nitro, real evidence (blocky's documents).
		{vcase: *nitroOK, warm: nitroOK, lookup: mustHit},
		{vcase: vcase{name: "nitro real: with a policy", env: nitroEnv, policy: nitroPol, at: nitroTS.Add(30 * time.Minute)}, warm: nitroOK, lookup: mustHit},
		{vcase: vcase{name: "nitro real: too old for the policy", env: nitroEnv, policy: &attest.Policy{Version: 1, Nitro: &nitro.Policy{MaxAge: "1m"}}, at: nitroTS.Add(30 * time.Minute)}, warm: nitroOK, want: "nitro.timestamp", lookup: mustHit},
		{vcase: vcase{name: "nitro real: wrong binding", env: nitroEnv, at: nitroTS, expect: &other}, warm: nitroOK, want: "binding.report_data", lookup: mustHit},
		{vcase: vcase{name: "nitro real: debug enclave", env: envelope("nitro", debugDoc), at: nitroIssued(t, debugDoc)}, warm: nitroOK, want: "nitro.debug"},
		{vcase: vcase{name: "nitro real: cached, then leaf expired", env: nitroEnv, at: nitroTS.Add(4 * time.Hour)}, warm: nitroOK, want: "nitro.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "nitro real: cached, then before the leaf", env: nitroEnv, at: nitroTS.Add(-24 * time.Hour)}, warm: nitroOK, want: "nitro.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "nitro real: cached, then today", env: nitroEnv, at: pin(2026, 6, 1)}, warm: nitroOK, want: "nitro.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "nitro real: tampered payload", env: withEvidence(t, nitroEnv, flipInModuleID(t, nitroDoc)), at: nitroTS}, warm: nitroOK, want: "nitro.signature"},
		{vcase: vcase{name: "nitro real: tampered signature", env: withEvidence(t, nitroEnv, flip(-5)), at: nitroTS}, warm: nitroOK, want: "nitro.signature"},
		{vcase: vcase{name: "nitro real: self-signed", env: envelope("nitro", selfSigned), at: nitroIssued(t, selfSigned)}, warm: nitroOK, want: "nitro.chain"},
		// Simulated evidence of every vendor.
		{vcase: *simTDXOK, warm: simTDXOK, lookup: mustHit},
		{vcase: *simSNPOK, warm: simSNPOK, lookup: mustHit},
		{vcase: *simNitroOK, warm: simNitroOK, lookup: mustHit},
		{vcase: vcase{name: "sim tdx: cached, then production policy", env: simTDX, policy: prod, at: simAt}, warm: simTDXOK, want: "tdx.simulated"},
		{vcase: vcase{name: "sim snp: cached, then production policy", env: simSNP, policy: prod, at: simAt}, warm: simSNPOK, want: "snp.simulated", lookup: mustHit},
		{vcase: vcase{name: "sim nitro: cached, then production policy", env: simNitro, policy: prod, at: simAt}, warm: simNitroOK, want: "nitro.simulated", lookup: mustHit},
		{vcase: vcase{name: "sim snp: cached, then authenticity only", env: simSNP, at: simAt}, warm: simSNPOK, want: "snp.simulated", lookup: mustHit},
		{vcase: vcase{name: "sim tdx: tampered body", env: withEvidence(t, simTDX, flip(0x30+0x10)), policy: allow, at: simAt}, warm: simTDXOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "sim tdx: tampered signature", env: withEvidence(t, simTDX, flip(0x27c+40)), policy: allow, at: simAt}, warm: simTDXOK, want: "tdx.signature", lookup: mustHit},
		{vcase: vcase{name: "sim snp: tampered body", env: withEvidence(t, simSNP, flip(0x90)), policy: allow, at: simAt}, warm: simSNPOK, want: "snp.signature"},
		{vcase: vcase{name: "sim nitro: tampered payload", env: withEvidence(t, simNitro, flipInModuleID(t, simNitroDoc.Evidence)), policy: allow, at: simAt}, warm: simNitroOK, want: "nitro.signature"},
		{vcase: vcase{name: "sim nitro: tampered signature", env: withEvidence(t, simNitro, flip(-5)), policy: allow, at: simAt}, warm: simNitroOK, want: "nitro.signature"},
		{vcase: vcase{name: "sim tdx: cached, then PCK certificate expired", env: simTDX, policy: allow, at: simAt.AddDate(8, 0, 0)}, warm: simTDXOK, want: "tdx.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "sim tdx: cached, then collateral expired", env: simTDX, policy: allow, at: simAt.AddDate(0, 2, 0)}, warm: simTDXOK, want: "tdx.collateral.expired", lookup: mustExpire},
		{vcase: vcase{name: "sim nitro: cached, then leaf expired", env: simNitro, policy: allow, at: simAt.Add(4 * time.Hour)}, warm: simNitroOK, want: "nitro.chain.validity", lookup: mustExpire},
		{vcase: vcase{name: "sim tdx: debug TD", env: simEvidence(t, "tdx", enclave.SimulatedOptions{Debug: true}, simAt), policy: allow, at: simAt}, warm: simTDXOK, want: "tdx.debug"},
		{vcase: vcase{name: "sim snp: debug guest policy", env: simEvidence(t, "snp", enclave.SimulatedOptions{Debug: true}, simAt), policy: allow, at: simAt}, warm: simSNPOK, want: "snp.guest_policy.debug", lookup: mustHit},
		{vcase: vcase{name: "sim nitro: debug enclave", env: simEvidence(t, "nitro", enclave.SimulatedOptions{Debug: true}, simAt), policy: allow, at: simAt}, warm: simNitroOK, want: "nitro.debug"},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, u := newCheckers(tc.opts)
			if tc.warm != nil {
				if _, err := c.VerifyWith(ctx, tc.warm.env, tc.warm.params()); err != nil {
					t.Fatalf("warm-up %s refused: %v", tc.warm.name, err)
				}
			}
			vendor := vendorOf(t, tc.env)
			before := c.CacheStats()[vendor]
			r2, e2 := c.VerifyWith(ctx, tc.env, tc.params())
			after := c.CacheStats()[vendor]
			r1, e1 := u.VerifyWith(ctx, tc.env, tc.params())
			if got := attest.FailedCheck(e1); got != tc.want {
				t.Fatalf("uncached: failed check %q, want %q (%v)", got, tc.want, e1)
			}
			same(t, "after warm-up", r1, e1, r2, e2)
			switch tc.lookup {
			case mustHit:
				if after.Hits == before.Hits {
					t.Fatalf("no cache hit: %+v", after)
				}
			case mustExpire:
				if after.Expired == before.Expired || after.Hits != before.Hits {
					t.Fatalf("the cached entry was not found outside its window: before %+v after %+v", before, after)
				}
			}
			// Again: the first cached run may have stored an entry.
			r3, e3 := c.VerifyWith(ctx, tc.env, tc.params())
			same(t, "second cached run", r1, e1, r3, e3)
			if u.CacheLen()[vendor] != 0 {
				t.Fatal("the uncached checker cached")
			}
		})
	}
}

// TestCachedMatchesUncachedByteFlips flips one byte at a time through real
// evidence and requires a warmed cache and no cache to agree on each.
func TestCachedMatchesUncachedByteFlips(t *testing.T) {
	stride := 7
	if testing.Short() {
		stride = 61
	}
	nitroDoc := raw(t, "testdata/nitro/blocky_nitro_attestation.cbor")
	smt := true
	for _, tc := range []struct {
		name   string
		env    []byte
		policy *attest.Policy
		at     time.Time
		stride int
	}{
		{"tdx", envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote")), nil, pin(2025, 7, 1), 3 * stride},
		{"snp", envFiles(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der"), &attest.Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}, pin(2025, 1, 1), stride},
		{"nitro", envelope("nitro", nitroDoc), nil, nitroIssued(t, nitroDoc), 5 * stride},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c, u := newCheckers(attest.Options{})
			p := attest.VerifyParams{Policy: tc.policy, At: tc.at}
			if _, err := c.VerifyWith(ctx, tc.env, p); err != nil {
				t.Fatalf("warm-up refused: %v", err)
			}
			e, _ := attest.ParseEnvelope(tc.env)
			refused := map[string]int{}
			for off := 0; off < len(e.Evidence); off += tc.stride {
				env := withEvidence(t, tc.env, flip(off))
				r1, e1 := u.VerifyWith(ctx, env, p)
				r2, e2 := c.VerifyWith(ctx, env, p)
				same(t, fmt.Sprintf("byte %#x flipped", off), r1, e1, r2, e2)
				refused[attest.FailedCheck(e1)]++
			}
			t.Logf("%d flips: %v; cache %+v", (len(e.Evidence)+tc.stride-1)/tc.stride, refused, c.CacheStats()[tc.name])
		})
	}
}

// Failed verifications store nothing; a success stores one entry per
// chain; the bound holds.
func TestCacheStoresOnlySuccessesAndIsBounded(t *testing.T) {
	ctx := context.Background()
	smt := true
	provisional := &attest.Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}
	vcek := envFiles(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der")
	vlek := envFiles(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der")
	c := attest.NewChecker(attest.Options{CollateralDir: "testdata/tdx/collateral", CacheEntries: 1})
	for _, bad := range []vcase{
		{env: withEvidence(t, vcek, flip(0x90)), at: pin(2025, 1, 1)},                       // signature
		{env: withCert(t, vcek, flip(-3)), at: pin(2025, 1, 1)},                             // chain
		{env: vcek, at: pin(2033, 1, 1)},                                                    // expired
		{env: envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote")), at: pin(2026, 6, 1)}, // collateral expired
		{env: envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote_outdated")), at: pin(2026, 3, 1)},
		{env: withEvidence(t, envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote")), flip(0x30+0x88)), at: pin(2025, 7, 1)},
		{env: withEvidence(t, envelope("nitro", raw(t, "testdata/nitro/blocky_nitro_attestation.cbor")), flip(-5)), at: nitroIssued(t, raw(t, "testdata/nitro/blocky_nitro_attestation.cbor"))},
		{env: envelope("nitro", raw(t, "testdata/nitro/blocky_nitro_attestation.cbor")), at: pin(2026, 6, 1)},
	} {
		if _, err := c.VerifyWith(ctx, bad.env, bad.params()); err == nil {
			t.Fatal("accepted")
		}
	}
	for v, n := range c.CacheLen() {
		if n != 0 {
			t.Fatalf("%s: %d entries stored by refused verifications", v, n)
		}
	}
	for _, ok := range []vcase{{env: vcek, policy: provisional, at: pin(2025, 1, 1)}, {env: vlek, policy: provisional, at: pin(2025, 6, 1)}} {
		if _, err := c.VerifyWith(ctx, ok.env, ok.params()); err != nil {
			t.Fatal(err)
		}
		if n := c.CacheLen()[attest.VendorSNP]; n != 1 {
			t.Fatalf("%d SNP chains held, bound 1", n)
		}
	}
	if s := c.CacheStats()[attest.VendorSNP]; s.Evictions != 1 {
		t.Fatalf("stats %+v, want one eviction", s)
	}
	// Evicted: verified again, and still accepted.
	if _, err := c.VerifyWith(ctx, vcek, attest.VerifyParams{Policy: provisional, At: pin(2025, 1, 1)}); err != nil {
		t.Fatal(err)
	}
}

// Many goroutines verify positive and negative evidence of every vendor
// through one small cache (evicting all the time) and must each get the
// uncached answer. Run with -race.
func TestCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	smt := true
	provisional := &attest.Policy{Version: 1, SNP: &snp.Policy{SMTAllowed: &smt, AllowProvisionalFirmware: true}}
	nitroDoc := raw(t, "testdata/nitro/blocky_nitro_attestation.cbor")
	tdxEnv := envelope("tdx", raw(t, "testdata/tdx/phala_tdx_quote"))
	vcek := envFiles(t, "snp", "trustee_test-report.bin", "trustee_test-vcek.der")
	work := []vcase{
		{env: tdxEnv, at: pin(2025, 7, 1)},
		{env: tdxEnv, at: pin(2026, 6, 1)},
		{env: withEvidence(t, tdxEnv, flip(0x27c+5)), at: pin(2025, 7, 1)},
		{env: vcek, policy: provisional, at: pin(2025, 1, 1)},
		{env: envFiles(t, "snp", "trustee_test-vlek-report.bin", "trustee_test-vlek.der"), policy: provisional, at: pin(2025, 6, 1)},
		{env: withEvidence(t, vcek, flip(0x2A3)), policy: provisional, at: pin(2025, 1, 1)},
		{env: vcek, policy: provisional, at: pin(2033, 1, 1)},
		{env: envelope("nitro", nitroDoc), at: nitroIssued(t, nitroDoc)},
		{env: envelope("nitro", nitroDoc), at: nitroIssued(t, nitroDoc).Add(4 * time.Hour)},
		{env: withEvidence(t, envelope("nitro", nitroDoc), flip(-5)), at: nitroIssued(t, nitroDoc)},
		{env: simEvidence(t, "snp", enclave.SimulatedOptions{}, simAt), policy: simPolicy(t, true), at: simAt},
		{env: simEvidence(t, "tdx", enclave.SimulatedOptions{}, simAt), policy: simPolicy(t, true), at: simAt},
	}
	c, u := newCheckers(attest.Options{CacheEntries: 2})
	type outcome struct {
		r   *attest.Result
		err string
	}
	want := make([]outcome, len(work))
	for i, w := range work {
		r, err := u.VerifyWith(ctx, w.env, w.params())
		want[i] = outcome{r, errText(err)}
	}
	const workers, rounds = 16, 6
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < rounds*len(work); i++ {
				j := (i + g) % len(work)
				r, err := c.VerifyWith(ctx, work[j].env, work[j].params())
				if errText(err) != want[j].err || !reflect.DeepEqual(r, want[j].r) {
					errs <- fmt.Errorf("goroutine %d, case %d: got %v, want %s", g, j, err, want[j].err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for v, n := range c.CacheLen() {
		if n > 2 {
			t.Errorf("%s: %d entries, bound 2", v, n)
		}
	}
}
