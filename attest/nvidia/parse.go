package nvidia

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"
)

// Size limits on external input.
const (
	MaxReport    = 32 << 10 // a raw report (request ‖ response); Hopper's is 4117 bytes
	MaxChain     = 32 << 10 // a PEM or DER device certificate chain
	MaxChainCert = 8        // certificates in a chain
	MaxBlocks    = 255      // measurement blocks (SPDM's NumberOfBlocks is one byte)
	MaxOpaque    = 8 << 10  // the opaque data field
)

// SPDM constants of the report.
const (
	RequestSize    = 37   // SPDM 1.1 GET_MEASUREMENTS with a nonce and slot id
	NonceSize      = 32   // the requester's nonce
	SignatureSize  = 96   // ECDSA P-384 r ‖ s
	SPDMVersion11  = 0x11 // SPDM 1.1
	codeGetMeas    = 0xE0 // GET_MEASUREMENTS
	codeMeas       = 0x60 // MEASUREMENTS
	dmtfSpec       = 0x01 // MeasurementSpecification bit 0: DMTF
	param1SigReq   = 0x01 // GET_MEASUREMENTS Param1 bit 0: signature requested
	allMeasurement = 0xFF // Param2: all measurement blocks
)

// Opaque data field types (NVIDIA's OPAQUE_FIELD_ID_*).
const (
	OpaqueCertIssuerName    = 1
	OpaqueDriverVersion     = 3
	OpaqueGPUInfo           = 4
	OpaqueSKU               = 5
	OpaqueVBIOSVersion      = 6
	OpaqueManufacturerID    = 7
	OpaqueNVDECStatus       = 11
	OpaqueMSRCount          = 12
	OpaqueProject           = 17
	OpaqueProjectSKU        = 18
	OpaqueFWID              = 20
	OpaqueOpaqueDataVersion = 34
	OpaqueChipInfo          = 35
	OpaqueFeatureFlag       = 36
)

// Block is one DMTF measurement block of the response.
type Block struct {
	Index     int    `json:"index"`
	ValueType int    `json:"value_type"`
	Value     []byte `json:"value"`
}

// OpaqueField is one type-length-value entry of the response's opaque data.
type OpaqueField struct {
	Type  uint16 `json:"type"`
	Value []byte `json:"value"`
}

// Report is a parsed, not yet verified, GPU attestation report.
type Report struct {
	Raw      []byte // request ‖ response
	Request  []byte // the 37-byte GET_MEASUREMENTS request
	Response []byte // the MEASUREMENTS response, signature included

	Nonce         [NonceSize]byte // the requester's nonce (request)
	SlotID        byte
	ResponseNonce [NonceSize]byte // the responder's nonce
	Blocks        []Block         // in the order of the response, indexes unique
	Opaque        []OpaqueField
	Signature     []byte // 96 bytes, r ‖ s

	DriverVersion string // from the opaque data, NUL trimmed
	VBIOSVersion  string // formatted like NVIDIA's RIMs: 96.00.9f.00.01
	FWID          []byte // 48 bytes when present
	ChipInfo      string // e.g. "GH100" when present
	NVDECDisabled bool   // NVDEC0 status reports disabled (measurement 35 is then not compared)
}

// Measurement returns the value of measurement block index (nil when absent).
func (r *Report) Measurement(index int) []byte {
	for _, b := range r.Blocks {
		if b.Index == index {
			return b.Value
		}
	}
	return nil
}

// SignedBytes is the SPDM transcript the signature covers: request ‖
// response without the trailing signature.
func (r *Report) SignedBytes() []byte {
	return r.Raw[:len(r.Raw)-SignatureSize]
}

// Parse parses a raw report: the GET_MEASUREMENTS request immediately
// followed by the MEASUREMENTS response, as NVML's
// nvmlDeviceGetConfComputeGpuAttestationReport returns it. Hex text (as in
// NVIDIA's samples) is accepted too. Every length is checked; trailing bytes,
// duplicate block indexes, non-DMTF blocks and unknown SPDM versions are
// refused.
func Parse(b []byte) (*Report, error) {
	if len(b) > 2*MaxReport+2 {
		return nil, fmt.Errorf("nvidia report is %d bytes, limit %d", len(b), MaxReport)
	}
	if isHexText(b) {
		s := strings.TrimSpace(string(b))
		d, err := hex.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("nvidia report: hex: %w", err)
		}
		b = d
	}
	if len(b) > MaxReport {
		return nil, fmt.Errorf("nvidia report is %d bytes, limit %d", len(b), MaxReport)
	}
	if len(b) < RequestSize+8+NonceSize+2+SignatureSize {
		return nil, fmt.Errorf("nvidia report is %d bytes, shorter than the smallest request and response", len(b))
	}
	r := &Report{Raw: append([]byte(nil), b...)}
	r.Request, r.Response = r.Raw[:RequestSize], r.Raw[RequestSize:]
	q := r.Request
	if q[0] != SPDMVersion11 {
		return nil, fmt.Errorf("nvidia report: request SPDM version 0x%02x, want 0x11", q[0])
	}
	if q[1] != codeGetMeas {
		return nil, fmt.Errorf("nvidia report: request code 0x%02x, want GET_MEASUREMENTS 0xe0", q[1])
	}
	if q[2]&param1SigReq == 0 {
		return nil, fmt.Errorf("nvidia report: request does not ask for a signature (param1 0x%02x)", q[2])
	}
	if q[3] != allMeasurement {
		return nil, fmt.Errorf("nvidia report: request param2 0x%02x, want all measurements 0xff", q[3])
	}
	copy(r.Nonce[:], q[4:4+NonceSize])
	r.SlotID = q[36]
	p := r.Response
	if p[0] != SPDMVersion11 {
		return nil, fmt.Errorf("nvidia report: response SPDM version 0x%02x, want 0x11", p[0])
	}
	if p[1] != codeMeas {
		return nil, fmt.Errorf("nvidia report: response code 0x%02x, want MEASUREMENTS 0x60", p[1])
	}
	nBlocks := int(p[4])
	recLen := int(p[5]) | int(p[6])<<8 | int(p[7])<<16
	off := 8
	if recLen > len(p)-off-NonceSize-2-SignatureSize {
		return nil, fmt.Errorf("nvidia report: measurement record length %d exceeds the response", recLen)
	}
	if nBlocks == 0 {
		return nil, fmt.Errorf("nvidia report: no measurement blocks")
	}
	blocks, err := parseRecord(p[off:off+recLen], nBlocks)
	if err != nil {
		return nil, err
	}
	r.Blocks = blocks
	off += recLen
	copy(r.ResponseNonce[:], p[off:off+NonceSize])
	off += NonceSize
	opaqueLen := int(binary.LittleEndian.Uint16(p[off:]))
	off += 2
	if opaqueLen > MaxOpaque {
		return nil, fmt.Errorf("nvidia report: opaque data is %d bytes, limit %d", opaqueLen, MaxOpaque)
	}
	if want := off + opaqueLen + SignatureSize; want != len(p) {
		return nil, fmt.Errorf("nvidia report: response is %d bytes, its fields say %d (opaque %d + %d-byte signature)", len(p), want, opaqueLen, SignatureSize)
	}
	if err := r.parseOpaque(p[off : off+opaqueLen]); err != nil {
		return nil, err
	}
	off += opaqueLen
	r.Signature = p[off:]
	return r, nil
}

func isHexText(b []byte) bool {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || len(t)%2 != 0 {
		return false
	}
	for _, c := range t {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

func parseRecord(rec []byte, n int) ([]Block, error) {
	blocks := make([]Block, 0, n)
	seen := map[int]bool{}
	off := 0
	for i := 0; i < n; i++ {
		if len(rec)-off < 4 {
			return nil, fmt.Errorf("nvidia report: measurement block %d: truncated header", i)
		}
		idx, spec := int(rec[off]), rec[off+1]
		size := int(binary.LittleEndian.Uint16(rec[off+2:]))
		off += 4
		if spec != dmtfSpec {
			return nil, fmt.Errorf("nvidia report: measurement block %d (index %d): specification 0x%02x, want DMTF 0x01", i, idx, spec)
		}
		if idx == 0 || seen[idx] {
			return nil, fmt.Errorf("nvidia report: measurement block %d: index %d is zero or repeated", i, idx)
		}
		seen[idx] = true
		if size < 3 || len(rec)-off < size {
			return nil, fmt.Errorf("nvidia report: measurement block %d (index %d): size %d does not fit", i, idx, size)
		}
		m := rec[off : off+size]
		vt := int(m[0])
		vs := int(binary.LittleEndian.Uint16(m[1:]))
		if vs != size-3 {
			return nil, fmt.Errorf("nvidia report: measurement block %d (index %d): value size %d, block says %d", i, idx, vs, size-3)
		}
		blocks = append(blocks, Block{Index: idx, ValueType: vt, Value: m[3:]})
		off += size
	}
	if off != len(rec) {
		return nil, fmt.Errorf("nvidia report: %d bytes after the last measurement block", len(rec)-off)
	}
	return blocks, nil
}

func (r *Report) parseOpaque(o []byte) error {
	seen := map[uint16]bool{}
	for off := 0; off < len(o); {
		if len(o)-off < 4 {
			return fmt.Errorf("nvidia report: opaque data: truncated field header at %d", off)
		}
		t := binary.LittleEndian.Uint16(o[off:])
		n := int(binary.LittleEndian.Uint16(o[off+2:]))
		off += 4
		if len(o)-off < n {
			return fmt.Errorf("nvidia report: opaque field %d: %d bytes do not fit", t, n)
		}
		if seen[t] {
			return fmt.Errorf("nvidia report: opaque field %d repeated", t)
		}
		seen[t] = true
		v := o[off : off+n]
		off += n
		r.Opaque = append(r.Opaque, OpaqueField{Type: t, Value: v})
		switch t {
		case OpaqueDriverVersion:
			r.DriverVersion = strings.TrimRight(string(v), "\x00")
		case OpaqueVBIOSVersion:
			s, err := formatVBIOS(v)
			if err != nil {
				return err
			}
			r.VBIOSVersion = s
		case OpaqueFWID:
			r.FWID = v
		case OpaqueChipInfo:
			r.ChipInfo, _, _ = strings.Cut(string(v), "\x00")
		case OpaqueNVDECStatus:
			r.NVDECDisabled = len(v) > 0 && v[0] == 0x55
		}
	}
	return nil
}

// formatVBIOS renders the 8-byte little-endian VBIOS version field the way
// NVIDIA's RIMs and tools name it ("96.00.9f.00.01"): the upper four bytes
// of the low word, then the low byte of the high word.
func formatVBIOS(v []byte) (string, error) {
	if len(v) != 8 {
		return "", fmt.Errorf("nvidia report: VBIOS version field is %d bytes, want 8", len(v))
	}
	lo := binary.LittleEndian.Uint32(v[0:4])
	hi := binary.LittleEndian.Uint32(v[4:8])
	return fmt.Sprintf("%02x.%02x.%02x.%02x.%02x", byte(lo>>24), byte(lo>>16), byte(lo>>8), byte(lo), byte(hi)), nil
}

// ParseChain parses the device certificate chain, leaf first: PEM blocks
// (NVML's nvmlDeviceGetConfComputeGpuCertificate attestation chain, as in
// NVIDIA's samples) or concatenated DER. Nothing here is trusted; the root is
// pinned in Verify.
func ParseChain(b []byte) ([]*x509.Certificate, error) {
	if len(b) > MaxChain {
		return nil, fmt.Errorf("nvidia certificate chain is %d bytes, limit %d", len(b), MaxChain)
	}
	var ders [][]byte
	if bytes.Contains(b, []byte("-----BEGIN")) {
		rest := b
		for {
			var blk *pem.Block
			blk, rest = pem.Decode(rest)
			if blk == nil {
				break
			}
			if blk.Type != "CERTIFICATE" {
				return nil, fmt.Errorf("nvidia certificate chain: PEM block %q, want CERTIFICATE", blk.Type)
			}
			ders = append(ders, blk.Bytes)
		}
		if len(bytes.TrimSpace(rest)) != 0 {
			return nil, fmt.Errorf("nvidia certificate chain: %d bytes of trailing non-PEM data", len(bytes.TrimSpace(rest)))
		}
		if len(ders) > MaxChainCert {
			return nil, fmt.Errorf("nvidia certificate chain: more than %d certificates", MaxChainCert)
		}
		out := make([]*x509.Certificate, 0, len(ders))
		for i, d := range ders {
			c, err := x509.ParseCertificate(d)
			if err != nil {
				return nil, fmt.Errorf("nvidia certificate chain: certificate %d: %w", i, err)
			}
			out = append(out, c)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("nvidia certificate chain: no certificate")
		}
		return out, nil
	}
	certs, err := x509.ParseCertificates(b)
	if err != nil {
		return nil, fmt.Errorf("nvidia certificate chain: %w", err)
	}
	if len(certs) == 0 || len(certs) > MaxChainCert {
		return nil, fmt.Errorf("nvidia certificate chain: %d certificates, want 1..%d", len(certs), MaxChainCert)
	}
	return certs, nil
}
