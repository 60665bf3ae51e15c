package nvidia

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
)

// ReportSpec is the content of a report to encode (the inverse of Parse),
// for simulated GPUs and tests. It never produces trusted evidence: the
// signature is only as good as the key that makes it.
type ReportSpec struct {
	Nonce         [NonceSize]byte
	ResponseNonce [NonceSize]byte
	Blocks        []Block // DMTF blocks; Value up to 64 KiB each
	Opaque        []OpaqueField
}

// VBIOSField encodes a VBIOS version string ("96.00.9f.00.01") as the
// report's 8-byte opaque field.
func VBIOSField(v string) ([]byte, error) {
	p, err := versionParts(v, 16)
	if err != nil || len(p) != 5 {
		return nil, fmt.Errorf("VBIOS version %q: want five hex parts", v)
	}
	for _, x := range p {
		if x > 0xff {
			return nil, fmt.Errorf("VBIOS version %q: part above ff", v)
		}
	}
	out := make([]byte, 8)
	binary.LittleEndian.PutUint32(out[0:], uint32(p[0])<<24|uint32(p[1])<<16|uint32(p[2])<<8|uint32(p[3]))
	binary.LittleEndian.PutUint32(out[4:], uint32(p[4]))
	return out, nil
}

// BuildReport encodes spec as request ‖ response and signs the transcript
// with key (ECDSA P-384, SHA-384, r ‖ s).
func BuildReport(spec *ReportSpec, key *ecdsa.PrivateKey) ([]byte, error) {
	if key == nil || key.Curve != elliptic.P384() {
		return nil, fmt.Errorf("nvidia: report key must be ECDSA P-384")
	}
	if len(spec.Blocks) == 0 || len(spec.Blocks) > MaxBlocks {
		return nil, fmt.Errorf("nvidia: %d measurement blocks, want 1..%d", len(spec.Blocks), MaxBlocks)
	}
	req := []byte{SPDMVersion11, codeGetMeas, param1SigReq, allMeasurement}
	req = append(req, spec.Nonce[:]...)
	req = append(req, 0) // slot 0
	var rec []byte
	for _, b := range spec.Blocks {
		if len(b.Value) > 0xffff-3 {
			return nil, fmt.Errorf("nvidia: measurement %d too large", b.Index)
		}
		rec = append(rec, byte(b.Index), dmtfSpec)
		rec = binary.LittleEndian.AppendUint16(rec, uint16(len(b.Value)+3))
		rec = append(rec, byte(b.ValueType))
		rec = binary.LittleEndian.AppendUint16(rec, uint16(len(b.Value)))
		rec = append(rec, b.Value...)
	}
	if len(rec) > 0xffffff {
		return nil, fmt.Errorf("nvidia: measurement record too large")
	}
	var op []byte
	for _, f := range spec.Opaque {
		op = binary.LittleEndian.AppendUint16(op, f.Type)
		op = binary.LittleEndian.AppendUint16(op, uint16(len(f.Value)))
		op = append(op, f.Value...)
	}
	if len(op) > MaxOpaque {
		return nil, fmt.Errorf("nvidia: opaque data too large")
	}
	resp := []byte{SPDMVersion11, codeMeas, 0, 0, byte(len(spec.Blocks)), byte(len(rec)), byte(len(rec) >> 8), byte(len(rec) >> 16)}
	resp = append(resp, rec...)
	resp = append(resp, spec.ResponseNonce[:]...)
	resp = binary.LittleEndian.AppendUint16(resp, uint16(len(op)))
	resp = append(resp, op...)
	out := append(req, resp...)
	h := sha512.Sum384(out)
	r, s, err := ecdsa.Sign(rand.Reader, key, h[:])
	if err != nil {
		return nil, fmt.Errorf("nvidia: sign report: %w", err)
	}
	sig := make([]byte, SignatureSize)
	r.FillBytes(sig[:48])
	s.FillBytes(sig[48:])
	out = append(out, sig...)
	if len(out) > MaxReport {
		return nil, fmt.Errorf("nvidia: report is %d bytes, limit %d", len(out), MaxReport)
	}
	return out, nil
}
