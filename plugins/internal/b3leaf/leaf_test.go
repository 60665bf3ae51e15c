package b3leaf

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	zeebo "github.com/zeebo/blake3"
	"lukechampine.com/blake3/guts"
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
		if got := cvAVX2(buf, c, nil, 0); got != want {
			t.Fatalf("case %d counter %#x: cvAVX2 %08x, guts %08x", i, c, got, want)
		}
	}
}

// TestLeafCVTree checks CV, the kernel and the fallback, against an
// independent BLAKE3 (github.com/zeebo/blake3): the root of 2, 4 and 8
// leaves merged from CV's chaining values must be Sum256 of the bytes.
func TestLeafCVTree(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 4))
	for _, kernel := range []bool{true, false} {
		for _, leaves := range []int{2, 4, 8} {
			buf := make([]byte, leaves*Size)
			for i := 0; i < 20; i++ {
				for k := range buf {
					buf[k] = byte(rng.Uint32())
				}
				var got [32]byte
				run := func() { got = treeRoot(buf) }
				if kernel {
					run()
				} else {
					withFallback(t, run)
				}
				if want := zeebo.Sum256(buf); got != want {
					t.Fatalf("kernel %v, %d leaves, case %d: root %x, zeebo %x", kernel, leaves, i, got, want)
				}
			}
		}
	}
}

// treeRoot is BLAKE3-256 of buf (a power-of-two number ≥ 2 of leaves) from
// the leaves' CV.
func treeRoot(buf []byte) [32]byte {
	var cvs [][8]uint32
	for k := 0; k*Size < len(buf); k++ {
		cvs = append(cvs, CV((*[Size]byte)(buf[k*Size:]), uint64(k)*16))
	}
	for len(cvs) > 2 {
		next := cvs[:0:0]
		for j := 0; j < len(cvs); j += 2 {
			next = append(next, guts.ChainingValue(guts.ParentNode(cvs[j], cvs[j+1], &guts.IV, 0)))
		}
		cvs = next
	}
	root := guts.ParentNode(cvs[0], cvs[1], &guts.IV, 0)
	root.Flags |= guts.FlagRoot
	b := guts.WordsToBytes(guts.CompressNode(root))
	return [32]byte(b[:32])
}

// FuzzLeafCV: the kernel is guts for any leaf (data repeated to 16 KiB)
// and counter.
func FuzzLeafCV(f *testing.F) {
	f.Add([]byte{}, uint64(0))
	f.Add([]byte{1, 2, 3}, uint64(1<<32-8))
	f.Add([]byte("tenzro"), uint64(1<<64-16))
	f.Fuzz(func(t *testing.T, data []byte, counter uint64) {
		buf := new([Size]byte)
		for k := 0; len(data) > 0 && k < Size; k += len(data) {
			copy(buf[k:], data)
		}
		want := cvGuts(buf, counter)
		if got := cvAVX2(buf, counter, nil, 0); got != want {
			t.Fatalf("counter %#x: kernel %08x, guts %08x", counter, got, want)
		}
		if got := CV(buf, counter); got != want {
			t.Fatalf("counter %#x: CV %08x, guts %08x", counter, got, want)
		}
	})
}

// TestLeafCVPrefetch: a prefetch list of any content never changes a CV —
// lists of addresses in buf itself (the lines being hashed), in the list,
// of other live memory, of small and of random user-space values, each
// moved by a delta — the kernel, CVPrefetch and the fallback all give guts'
// value.
func TestLeafCVPrefetch(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 5))
	buf := new([Size]byte)
	lines := new(Lines)
	other := make([]byte, 1<<20)
	base := func(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
	for i := 0; i < 400; i++ {
		for k := range buf {
			buf[k] = byte(rng.Uint32())
		}
		kind := i % 5
		for k := range lines {
			switch kind {
			case 0: // the leaf's own lines, in order
				lines[k] = base(buf[:]) + uintptr(64*k%Size)
			case 1: // the leaf's own bytes, anywhere
				lines[k] = base(buf[:]) + uintptr(rng.IntN(Size))
			case 2: // the list itself
				lines[k] = uintptr(unsafe.Pointer(lines)) + uintptr(rng.IntN(PrefetchLines))*8
			case 3: // other live memory
				lines[k] = base(other) + uintptr(rng.IntN(len(other)))
			default: // arbitrary values: small, or anywhere below 2^47
				if rng.IntN(2) == 0 {
					lines[k] = uintptr(rng.IntN(1 << 16))
				} else {
					lines[k] = uintptr(rng.Uint64N(1 << 47))
				}
			}
		}
		delta := uintptr(0)
		if kind == 4 || i%3 == 0 {
			delta = uintptr(rng.IntN(1 << 20))
		}
		c := rng.Uint64N(1 << 40)
		want := cvGuts(buf, c)
		if got := CVPrefetch(buf, c, lines, delta); got != want {
			t.Fatalf("case %d (list kind %d): CVPrefetch %08x, guts %08x", i, kind, got, want)
		}
		if got := cvAVX2(buf, c, lines, delta); got != want {
			t.Fatalf("case %d (list kind %d): cvAVX2 with a list %08x, guts %08x", i, kind, got, want)
		}
		withFallback(t, func() {
			if got := CVPrefetch(buf, c, lines, delta); got != want {
				t.Fatalf("case %d (list kind %d): fallback CVPrefetch %08x, guts %08x", i, kind, got, want)
			}
		})
	}
}
