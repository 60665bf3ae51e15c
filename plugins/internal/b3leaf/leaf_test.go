package b3leaf

import (
	"math/rand/v2"
	"testing"
)

// withFallback runs f with the kernel off (the fallback path).
func withFallback(t testing.TB, f func()) {
	t.Helper()
	old := useAVX2
	useAVX2 = false
	defer func() { useAVX2 = old }()
	f()
}

func TestLeafCV(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 3))
	buf := new([Size]byte)
	counters := []uint64{0, 16, 1 << 20, 1<<32 - 16, 1<<32 - 8, 1<<32 - 3, 1 << 32, 1<<40 + 5, 1<<64 - 16}
	for i := 0; i < 3000; i++ {
		for k := range buf {
			buf[k] = byte(rng.Uint32())
		}
		c := rng.Uint64()
		switch {
		case i < len(counters):
			c = counters[i]
		case i%3 == 0:
			c = rng.Uint64N(1 << 34)
		}
		want := cvGuts(buf, c)
		if got := CV(buf, c); got != want {
			t.Fatalf("case %d counter %#x: CV %08x, guts %08x", i, c, got, want)
		}
		if got := cvAVX2(buf, c); got != want {
			t.Fatalf("case %d counter %#x: cvAVX2 %08x, guts %08x", i, c, got, want)
		}
	}
}
