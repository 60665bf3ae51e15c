//go:build !production

package enclave

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/client"
	labi "github.com/google/go-sev-guest/client/linuxabi"
	sevtest "github.com/google/go-sev-guest/testing"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/snp"
	"github.com/tenzro/train/wire"
)

// fakeSEVGuest is go-sev-guest's fake sev-guest device signing with the
// simulated AMD chain of a product line, answering report requests for
// the report data it is told about. Certs is padded as the driver pads its
// page-sized buffer.
type fakeSEVGuest struct {
	dev  *sevtest.Device
	opts SimulatedOptions
}

func newFakeSEVGuest(t *testing.T, line string, withCerts bool) *fakeSEVGuest {
	t.Helper()
	signer, err := simroots.SNPSigner(simroots.SNPProductNames[line])
	if err != nil {
		t.Fatal(err)
	}
	dev := &sevtest.Device{ReportDataRsp: map[string]any{}, Keys: map[string][]byte{}, Signer: signer}
	if withCerts {
		table, err := signer.CertTableBytes()
		if err != nil {
			t.Fatal(err)
		}
		dev.Certs = append(table, make([]byte, 4096)...)
	}
	return &fakeSEVGuest{dev: dev, opts: SimulatedOptions{SNPProductLine: line}}
}

// answer makes the device answer a request for asked with a report whose
// body binds bound.
func (f *fakeSEVGuest) answer(asked, bound [64]byte) {
	resp := &sevtest.GetReportResponse{}
	copy(resp.Resp.Data[:], simSNPReport(bound, f.opts))
	f.dev.ReportDataRsp[hex.EncodeToString(asked[:])] = resp
}

func (f *fakeSEVGuest) provider() *SEVGuestProvider {
	return &SEVGuestProvider{Path: "/dev/sev-guest", open: func(path string) (client.Device, error) {
		if err := f.dev.Open(path); err != nil {
			return nil, err
		}
		return f.dev, nil
	}}
}

func padded(rd wire.Hash) (in [64]byte) {
	copy(in[:], rd[:])
	return in
}

func TestSEVGuestProviderEvidence(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, line := range []string{"Milan", "Genoa", "Turin"} {
		t.Run(line, func(t *testing.T) {
			f := newFakeSEVGuest(t, line, true)
			p := f.provider()
			rd := attest.ReportData(wire.SHA256([]byte("prog")), 1, wire.ContentHash([]byte("model")), "did:tenzro:machine:x", []byte("nonce"), wire.ContentHash([]byte("payload")))
			f.answer(padded(rd), padded(rd)) // answered only for rd ‖ 32 zero bytes
			ev, err := p.Evidence(ctx, rd)
			if err != nil {
				t.Fatal(err)
			}
			env, err := attest.ParseEnvelope(ev)
			if err != nil {
				t.Fatal(err)
			}
			if env.Vendor != attest.VendorSNP || len(env.Evidence) != abi.ReportSize || len(env.CertTable) == 0 {
				t.Fatalf("envelope: vendor %q, report %d bytes, table %d bytes", env.Vendor, len(env.Evidence), len(env.CertTable))
			}
			if len(env.CertTable) >= len(f.dev.Certs) {
				t.Fatalf("certificate table not trimmed: %d of %d bytes", len(env.CertTable), len(f.dev.Certs))
			}
			parsed, err := snp.Parse(env.Evidence, env.CertTable, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := padded(rd); !bytes.Equal(parsed.Report.GetReportData(), want[:]) || len(parsed.Chain.GetVcekCert()) == 0 {
				t.Fatalf("report data %x, VCEK %d bytes", parsed.Report.GetReportData(), len(parsed.Chain.GetVcekCert()))
			}
			// The verifier accepts it under the simulated roots only.
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, rd); err != nil {
				t.Fatalf("accept: %v", err)
			}
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(false), ev, rd); !refusedAs(err, "snp.simulated") {
				t.Fatalf("without allow_simulated: %v", err)
			}
		})
	}
}

func TestSEVGuestProviderFaults(t *testing.T) {
	ctx := context.Background()
	rd := wire.SHA256([]byte("binding"))
	other := wire.SHA256([]byte("something else"))
	t.Run("report binds other data", func(t *testing.T) {
		f := newFakeSEVGuest(t, "Milan", true)
		f.answer(padded(rd), padded(other))
		if _, err := f.provider().Evidence(ctx, rd); err == nil || !strings.Contains(err.Error(), "REPORT_DATA differs") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("device refuses", func(t *testing.T) {
		f := newFakeSEVGuest(t, "Milan", true) // no answer programmed
		if _, err := f.provider().Evidence(ctx, rd); err == nil {
			t.Fatal("evidence without a report")
		}
		if f.dev.Open("") != nil { // the provider closed the device
			t.Fatal("device left open")
		}
	})
	t.Run("no certificate table", func(t *testing.T) {
		f := newFakeSEVGuest(t, "Milan", false)
		f.answer(padded(rd), padded(rd))
		ev, err := f.provider().Evidence(ctx, rd)
		if err != nil {
			t.Fatal(err)
		}
		env, err := attest.ParseEnvelope(ev)
		if err != nil || len(env.CertTable) != 0 {
			t.Fatalf("envelope: %v, table %d bytes", err, len(env.CertTable))
		}
		// Without an endorsement key the verifier fails closed.
		if _, err := attest.NewChecker(attest.Options{}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, rd); err == nil {
			t.Fatal("report without certificates accepted")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		f := newFakeSEVGuest(t, "Milan", true)
		f.answer(padded(rd), padded(rd))
		c, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := f.provider().Evidence(c, rd); err == nil {
			t.Fatal("cancelled context ignored")
		}
	})
}

func TestSEVGuestProviderCustody(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	f := newFakeSEVGuest(t, "Milan", true)
	req := &labi.SnpDerivedKeyReqABI{RootKeySelect: 1, GuestFieldSelect: SNPSealingFields.ABI()}
	f.dev.Keys[sevtest.DerivedKeyRequestToString(req)] = bytes.Repeat([]byte{0x33}, 32)
	p := f.provider()
	// The custody's key is random, so the device answers any key binding
	// through a wrapper that programs the answer for each request.
	ap := &answeringSEVGuest{SEVGuestProvider: p, f: f}
	path := filepath.Join(t.TempDir(), "syncer.sealed")
	kc, err := NewKeyCustody(ctx, ap, path)
	if err != nil {
		t.Fatal(err)
	}
	if !kc.Sealed() {
		t.Fatal("SEV-SNP custody is not sealed")
	}
	kc2, err := NewKeyCustody(ctx, ap, path)
	if err != nil || kc2.DID() != kc.DID() {
		t.Fatalf("reload: %v", err)
	}
	krd := attest.KeyReportData(PurposeSyncerKey, kc.PublicKey(), nil)
	if _, err := attest.NewChecker(attest.Options{Clock: func() time.Time { return now }}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), kc.Evidence(), krd); err != nil {
		t.Fatalf("syncer key evidence: %v", err)
	}
}

// answeringSEVGuest programs the fake device for each request before
// passing it to the provider (the fake answers only known report data).
type answeringSEVGuest struct {
	*SEVGuestProvider
	f *fakeSEVGuest
}

func (a *answeringSEVGuest) Evidence(ctx context.Context, rd wire.Hash) ([]byte, error) {
	a.f.answer(padded(rd), padded(rd))
	return a.SEVGuestProvider.Evidence(ctx, rd)
}

func TestDetect(t *testing.T) {
	dir := t.TempDir()
	saved := [4]string{TSMReportDir, TDXGuestDev, SEVGuestDev, NSMDev}
	t.Cleanup(func() { TSMReportDir, TDXGuestDev, SEVGuestDev, NSMDev = saved[0], saved[1], saved[2], saved[3] })
	TSMReportDir, TDXGuestDev = filepath.Join(dir, "tsm"), filepath.Join(dir, "tdx_guest")
	SEVGuestDev, NSMDev = filepath.Join(dir, "sev-guest"), filepath.Join(dir, "nsm")
	ctx := context.Background()
	if _, err := Detect(ctx); err != ErrNoTEE {
		t.Fatalf("no device: %v", err)
	}
	if err := os.WriteFile(SEVGuestDev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Detect(ctx)
	if sp, ok := p.(*SEVGuestProvider); err != nil || !ok || sp.Path != SEVGuestDev || p.Vendor() != "snp" {
		t.Fatalf("sev-guest without configfs-tsm: %T %v", p, err)
	}
	if err := os.Mkdir(TSMReportDir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, err = Detect(ctx)
	if tp, ok := p.(*TSMProvider); err != nil || !ok || tp.Vendor() != "snp" {
		t.Fatalf("sev-guest with configfs-tsm: %T %v", p, err)
	}
	if err := os.WriteFile(NSMDev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err = Detect(ctx); err != nil || p.Vendor() != "nitro" {
		t.Fatalf("nsm: %T %v", p, err)
	}
}

// FuzzTrimCertTable: the host-supplied certificate table is trimmed to a
// prefix that holds the same certificates, and never panics.
func FuzzTrimCertTable(f *testing.F) {
	signer, err := simroots.SNPSigner(simroots.SNPProductNames["Milan"])
	if err != nil {
		f.Fatal(err)
	}
	table, err := signer.CertTableBytes()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(table)
	f.Add(append(append([]byte{}, table...), make([]byte, 512)...))
	f.Add(make([]byte, abi.CertTableEntrySize))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		out := trimCertTable(in)
		if !bytes.HasPrefix(in, out) {
			t.Fatal("not a prefix")
		}
		var a, b abi.CertTable
		if a.Unmarshal(in) != nil {
			return
		}
		if err := b.Unmarshal(out); err != nil {
			t.Fatalf("trimmed table does not parse: %v", err)
		}
		if len(a.Entries) != len(b.Entries) {
			t.Fatalf("%d entries, trimmed %d", len(a.Entries), len(b.Entries))
		}
		for i := range a.Entries {
			if a.Entries[i].GUID != b.Entries[i].GUID || !bytes.Equal(a.Entries[i].RawCert, b.Entries[i].RawCert) {
				t.Fatalf("entry %d differs", i)
			}
		}
	})
}
