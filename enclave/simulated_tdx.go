//go:build !production

package enclave

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/tenzro/train/attest/simroots"
	"github.com/tenzro/train/attest/tdx"
)

// Simulated TDX platform: the values its PCK certificate, quote and
// collateral agree on. Every TCB level in the simulated collateral is
// UpToDate.
const (
	// SimulatedTDXFMSPC is the FMSPC of the simulated platform.
	SimulatedTDXFMSPC = "00ff51000000"
	simPCEID          = "0000"
	simPCESVN         = 13
	simQEISVSVN       = 8
	simQEISVProdID    = 2
)

var (
	// simTEETCBSVN: TDX module version 1 (byte 1), SEAM SVN 3 (byte 0).
	simTEETCBSVN = []byte{3, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	simCPUSVN    = []byte{2, 2, 2, 2, 3, 1, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0}
	// TD attributes: SEPT_VE_DISABLE (bit 28); DEBUG (bit 0) clear.
	simTDAttributes = []byte{0, 0, 0, 0x10, 0, 0, 0, 0}
	simTDDebugAttrs = []byte{1, 0, 0, 0x10, 0, 0, 0, 0}
	// XFAM 0x602e7 (x87, SSE, AVX, AVX-512, PK, AMX), within the fixed bits.
	simXFAM = []byte{0xe7, 0x02, 0x06, 0, 0, 0, 0, 0}
	// Intel's QE vendor ID.
	simQEVendorID, _ = hex.DecodeString("939a7233f79c4ca9940a0db3957f0607")
	simQEMRSigner    = sha256.Sum256([]byte("tenzro/train SIMULATED TD quoting enclave signer"))
	simQEMREnclave   = sha256.Sum256([]byte("tenzro/train SIMULATED TD quoting enclave"))
	simMRSEAM        = sha512.Sum384([]byte("tenzro/train SIMULATED TDX module"))
)

// SimulatedRTMR returns the value of RTMR i in simulated TDX quotes.
func SimulatedRTMR(i int) []byte {
	h := sha512.Sum384([]byte(fmt.Sprintf("tenzro/train SIMULATED RTMR%d", i)))
	return h[:]
}

// SimulatedMRSEAM is the MRSEAM of simulated TDX quotes.
func SimulatedMRSEAM() []byte { return simMRSEAM[:] }

// tdx builds a quote v4 in Intel's DCAP layout: header, TD report body,
// ECDSA-P256 signature over both by a fresh attestation key, the QE report
// (its REPORTDATA binds the attestation key) signed by the PCK key, and the
// PCK chain; plus signed collateral for the simulated FMSPC, carried in the
// envelope.
func (s *Simulated) tdx(rd [64]byte) ([]byte, error) {
	auth, err := simroots.TDX()
	if err != nil {
		return nil, err
	}
	now := s.clock().UTC().Truncate(time.Second)
	pckKey := simroots.DeriveKeyP256("tdx-pck-leaf")
	pckDER, err := simPCKCertificate(auth, pckKey, now)
	if err != nil {
		return nil, err
	}
	attKey, err := ecdsa.GenerateKey(pckKey.Curve, rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("simulated tdx attestation key: %w", err)
	}
	attPub := make([]byte, 64)
	attKey.X.FillBytes(attPub[:32])
	attKey.Y.FillBytes(attPub[32:])

	// Header (48 bytes).
	hdr := make([]byte, 0x30)
	binary.LittleEndian.PutUint16(hdr[0:], 4)    // version
	binary.LittleEndian.PutUint16(hdr[2:], 2)    // ECDSA-256-with-P-256
	binary.LittleEndian.PutUint32(hdr[4:], 0x81) // TEE type TDX
	copy(hdr[0x0c:0x1c], simQEVendorID)
	// TD quote body (584 bytes).
	body := make([]byte, 0x248)
	copy(body[0x00:], simTEETCBSVN)
	copy(body[0x10:], simMRSEAM[:])
	// MRSIGNERSEAM (0x40) and SEAMATTRIBUTES (0x70) stay zero: Intel's module.
	attrs := simTDAttributes
	if s.opts.Debug {
		attrs = simTDDebugAttrs
	}
	copy(body[0x78:], attrs)
	copy(body[0x80:], simXFAM)
	copy(body[0x88:], SimulatedMeasurement) // MRTD
	for i := 0; i < 4; i++ {
		copy(body[0x148+48*i:], SimulatedRTMR(i))
	}
	copy(body[0x208:], rd[:]) // REPORTDATA: binding ‖ 32 zero bytes, or ‖ the GPU report hash
	sig, err := rawSign(attKey, append(append([]byte{}, hdr...), body...))
	if err != nil {
		return nil, err
	}

	// QE report (SGX REPORT body, 384 bytes).
	authData := make([]byte, 32)
	for i := range authData {
		authData[i] = byte(i)
	}
	qe := make([]byte, 0x180)
	copy(qe[0x00:], simCPUSVN)
	qe[0x30] = 0x11 // ATTRIBUTES: INIT | MODE64BIT
	copy(qe[0x40:], simQEMREnclave[:])
	copy(qe[0x80:], simQEMRSigner[:])
	binary.LittleEndian.PutUint16(qe[0x100:], simQEISVProdID)
	binary.LittleEndian.PutUint16(qe[0x102:], simQEISVSVN)
	bind := sha256.Sum256(append(append([]byte{}, attPub...), authData...))
	copy(qe[0x140:], bind[:])
	qeSig, err := rawSign(pckKey, qe)
	if err != nil {
		return nil, err
	}
	var chain []byte
	for _, der := range [][]byte{pckDER, auth.PlatformCA.Raw, auth.Root.Raw} {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	// QE report certification data: report, signature, auth data, PCK chain (type 5).
	qcd := append(append([]byte{}, qe...), qeSig...)
	qcd = binary.LittleEndian.AppendUint16(qcd, uint16(len(authData)))
	qcd = append(qcd, authData...)
	qcd = binary.LittleEndian.AppendUint16(qcd, 5)
	qcd = binary.LittleEndian.AppendUint32(qcd, uint32(len(chain)))
	qcd = append(qcd, chain...)
	// Signed data: signature, attestation key, certification data (type 6).
	sd := append(append([]byte{}, sig...), attPub...)
	sd = binary.LittleEndian.AppendUint16(sd, 6)
	sd = binary.LittleEndian.AppendUint32(sd, uint32(len(qcd)))
	sd = append(sd, qcd...)
	quote := append(append([]byte{}, hdr...), body...)
	quote = binary.LittleEndian.AppendUint32(quote, uint32(len(sd)))
	quote = append(quote, sd...)

	col, err := simTDXCollateral(auth, now)
	if err != nil {
		return nil, err
	}
	colJSON, err := json.Marshal(col)
	if err != nil {
		return nil, fmt.Errorf("simulated tdx collateral: %w", err)
	}
	return json.Marshal(map[string]any{"vendor": "tdx", "evidence": quote, "collateral": json.RawMessage(colJSON)})
}

// rawSign signs SHA-256(msg) and returns r ‖ s, 32 bytes each (DCAP's
// signature encoding).
func rawSign(k *ecdsa.PrivateKey, msg []byte) ([]byte, error) {
	h := sha256.Sum256(msg)
	r, s, err := ecdsa.Sign(rand.Reader, k, h[:])
	if err != nil {
		return nil, fmt.Errorf("simulated tdx signature: %w", err)
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out, nil
}

// ASN.1 shapes of Intel's SGX extensions (OID 1.2.840.113741.1.13.1).
var oidSGX = asn1.ObjectIdentifier{1, 2, 840, 113741, 1, 13, 1}

func sgxOID(arcs ...int) asn1.ObjectIdentifier {
	return append(append(asn1.ObjectIdentifier{}, oidSGX...), arcs...)
}

type asnOctets struct {
	ID asn1.ObjectIdentifier
	V  []byte
}
type asnInt struct {
	ID asn1.ObjectIdentifier
	V  int
}
type asnEnum struct {
	ID asn1.ObjectIdentifier
	V  asn1.Enumerated
}
type asnBool struct {
	ID asn1.ObjectIdentifier
	V  bool
}

// asnSeq wraps DER elements in a SEQUENCE.
func asnSeq(parts ...[]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	out, _ := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: body})
	return out
}

func mustASN(v any) []byte {
	b, err := asn1.Marshal(v)
	if err != nil {
		panic("simulated tdx: " + err.Error())
	}
	return b
}

// sgxExtension encodes the PCK certificate's SGX extension as a Platform
// CA-issued PCK certificate has it: PPID, TCB (16 SGX TCB component SVNs,
// PCESVN, CPUSVN), PCE-ID, FMSPC, SGX type, platform instance ID and
// configuration.
func sgxExtension() []byte {
	ppid := sha256.Sum256([]byte("tenzro/train SIMULATED PPID"))
	inst := sha256.Sum256([]byte("tenzro/train SIMULATED platform instance"))
	var tcb [][]byte
	for i, v := range simCPUSVN {
		tcb = append(tcb, mustASN(asnInt{sgxOID(2, i+1), int(v)}))
	}
	tcb = append(tcb, mustASN(asnInt{sgxOID(2, 17), simPCESVN}), mustASN(asnOctets{sgxOID(2, 18), simCPUSVN}))
	fmspc, _ := hex.DecodeString(SimulatedTDXFMSPC)
	pceid, _ := hex.DecodeString(simPCEID)
	return asnSeq(
		mustASN(asnOctets{sgxOID(1), ppid[:16]}),
		asnSeq(mustASN(sgxOID(2)), asnSeq(tcb...)),
		mustASN(asnOctets{sgxOID(3), pceid}),
		mustASN(asnOctets{sgxOID(4), fmspc}),
		mustASN(asnEnum{sgxOID(5), 1}), // SGX type: Scalable
		mustASN(asnOctets{sgxOID(6), inst[:16]}),
		asnSeq(mustASN(sgxOID(7)), asnSeq(
			mustASN(asnBool{sgxOID(7, 1), false}), // dynamic platform
			mustASN(asnBool{sgxOID(7, 2), true}),  // cached keys
			mustASN(asnBool{sgxOID(7, 3), true}),  // SMT enabled
		)),
	)
}

// simPCKCertificate issues the PCK leaf: exactly the six extensions Intel's
// PCK certificates have (authority and subject key IDs, CRL distribution
// point, key usage, basic constraints, SGX extensions). It lives seven
// years from the evidence time, as Intel's do.
func simPCKCertificate(auth *simroots.TDXAuthority, key *ecdsa.PrivateKey, now time.Time) ([]byte, error) {
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(ski[:16]),
		Subject:               pkix.Name{CommonName: "Intel SGX PCK Certificate", Organization: []string{simroots.Label}, Country: []string{"US"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(7, 0, 0),
		SubjectKeyId:          ski[:20],
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment,
		BasicConstraintsValid: true,
		CRLDistributionPoints: []string{"https://simulated.invalid/sgx/certification/v4/pckcrl?ca=platform&encoding=der"},
		SignatureAlgorithm:    x509.ECDSAWithSHA256,
		ExtraExtensions:       []pkix.Extension{{Id: oidSGX, Value: sgxExtension()}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, auth.PlatformCA, key.Public(), auth.PlatformCAKey)
	if err != nil {
		return nil, fmt.Errorf("simulated tdx PCK certificate: %w", err)
	}
	return der, nil
}

type simTCBComponent struct {
	SVN int `json:"svn"`
}

type simTCB struct {
	SGX    []simTCBComponent `json:"sgxtcbcomponents,omitempty"`
	PCESVN *int              `json:"pcesvn,omitempty"`
	TDX    []simTCBComponent `json:"tdxtcbcomponents,omitempty"`
	ISVSVN *int              `json:"isvsvn,omitempty"`
}

type simTCBLevel struct {
	TCB       simTCB `json:"tcb"`
	TCBDate   string `json:"tcbDate"`
	TCBStatus string `json:"tcbStatus"`
}

func comps(v []byte) []simTCBComponent {
	out := make([]simTCBComponent, len(v))
	for i, b := range v {
		out[i].SVN = int(b)
	}
	return out
}

func intp(v int) *int { return &v }

// simTDXCollateral returns signed collateral for the simulated platform:
// TCB info (v3, id TDX) and QE identity (v2, id TD_QE) as the exact signed
// JSON, signed by the simulated TCB signing key, their issuer chains, and
// the root CA and PCK CRLs. Issued an hour before now, valid 30 days.
func simTDXCollateral(auth *simroots.TDXAuthority, now time.Time) (*tdx.Collateral, error) {
	issue, next := now.Add(-time.Hour).Format(time.RFC3339), now.AddDate(0, 0, 30).Format(time.RFC3339)
	tcbDate := "2024-01-01T00:00:00Z"
	zero48 := strings.Repeat("00", 48)
	tcbInfo, err := json.Marshal(map[string]any{
		"id": "TDX", "version": 3, "issueDate": issue, "nextUpdate": next, "fmspc": SimulatedTDXFMSPC, "pceId": simPCEID,
		"tcbType": 0, "tcbEvaluationDataNumber": 17,
		"tdxModule": map[string]string{"mrsigner": zero48, "attributes": "0000000000000000", "attributesMask": "FFFFFFFFFFFFFFFF"},
		"tdxModuleIdentities": []map[string]any{{
			"id": fmt.Sprintf("TDX_%02x", simTEETCBSVN[1]), "mrsigner": zero48, "attributes": "0000000000000000", "attributesMask": "FFFFFFFFFFFFFFFF",
			"tcbLevels": []simTCBLevel{{TCB: simTCB{ISVSVN: intp(int(simTEETCBSVN[0]))}, TCBDate: tcbDate, TCBStatus: "UpToDate"}},
		}},
		"tcbLevels": []simTCBLevel{{TCB: simTCB{SGX: comps(simCPUSVN), PCESVN: intp(simPCESVN), TDX: comps(simTEETCBSVN)}, TCBDate: tcbDate, TCBStatus: "UpToDate"}},
	})
	if err != nil {
		return nil, err
	}
	qeID, err := json.Marshal(map[string]any{
		"id": "TD_QE", "version": 2, "issueDate": issue, "nextUpdate": next, "tcbEvaluationDataNumber": 17,
		"miscselect": "00000000", "miscselectMask": "FFFFFFFF",
		"attributes": "11000000000000000000000000000000", "attributesMask": "FBFFFFFFFFFFFFFF0000000000000000",
		"mrsigner": hex.EncodeToString(simQEMRSigner[:]), "isvprodid": simQEISVProdID,
		"tcbLevels": []simTCBLevel{{TCB: simTCB{ISVSVN: intp(simQEISVSVN)}, TCBDate: tcbDate, TCBStatus: "UpToDate"}},
	})
	if err != nil {
		return nil, err
	}
	tcbSig, err := rawSign(auth.TCBSigningKey, tcbInfo)
	if err != nil {
		return nil, err
	}
	qeSig, err := rawSign(auth.TCBSigningKey, qeID)
	if err != nil {
		return nil, err
	}
	rootCRL, pckCRL, err := auth.CRLs(now)
	if err != nil {
		return nil, err
	}
	pemOf := func(cs ...*x509.Certificate) string {
		var b []byte
		for _, c := range cs {
			b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
		return string(b)
	}
	signing := pemOf(auth.TCBSigning, auth.Root)
	return &tdx.Collateral{
		PCKCRLIssuerChain: pemOf(auth.PlatformCA, auth.Root), RootCACRL: hex.EncodeToString(rootCRL), PCKCRL: hex.EncodeToString(pckCRL),
		TCBInfoIssuerChain: signing, TCBInfo: string(tcbInfo), TCBInfoSignature: hex.EncodeToString(tcbSig),
		QEIdentityIssuerChain: signing, QEIdentity: string(qeID), QEIdentitySignature: hex.EncodeToString(qeSig),
	}, nil
}
