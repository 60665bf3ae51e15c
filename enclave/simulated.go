//go:build !production

package enclave

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-sev-guest/abi"
	"github.com/google/go-sev-guest/kds"
	sevtest "github.com/google/go-sev-guest/testing"
	"github.com/hf/nitrite"
	"golang.org/x/crypto/hkdf"

	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/wire"
)

// SimulatedMeasurement is the launch measurement (SNP) and PCR0-2 value
// (Nitro) of simulated evidence: SHA-384 of a public label.
var SimulatedMeasurement = func() []byte { h := sha512.Sum384([]byte("tenzro/train SIMULATED enclave image")); return h[:] }()

// SimulatedKeyFile is the name of the simulated sealing-key file.
const SimulatedKeyFile = "SIMULATED-NOT-A-TEE.sealing-key"

// Simulated is a provider for machines without a TEE. Its evidence is in
// the vendors' exact formats but signed by test roots: it proves nothing
// and is accepted only under "allow_simulated": true in non-production
// builds.
type Simulated struct {
	vendor string
	dir    string
	clock  func() time.Time
	opts   SimulatedOptions
}

// SimulatedOptions tunes a simulated provider (tests use them to make
// evidence a verifier must refuse).
type SimulatedOptions struct {
	// SNPProductLine is the AMD product line ("Milan", "Genoa", "Turin")
	// whose simulated VCEK signs SEV-SNP reports; "" is Milan.
	SNPProductLine string
	// Debug makes debuggable evidence: the TD DEBUG attribute (TDX), the
	// guest policy's debug bit (SEV-SNP), an all-zero PCR0 (Nitro).
	Debug bool
	// NoSealing makes SealingKey fail with ErrNoLocalSealing, as real TDX
	// and Nitro do: key custody then runs in ephemeral mode, and no
	// sealing-key file is created.
	NoSealing bool
}

// NewSimulated returns a simulated provider for vendor "tdx", "snp" or
// "nitro". dir holds its sealing-key file (labelled SIMULATED); clock nil
// is time.Now.
func NewSimulated(vendor, dir string, clock func() time.Time) (*Simulated, error) {
	return NewSimulatedWith(vendor, dir, clock, SimulatedOptions{})
}

// NewSimulatedWith is NewSimulated with options.
func NewSimulatedWith(vendor, dir string, clock func() time.Time, opts SimulatedOptions) (*Simulated, error) {
	switch vendor {
	case "tdx", "snp", "nitro":
	default:
		return nil, fmt.Errorf("simulated provider: vendor %q (want tdx, snp or nitro)", vendor)
	}
	if opts.SNPProductLine == "" {
		opts.SNPProductLine = "Milan"
	}
	if _, ok := simroots.SNPProductNames[opts.SNPProductLine]; !ok {
		return nil, fmt.Errorf("simulated provider: SNP product line %q (want Milan, Genoa or Turin)", opts.SNPProductLine)
	}
	if clock == nil {
		clock = time.Now
	}
	return &Simulated{vendor: vendor, dir: dir, clock: clock, opts: opts}, nil
}

// Vendor implements Provider.
func (s *Simulated) Vendor() string { return s.vendor }

// Simulated implements Provider.
func (s *Simulated) Simulated() bool { return true }

// Evidence implements Provider.
func (s *Simulated) Evidence(ctx context.Context, rd wire.Hash) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.vendor == "nitro" {
		return s.nitro(rd)
	}
	var in [64]byte
	copy(in[:], rd[:])
	return s.EvidenceData(ctx, in)
}

// EvidenceData implements DataProvider (TDX and SEV-SNP; Nitro has no
// 64-byte report data and no GPU confidential computing).
func (s *Simulated) EvidenceData(ctx context.Context, in [64]byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch s.vendor {
	case "snp":
		return s.snp(in)
	case "tdx":
		return s.tdx(in)
	}
	return nil, fmt.Errorf("simulated %s: no 64-byte report data (composite GPU evidence needs TDX or SEV-SNP)", s.vendor)
}

func (s *Simulated) snp(in [64]byte) ([]byte, error) {
	signer, err := simroots.SNPSigner(simroots.SNPProductNames[s.opts.SNPProductLine])
	if err != nil {
		return nil, err
	}
	rep := simSNPReport(in, s.opts)
	r, sg, err := signer.Sign(abi.SignedComponent(rep))
	if err != nil {
		return nil, fmt.Errorf("simulated snp: %w", err)
	}
	if err := abi.SetSignature(r, sg, rep); err != nil {
		return nil, fmt.Errorf("simulated snp: %w", err)
	}
	table, err := signer.CertTableBytes()
	if err != nil {
		return nil, fmt.Errorf("simulated snp: %w", err)
	}
	return json.Marshal(map[string]any{"vendor": "snp", "evidence": rep, "cert_table": table})
}

// simSNPReport is the unsigned body of a simulated SEV-SNP report binding
// reportData: version 3, signed by the VCEK of opts' product line, SMT on,
// debug per opts, measurement SimulatedMeasurement.
func simSNPReport(reportData [64]byte, opts SimulatedOptions) []byte {
	// Report version 3 carries the CPUID family/model/stepping, from which
	// the verifier takes the product line (and so the roots it uses).
	var fms uint32
	for cpuid, line := range kds.ProductLineCpuid {
		if line == opts.SNPProductLine {
			fms = cpuid
		}
	}
	raw := sevtest.CreateRawReport(&sevtest.TestReportOptions{ReportData: reportData[:], SignerInfo: abi.SignerInfo{SigningKey: abi.VcekReportSigner}, Version: 3, FMS: fms})
	rep := raw[:abi.ReportSize]
	// CreateRawReport always sets the debug bit: patch the policy (SMT on,
	// as on real VMs; debug and migration agent off) before signing.
	pol := abi.SnpPolicyToBytes(abi.SnpPolicy{SMT: true, Debug: opts.Debug})
	for i := 0; i < 8; i++ {
		rep[0x08+i] = byte(pol >> (8 * i))
	}
	copy(rep[0x90:0x90+48], SimulatedMeasurement)
	return rep
}

type coseSign1 struct {
	_           struct{} `cbor:",toarray"`
	Protected   []byte
	Unprotected map[int]any
	Payload     []byte
	Signature   []byte
}

type sigStructure struct {
	_           struct{} `cbor:",toarray"`
	Context     string
	Protected   []byte
	ExternalAAD []byte
	Payload     []byte
}

func (s *Simulated) nitro(rd wire.Hash) ([]byte, error) {
	root, rootKey, err := simroots.Nitro()
	if err != nil {
		return nil, err
	}
	now := s.clock().UTC()
	leafKey := simroots.DeriveKey("nitro-leaf")
	tmpl := &x509.Certificate{
		SerialNumber:       big.NewInt(now.UnixMilli()),
		Subject:            pkix.Name{CommonName: "i-SIMULATED.enclave", Organization: []string{simroots.Label}},
		NotBefore:          now.Add(-time.Hour),
		NotAfter:           now.Add(3 * time.Hour),
		KeyUsage:           x509.KeyUsageDigitalSignature,
		SignatureAlgorithm: x509.ECDSAWithSHA384,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, tmpl, root, leafKey.Public(), rootKey)
	if err != nil {
		return nil, fmt.Errorf("simulated nitro: %w", err)
	}
	pcrs := map[uint][]byte{}
	for i := uint(0); i < 16; i++ {
		pcrs[i] = make([]byte, 48)
	}
	pcrs[0], pcrs[1], pcrs[2] = SimulatedMeasurement, SimulatedMeasurement, SimulatedMeasurement
	if s.opts.Debug {
		pcrs[0] = make([]byte, 48) // a debug enclave's PCRs are all zero
	}
	doc := nitrite.Document{ModuleID: "i-SIMULATED-enc", Timestamp: uint64(now.UnixMilli()), Digest: "SHA384", PCRs: pcrs,
		Certificate: leafDER, CABundle: [][]byte{root.Raw}, UserData: rd[:], Nonce: rd[:]}
	payload, err := cbor.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("simulated nitro: %w", err)
	}
	protected, _ := cbor.Marshal(map[int]int{1: -35})
	tbs, _ := cbor.Marshal(sigStructure{Context: "Signature1", Protected: protected, ExternalAAD: []byte{}, Payload: payload})
	h := sha512.Sum384(tbs)
	r, sg, err := ecdsa.Sign(rand.Reader, leafKey, h[:])
	if err != nil {
		return nil, fmt.Errorf("simulated nitro: %w", err)
	}
	sig := make([]byte, 96)
	r.FillBytes(sig[:48])
	sg.FillBytes(sig[48:])
	out, err := cbor.Marshal(coseSign1{Protected: protected, Unprotected: map[int]any{}, Payload: payload, Signature: sig})
	if err != nil {
		return nil, fmt.Errorf("simulated nitro: %w", err)
	}
	return json.Marshal(map[string]any{"vendor": "nitro", "evidence": out})
}

// SealingKey implements Provider: derived from a key file labelled
// SIMULATED in the provider's directory (created on first use);
// ErrNoLocalSealing with SimulatedOptions.NoSealing.
func (s *Simulated) SealingKey(_ context.Context, label string) ([]byte, error) {
	if s.opts.NoSealing {
		return nil, fmt.Errorf("simulated %s sealing key: %w", s.vendor, ErrNoLocalSealing)
	}
	if s.dir == "" {
		return nil, errors.New("simulated provider: no key directory")
	}
	p := filepath.Join(s.dir, SimulatedKeyFile)
	seed, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		seed = make([]byte, 32)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, seed, 0o600); err != nil {
			return nil, fmt.Errorf("simulated sealing key: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("simulated sealing key: %w", err)
	}
	if len(seed) != 32 {
		return nil, fmt.Errorf("simulated sealing key %s: %d bytes, want 32", p, len(seed))
	}
	k := make([]byte, 32)
	if _, err := io.ReadFull(hkdf.New(sha256.New, seed, nil, []byte("tenzro/enclave/simulated-seal/v1/"+label)), k); err != nil {
		return nil, err
	}
	return k, nil
}
