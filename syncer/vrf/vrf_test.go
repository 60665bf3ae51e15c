package vrf

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"testing"

	"filippo.io/edwards25519"
)

// rfcVectors are RFC 9381 Appendix B.3 (ECVRF-EDWARDS25519-SHA512-TAI),
// Examples 16, 17 and 18: the secret key (Ed25519 seed), public key, alpha,
// the intermediate H = encode_to_curve(PK, alpha), the proof pi and the
// output beta.
var rfcVectors = []struct {
	name                     string
	sk, pk, alpha, h, pi, bt string
}{
	{
		name:  "example16",
		sk:    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
		pk:    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
		alpha: "",
		h:     "91bbed02a99461df1ad4c6564a5f5d829d0b90cfc7903e7a5797bd658abf3318",
		pi:    "8657106690b5526245a92b003bb079ccd1a92130477671f6fc01ad16f26f723f26f8a57ccaed74ee1b190bed1f479d9727d2d0f9b005a6e456a35d4fb0daab1268a1b0db10836d9826a528ca76567805",
		bt:    "90cf1df3b703cce59e2a35b925d411164068269d7b2d29f3301c03dd757876ff66b71dda49d2de59d03450451af026798e8f81cd2e333de5cdf4f3e140fdd8ae",
	},
	{
		name:  "example17",
		sk:    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
		pk:    "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
		alpha: "72",
		h:     "5b659fc3d4e9263fd9a4ed1d022d75eaacc20df5e09f9ea937502396598dc551",
		pi:    "f3141cd382dc42909d19ec5110469e4feae18300e94f304590abdced48aed5933bf0864a62558b3ed7f2fea45c92a465301b3bbf5e3e54ddf2d935be3b67926da3ef39226bbc355bdc9850112c8f4b02",
		bt:    "eb4440665d3891d668e7e0fcaf587f1b4bd7fbfe99d0eb2211ccec90496310eb5e33821bc613efb94db5e5b54c70a848a0bef4553a41befc57663b56373a5031",
	},
	{
		name:  "example18",
		sk:    "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
		pk:    "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
		alpha: "af82",
		h:     "bf4339376f5542811de615e3313d2b36f6f53c0acfebb482159711201192576a",
		pi:    "9bc0f79119cc5604bf02d23b4caede71393cedfbb191434dd016d30177ccbf8096bb474e53895c362d8628ee9f9ea3c0e52c7a5c691b6c18c9979866568add7a2d41b00b05081ed0f58ee5e31b3a970e",
		bt:    "645427e5d00c62a23fb703732fa5d892940935942101e456ecca7bb217c61c452118fec1219202a0edcf038bb6373241578be7217ba85a2687f7a0310b2df19f",
	},
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

func TestRFC9381Vectors(t *testing.T) {
	for _, v := range rfcVectors {
		t.Run(v.name, func(t *testing.T) {
			sk := ed25519.NewKeyFromSeed(unhex(t, v.sk))
			pk := unhex(t, v.pk)
			if got := []byte(sk.Public().(ed25519.PublicKey)); !bytes.Equal(got, pk) {
				t.Fatalf("public key = %x, want %s", got, v.pk)
			}
			alpha := unhex(t, v.alpha)
			H, err := encodeToCurve(pk, alpha)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(H.Bytes()); got != v.h {
				t.Errorf("H = %s, want %s", got, v.h)
			}
			pi, err := Prove(sk, alpha)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(pi); got != v.pi {
				t.Errorf("pi =\n %s, want\n %s", got, v.pi)
			}
			beta, err := Verify(pk, unhex(t, v.pi), alpha)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got := hex.EncodeToString(beta); got != v.bt {
				t.Errorf("beta =\n %s, want\n %s", got, v.bt)
			}
			beta2, err := ProofToHash(unhex(t, v.pi))
			if err != nil || !bytes.Equal(beta2, beta) {
				t.Errorf("ProofToHash = %x, %v; want %x", beta2, err, beta)
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	v := rfcVectors[1]
	pk := unhex(t, v.pk)
	pi := unhex(t, v.pi)
	alpha := unhex(t, v.alpha)
	otherPK := unhex(t, rfcVectors[0].pk)

	// Identity point (small order) and a non-canonical encoding of y = 1
	// (y = p + 1), both as public keys.
	identity := make([]byte, 32)
	identity[0] = 1
	nonCanonical := unhex(t, "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")
	// x = 0 with the sign bit set: y = 1 with bit 255 set.
	negZero := append([]byte{}, identity...)
	negZero[31] |= 0x80
	// A torsion point of order 8 that is not the identity (y = 0 would be
	// order 4); use 8·(random) = identity test through the order-2 point
	// (0, -1): y = p - 1.
	order2 := unhex(t, "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")

	withS := func(s []byte) []byte {
		p := append([]byte{}, pi...)
		copy(p[48:], s)
		return p
	}
	// q = 2^252 + 27742317777372353535851937790883648493, little-endian.
	q := unhex(t, "edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
	withGamma := func(g []byte) []byte {
		p := append([]byte{}, pi...)
		copy(p, g)
		return p
	}

	cases := []struct {
		name  string
		pk    []byte
		pi    []byte
		alpha []byte
		want  error
	}{
		{"wrong alpha", pk, pi, []byte("x"), ErrInvalidProof},
		{"empty alpha", pk, pi, nil, ErrInvalidProof},
		{"wrong key", otherPK, pi, alpha, ErrInvalidProof},
		{"short proof", pk, pi[:79], alpha, ErrInvalidProof},
		{"long proof", pk, append(append([]byte{}, pi...), 0), alpha, ErrInvalidProof},
		{"nil proof", pk, nil, alpha, ErrInvalidProof},
		{"s = q", pk, withS(q), alpha, ErrInvalidProof},
		{"s all ones", pk, withS(bytes.Repeat([]byte{0xff}, 32)), alpha, ErrInvalidProof},
		{"Gamma not on curve", pk, withGamma(unhex(t, "0200000000000000000000000000000000000000000000000000000000000000")), alpha, ErrInvalidProof},
		{"Gamma non-canonical", pk, withGamma(nonCanonical), alpha, ErrInvalidProof},
		{"Gamma identity", pk, withGamma(identity), alpha, ErrInvalidProof},
		{"pk identity", identity, pi, alpha, ErrInvalidKey},
		{"pk order 2", order2, pi, alpha, ErrInvalidKey},
		{"pk non-canonical", nonCanonical, pi, alpha, ErrInvalidKey},
		{"pk x=0 sign bit", negZero, pi, alpha, ErrInvalidKey},
		{"pk short", pk[:31], pi, alpha, ErrInvalidKey},
		{"alpha too long", pk, pi, make([]byte, MaxAlphaSize+1), ErrInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			beta, err := Verify(c.pk, c.pi, c.alpha)
			if !errors.Is(err, c.want) {
				t.Fatalf("Verify = %x, %v; want %v", beta, err, c.want)
			}
			if beta != nil {
				t.Fatalf("beta returned with error")
			}
		})
	}
}

func TestEveryBitFlipRefused(t *testing.T) {
	for _, v := range rfcVectors {
		pk, pi, alpha := unhex(t, v.pk), unhex(t, v.pi), unhex(t, v.alpha)
		for i := range len(pi) * 8 {
			bad := append([]byte{}, pi...)
			bad[i/8] ^= 1 << (i % 8)
			if _, err := Verify(pk, bad, alpha); err == nil {
				t.Fatalf("%s: flipping bit %d of pi still verifies", v.name, i)
			}
		}
		for i := range len(pk) * 8 {
			bad := append([]byte{}, pk...)
			bad[i/8] ^= 1 << (i % 8)
			if _, err := Verify(bad, pi, alpha); err == nil {
				t.Fatalf("%s: flipping bit %d of pk still verifies", v.name, i)
			}
		}
	}
}

func TestSmallOrderKeysRefused(t *testing.T) {
	// Every point of order dividing 8 is refused as a public key: build
	// them as multiples of a point T of order 8 (T = l·P for a random P,
	// l the group order, i.e. the torsion component).
	l := unhex(t, "edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
	// l ≡ 0 mod l, so multiply by l via l-1 then add P.
	lm1 := append([]byte{}, l...)
	lm1[0]--
	sLm1, err := edwards25519.NewScalar().SetCanonicalBytes(lm1)
	if err != nil {
		t.Fatal(err)
	}
	// Find a point whose torsion component T has order exactly 8.
	var T *edwards25519.Point
	for i := 0; T == nil; i++ {
		seed := sha512.Sum512([]byte{byte(i)})
		P, err := new(edwards25519.Point).SetBytes(mustPoint(t, seed[:32]))
		if err != nil {
			t.Fatal(err)
		}
		c := new(edwards25519.Point).ScalarMult(sLm1, P) // (l-1)·P
		c.Add(c, P)                                      // l·P: the torsion part
		c4 := new(edwards25519.Point).Double(c)
		c4.Double(c4)
		if c4.Equal(edwards25519.NewIdentityPoint()) == 0 {
			T = c
		}
	}
	acc := edwards25519.NewIdentityPoint()
	sk := ed25519.NewKeyFromSeed(unhex(t, rfcVectors[0].sk))
	pi, err := Prove(sk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := Verify(acc.Bytes(), pi, nil); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("torsion point %d·T: err = %v, want ErrInvalidKey", i, err)
		}
		acc.Add(acc, T)
	}
}

// mustPoint finds the first y = b, b+1, … that decodes as a point.
func mustPoint(t *testing.T, b []byte) []byte {
	t.Helper()
	c := append([]byte{}, b...)
	c[31] &= 0x7f
	for range 1000 {
		if _, err := stringToPoint(c); err == nil {
			return c
		}
		c[0]++
	}
	t.Fatal("no point found")
	return nil
}

func TestProveRefusesBadKey(t *testing.T) {
	sk := ed25519.NewKeyFromSeed(unhex(t, rfcVectors[0].sk))
	bad := append(ed25519.PrivateKey{}, sk...)
	bad[40] ^= 1
	if _, err := Prove(bad, nil); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("mismatched public half: err = %v", err)
	}
	if _, err := Prove(sk[:32], nil); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("short key: err = %v", err)
	}
}

func TestRoundTripRandomKeys(t *testing.T) {
	for i := range 16 {
		seed := sha512.Sum512([]byte{byte(i)})
		sk := ed25519.NewKeyFromSeed(seed[:32])
		alpha := seed[32 : 32+i]
		pi, err := Prove(sk, alpha)
		if err != nil {
			t.Fatal(err)
		}
		beta, err := Verify(sk.Public().(ed25519.PublicKey), pi, alpha)
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if len(beta) != OutputSize {
			t.Fatalf("beta is %d bytes", len(beta))
		}
	}
}

func FuzzVerify(f *testing.F) {
	for _, v := range rfcVectors {
		f.Add(unhex(f, v.pk), unhex(f, v.pi), unhex(f, v.alpha))
	}
	f.Add(make([]byte, 32), make([]byte, 80), []byte{})
	f.Fuzz(func(t *testing.T, pk, pi, alpha []byte) {
		beta, err := Verify(pk, pi, alpha)
		if err != nil {
			if beta != nil {
				t.Fatal("beta with error")
			}
			return
		}
		if len(beta) != OutputSize {
			t.Fatalf("beta is %d bytes", len(beta))
		}
		b2, err := ProofToHash(pi)
		if err != nil || !bytes.Equal(b2, beta) {
			t.Fatalf("ProofToHash disagrees with Verify: %x %v", b2, err)
		}
	})
}

func BenchmarkProve(b *testing.B) {
	sk := ed25519.NewKeyFromSeed(unhex(b, rfcVectors[0].sk))
	alpha := make([]byte, 53)
	for b.Loop() {
		if _, err := Prove(sk, alpha); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	sk := ed25519.NewKeyFromSeed(unhex(b, rfcVectors[0].sk))
	pk := sk.Public().(ed25519.PublicKey)
	alpha := make([]byte, 53)
	pi, err := Prove(sk, alpha)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Verify(pk, pi, alpha); err != nil {
			b.Fatal(err)
		}
	}
}
