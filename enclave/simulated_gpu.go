//go:build !production

package enclave

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/beevik/etree"
	dsig "github.com/russellhaering/goxmldsig"
	"golang.org/x/crypto/ocsp"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/nvidia"
	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/wire"
)

// Versions the simulated GPU reports (those of NVIDIA's Hopper sample).
const (
	SimulatedGPUDriver = "550.90.07"
	SimulatedGPUVBIOS  = "96.00.9f.00.01"
)

// SimulatedGPUMeasurement is block index's value in simulated GPU reports:
// SHA-384 of a public label and the index.
func SimulatedGPUMeasurement(index int) []byte {
	h := sha512.Sum384([]byte("tenzro/train SIMULATED GPU measurement " + strconv.Itoa(index)))
	return h[:]
}

// SimulatedGPU is a GPU provider for machines without an NVIDIA CC GPU: its
// reports are in NVIDIA's exact format (SPDM 1.1 GET_MEASUREMENTS request ‖
// response, P-384 signature) but signed under the SIMULATED device root, with
// RIMs signed under the SIMULATED RIM root and OCSP answers from it. It
// proves nothing and is accepted only under "allow_simulated": true in
// non-production builds.
type SimulatedGPU struct {
	clock func() time.Time
	// Measurements overrides block values (tests make mismatching GPUs).
	Measurements map[int][]byte
}

// NewSimulatedGPU returns the simulated GPU provider (clock nil: time.Now).
func NewSimulatedGPU(clock func() time.Time) *SimulatedGPU {
	if clock == nil {
		clock = time.Now
	}
	return &SimulatedGPU{clock: clock}
}

// Simulated reports true.
func (*SimulatedGPU) Simulated() bool { return true }

// GPUEvidence implements GPUProvider.
func (g *SimulatedGPU) GPUEvidence(ctx context.Context, nonce wire.Hash) (*attest.GPUEvidence, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dev, rimAuth, err := simroots.Nvidia()
	if err != nil {
		return nil, err
	}
	now := g.clock().UTC().Truncate(time.Second)
	fwid := sha512.Sum384([]byte("tenzro/train SIMULATED GPU firmware"))
	leafKey := simroots.DeriveKey("nvidia-gpu-attestation-key")
	leaf, err := simLeaf(dev, leafKey, "GH100 A01 GSP FMC LF SIMULATED", 0x6e10, now, &pkix.Extension{Id: nvidia.OIDTCGDiceFWID, Value: append(make([]byte, 16), fwid[:]...)})
	if err != nil {
		return nil, err
	}
	spec := &nvidia.ReportSpec{Nonce: nonce}
	if _, err := rand.Read(spec.ResponseNonce[:]); err != nil {
		return nil, err
	}
	for i := 1; i <= 64; i++ {
		v := SimulatedGPUMeasurement(i)
		if m, ok := g.Measurements[i]; ok {
			v = m
		}
		spec.Blocks = append(spec.Blocks, nvidia.Block{Index: i, ValueType: 1, Value: v})
	}
	vb, _ := nvidia.VBIOSField(SimulatedGPUVBIOS)
	spec.Opaque = []nvidia.OpaqueField{
		{Type: nvidia.OpaqueDriverVersion, Value: append([]byte(SimulatedGPUDriver), 0)},
		{Type: nvidia.OpaqueVBIOSVersion, Value: vb},
		{Type: nvidia.OpaqueFWID, Value: fwid[:]},
	}
	report, err := nvidia.BuildReport(spec, leafKey)
	if err != nil {
		return nil, err
	}
	rimKey := simroots.DeriveKey("nvidia-rim-signer")
	rimLeaf, err := simLeaf(rimAuth, rimKey, "HCC RIM L4 Signer SIMULATED", 0x6e11, now, nil)
	if err != nil {
		return nil, err
	}
	driverRIM, err := simRIM(SimulatedGPUDriver, 21, 40, rimLeaf, rimKey)
	if err != nil {
		return nil, err
	}
	vbiosRIM, err := simRIM(SimulatedGPUVBIOS, 0, 12, rimLeaf, rimKey)
	if err != nil {
		return nil, err
	}
	resp, err := ocsp.CreateResponse(dev.Cert, dev.Cert, ocsp.Response{Status: ocsp.Good, SerialNumber: leaf.SerialNumber,
		ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour)}, dev.Key)
	if err != nil {
		return nil, fmt.Errorf("simulated GPU OCSP: %w", err)
	}
	return &attest.GPUEvidence{Vendor: attest.VendorNvidia, Report: report, Certs: [][]byte{leaf.Raw, dev.Cert.Raw},
		RIMs: [][]byte{driverRIM, vbiosRIM}, OCSP: map[string][]byte{nvidia.SerialHex(leaf): resp}, Simulated: true}, nil
}

func simLeaf(ca *simroots.NvidiaAuthority, key *ecdsa.PrivateKey, cn string, serial int64, now time.Time, ext *pkix.Extension) (*x509.Certificate, error) {
	t := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{simroots.Label}},
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(365 * 24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, SignatureAlgorithm: x509.ECDSAWithSHA384}
	if ext != nil {
		t.ExtraExtensions = []pkix.Extension{*ext}
	}
	der, err := x509.CreateCertificate(rand.Reader, t, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("simulated GPU certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

// simRIM writes a SWID RIM in NVIDIA's layout whose active indexes lo..hi
// carry the simulated measurements (golden index i is block i+1), signed
// enveloped (C14N 1.1, ECDSA-SHA384, r ‖ s) by key under leaf.
func simRIM(version string, lo, hi int, leaf *x509.Certificate, key *ecdsa.PrivateKey) ([]byte, error) {
	doc := etree.NewDocument()
	root := doc.CreateElement("SoftwareIdentity")
	root.CreateAttr("xmlns", "http://standards.iso.org/iso/19770/-2/2015/schema.xsd")
	root.CreateAttr("xmlns:ns2", "http://www.w3.org/2001/04/xmlenc#sha384")
	root.CreateAttr("name", "GH100 SIMULATED")
	root.CreateAttr("tagId", "SIMULATED-"+version)
	meta := root.CreateElement("Meta")
	meta.CreateAttr("colloquialVersion", version)
	meta.CreateAttr("product", "GH100")
	payload := root.CreateElement("Payload")
	for i := 0; i < 64; i++ {
		r := payload.CreateElement("Resource")
		r.CreateAttr("type", "Measurement")
		r.CreateAttr("index", strconv.Itoa(i))
		active := "False"
		if i >= lo && i <= hi {
			active = "True"
		}
		r.CreateAttr("active", active)
		r.CreateAttr("alternatives", "1")
		r.CreateAttr("ns2:Hash0", hex.EncodeToString(SimulatedGPUMeasurement(i+1)))
		r.CreateAttr("name", "Measurement_"+strconv.Itoa(i))
		r.CreateAttr("size", "48")
	}
	ctx, err := dsig.NewSigningContext(key, [][]byte{leaf.Raw})
	if err != nil {
		return nil, fmt.Errorf("simulated RIM: %w", err)
	}
	ctx.Hash = crypto.SHA384
	ctx.Canonicalizer = dsig.MakeC14N11Canonicalizer()
	if err := ctx.SetSignatureMethod(dsig.ECDSASHA384SignatureMethod); err != nil {
		return nil, fmt.Errorf("simulated RIM: %w", err)
	}
	signed, err := ctx.SignEnveloped(root)
	if err != nil {
		return nil, fmt.Errorf("simulated RIM: %w", err)
	}
	// NVIDIA's RIMs carry r ‖ s (RFC 4050), goxmldsig writes ASN.1.
	for _, sv := range signed.FindElements(".//SignatureValue") {
		der, err := base64.StdEncoding.DecodeString(sv.Text())
		if err != nil {
			return nil, fmt.Errorf("simulated RIM: %w", err)
		}
		var rs struct{ R, S *big.Int }
		if _, err := asn1.Unmarshal(der, &rs); err != nil {
			return nil, fmt.Errorf("simulated RIM: %w", err)
		}
		raw := make([]byte, 96)
		rs.R.FillBytes(raw[:48])
		rs.S.FillBytes(raw[48:])
		sv.SetText(base64.StdEncoding.EncodeToString(raw))
	}
	out := etree.NewDocument()
	out.SetRoot(signed)
	return out.WriteToBytes()
}
