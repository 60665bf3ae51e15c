package vrf

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha512"
	"crypto/subtle"
	"errors"
	"fmt"

	"filippo.io/edwards25519"
)

// Sizes of the suite's encodings (RFC 9381 §5.5: ptLen = qLen = 32, cLen = 16).
const (
	ProofSize  = ptLen + cLen + qLen // 80: Gamma ‖ c ‖ s
	OutputSize = sha512.Size         // 64: beta
	// MaxAlphaSize bounds the input string this package accepts. The
	// election passes 53-byte alphas; the bound only stops abuse.
	MaxAlphaSize = 1 << 16

	suiteString = 0x03
	ptLen       = 32
	cLen        = 16
	qLen        = 32
)

// Domain-separator bytes of RFC 9381 §5.4.
const (
	encodeFront    = 0x01
	encodeBack     = 0x00
	challengeFront = 0x02
	challengeBack  = 0x00
	proofHashFront = 0x03
	proofHashBack  = 0x00
)

// Errors. Every error returned by this package wraps one of these.
var (
	// ErrInvalidProof means the proof does not verify (RFC 9381 "INVALID").
	ErrInvalidProof = errors.New("vrf: invalid proof")
	// ErrInvalidKey means the public or private key is malformed or, for a
	// public key, of small order.
	ErrInvalidKey = errors.New("vrf: invalid key")
	// ErrInput means an input is outside this package's limits.
	ErrInput = errors.New("vrf: bad input")
)

// Prove computes the 80-byte proof pi_string = point_to_string(Gamma) ‖
// int_to_string(c, 16) ‖ int_to_string(s, 32) for alpha under sk
// (RFC 9381 §5.1). It is deterministic: the same key and alpha always give
// the same proof.
func Prove(sk ed25519.PrivateKey, alpha []byte) ([]byte, error) {
	if len(sk) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("prove: private key is %d bytes, want %d: %w", len(sk), ed25519.PrivateKeySize, ErrInvalidKey)
	}
	if len(alpha) > MaxAlphaSize {
		return nil, fmt.Errorf("prove: alpha is %d bytes, limit %d: %w", len(alpha), MaxAlphaSize, ErrInput)
	}
	// RFC 8032 §5.1.5: h = SHA-512(seed); x = clamp(h[0:32]); Y = x·B.
	h := sha512.Sum512(sk.Seed())
	x, err := edwards25519.NewScalar().SetBytesWithClamping(h[:32])
	if err != nil {
		return nil, fmt.Errorf("prove: secret scalar: %w", err)
	}
	Y := new(edwards25519.Point).ScalarBaseMult(x)
	pk := Y.Bytes()
	if subtle.ConstantTimeCompare(pk, sk[32:]) != 1 {
		return nil, fmt.Errorf("prove: private key's public half does not match its seed: %w", ErrInvalidKey)
	}

	H, err := encodeToCurve(pk, alpha)
	if err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	hString := H.Bytes()
	Gamma := new(edwards25519.Point).ScalarMult(x, H)

	// RFC 9381 §5.4.2.2: k = string_to_int(SHA-512(h[32:64] ‖ h_string)) mod q.
	kh := sha512.New()
	kh.Write(h[32:])
	kh.Write(hString)
	k, err := edwards25519.NewScalar().SetUniformBytes(kh.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("prove: nonce: %w", err)
	}

	kB := new(edwards25519.Point).ScalarBaseMult(k)
	kH := new(edwards25519.Point).ScalarMult(k, H)
	cBytes := challenge(Y, H, Gamma, kB, kH)
	c, err := scalarFromChallenge(cBytes)
	if err != nil {
		return nil, fmt.Errorf("prove: challenge: %w", err)
	}
	s := edwards25519.NewScalar().MultiplyAdd(c, x, k) // s = k + c·x mod q

	pi := make([]byte, 0, ProofSize)
	pi = append(pi, Gamma.Bytes()...)
	pi = append(pi, cBytes...)
	pi = append(pi, s.Bytes()...)
	return pi, nil
}

// Verify checks pi for alpha under pk (RFC 9381 §5.3 with validate_key =
// TRUE) and returns beta, the 64-byte VRF output. It refuses a public key
// that is not a canonical RFC 8032 encoding or whose cofactor multiple is the
// identity, a Gamma that is not a canonical encoding of a curve point, and
// an s that is not reduced modulo q.
func Verify(pk ed25519.PublicKey, proof, alpha []byte) ([]byte, error) {
	if len(pk) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("verify: public key is %d bytes, want %d: %w", len(pk), ed25519.PublicKeySize, ErrInvalidKey)
	}
	if len(alpha) > MaxAlphaSize {
		return nil, fmt.Errorf("verify: alpha is %d bytes, limit %d: %w", len(alpha), MaxAlphaSize, ErrInput)
	}
	Y, err := stringToPoint(pk)
	if err != nil {
		return nil, fmt.Errorf("verify: public key: %v: %w", err, ErrInvalidKey)
	}
	// RFC 9381 §5.4.5 ECVRF_validate_key: cofactor·Y must not be the identity.
	if isSmallOrder(Y) {
		return nil, fmt.Errorf("verify: public key has small order: %w", ErrInvalidKey)
	}
	Gamma, c, s, err := decodeProof(proof)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	H, err := encodeToCurve(pk, alpha)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	negC := edwards25519.NewScalar().Negate(c)
	// U = s·B − c·Y
	U := new(edwards25519.Point).VarTimeDoubleScalarBaseMult(negC, Y, s)
	// V = s·H − c·Gamma
	V := new(edwards25519.Point).VarTimeMultiScalarMult(
		[]*edwards25519.Scalar{s, negC}, []*edwards25519.Point{H, Gamma})
	c2 := challenge(Y, H, Gamma, U, V)
	if subtle.ConstantTimeCompare(c2, proof[ptLen:ptLen+cLen]) != 1 {
		return nil, fmt.Errorf("verify: challenge mismatch: %w", ErrInvalidProof)
	}
	return proofToHash(Gamma), nil
}

// ProofToHash returns beta for a proof without verifying it (RFC 9381
// §5.2). The proof is decoded with the same strict rules as Verify. Never
// trust its result unless Verify accepted the proof.
func ProofToHash(proof []byte) ([]byte, error) {
	Gamma, _, _, err := decodeProof(proof)
	if err != nil {
		return nil, fmt.Errorf("proof to hash: %w", err)
	}
	return proofToHash(Gamma), nil
}

// proofToHash is beta = SHA-512(suite ‖ 0x03 ‖ point_to_string(8·Gamma) ‖ 0x00).
func proofToHash(Gamma *edwards25519.Point) []byte {
	g8 := new(edwards25519.Point).MultByCofactor(Gamma)
	h := sha512.New()
	h.Write([]byte{suiteString, proofHashFront})
	h.Write(g8.Bytes())
	h.Write([]byte{proofHashBack})
	return h.Sum(nil)
}

// decodeProof is ECVRF_decode_proof (RFC 9381 §5.4.4).
func decodeProof(pi []byte) (Gamma *edwards25519.Point, c, s *edwards25519.Scalar, err error) {
	if len(pi) != ProofSize {
		return nil, nil, nil, fmt.Errorf("proof is %d bytes, want %d: %w", len(pi), ProofSize, ErrInvalidProof)
	}
	Gamma, err = stringToPoint(pi[:ptLen])
	if err != nil {
		return nil, nil, nil, fmt.Errorf("proof Gamma: %v: %w", err, ErrInvalidProof)
	}
	c, err = scalarFromChallenge(pi[ptLen : ptLen+cLen])
	if err != nil {
		return nil, nil, nil, fmt.Errorf("proof c: %v: %w", err, ErrInvalidProof)
	}
	s, err = edwards25519.NewScalar().SetCanonicalBytes(pi[ptLen+cLen:])
	if err != nil {
		return nil, nil, nil, fmt.Errorf("proof s is not below the group order: %w", ErrInvalidProof)
	}
	return Gamma, c, s, nil
}

// scalarFromChallenge reads a 16-byte little-endian c (always < q).
func scalarFromChallenge(c []byte) (*edwards25519.Scalar, error) {
	var buf [32]byte
	copy(buf[:], c)
	return edwards25519.NewScalar().SetCanonicalBytes(buf[:])
}

// challenge is ECVRF_challenge_generation (RFC 9381 §5.4.3): the first 16
// bytes of SHA-512(suite ‖ 0x02 ‖ P1 ‖ … ‖ P5 ‖ 0x00).
func challenge(points ...*edwards25519.Point) []byte {
	h := sha512.New()
	h.Write([]byte{suiteString, challengeFront})
	for _, p := range points {
		h.Write(p.Bytes())
	}
	h.Write([]byte{challengeBack})
	return h.Sum(nil)[:cLen]
}

// encodeToCurve is ECVRF_encode_to_curve_try_and_increment (RFC 9381
// §5.4.1.1) with encode_to_curve_salt = PK_string: the first counter value
// ctr in 0..255 for which SHA-512(suite ‖ 0x01 ‖ pk ‖ alpha ‖ ctr ‖ 0x00)[0:32]
// decodes to a point gives H = 8·point.
func encodeToCurve(pk, alpha []byte) (*edwards25519.Point, error) {
	buf := make([]byte, 0, 2+len(pk)+len(alpha)+2)
	buf = append(buf, suiteString, encodeFront)
	buf = append(buf, pk...)
	buf = append(buf, alpha...)
	buf = append(buf, 0, encodeBack)
	ctrAt := len(buf) - 2
	for ctr := 0; ctr < 256; ctr++ {
		buf[ctrAt] = byte(ctr)
		sum := sha512.Sum512(buf)
		p, err := stringToPoint(sum[:32])
		if err != nil {
			continue
		}
		return p.MultByCofactor(p), nil
	}
	// Probability 2^-256; the RFC leaves the loop unbounded.
	return nil, fmt.Errorf("encode to curve: no point after 256 tries: %w", ErrInput)
}

// stringToPoint decodes 32 bytes as RFC 8032 §5.1.3 does, strictly: a y
// coordinate ≥ p and the encoding of x = 0 with the sign bit set are refused
// (filippo.io/edwards25519 accepts both, so a decoded point must re-encode
// to the same bytes).
func stringToPoint(b []byte) (*edwards25519.Point, error) {
	if len(b) != 32 {
		return nil, fmt.Errorf("point is %d bytes, want 32", len(b))
	}
	p, err := new(edwards25519.Point).SetBytes(b)
	if err != nil {
		return nil, errors.New("not a curve point")
	}
	if !bytes.Equal(p.Bytes(), b) {
		return nil, errors.New("non-canonical point encoding")
	}
	return p, nil
}

// isSmallOrder reports whether 8·p is the identity.
func isSmallOrder(p *edwards25519.Point) bool {
	q := new(edwards25519.Point).MultByCofactor(p)
	return q.Equal(edwards25519.NewIdentityPoint()) == 1
}
