package syncer

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exactFMA32 computes a*b+c exactly with big.Float and rounds once.
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func TestFMA32MatchesExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := [][3]float32{{1, 1, 0}, {0.7, -1.9, 3}, {1 + 1.0/(1<<23), 1 - 1.0/(1<<23), -1}, {3e38, 2, -3e38}}
	for i := 0; i < 200000; i++ {
		cases = append(cases, [3]float32{
			math.Float32frombits(r.Uint32() & 0xbfffffff),
			float32(r.NormFloat64()), float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))})
	}
	for _, c := range cases {
		got, want := FMA32(c[0], c[1], c[2]), exactFMA32(c[0], c[1], c[2])
		if math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
			t.Fatalf("FMA32(%g,%g,%g) = %g, want %g", c[0], c[1], c[2], got, want)
		}
	}
}

func TestBF16RoundTrip(t *testing.T) {
	tests := []struct {
		in   float32
		want uint16
	}{{1, 0x3f80}, {-2, 0xc000}, {1.00390625, 0x3f80}, {1.01171875, 0x3f82}}
	for _, tc := range tests {
		if got := F32ToBF16(tc.in); got != tc.want {
			t.Errorf("F32ToBF16(%v) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}
