package plugins

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// TestSweepModes: the sweep's prefetching changes no byte: with and
// without it (sweepPrefetch), on 1 to 3 cores, the new weights,
// momentum, the aggregate's hash and the state's hashes are the same, and
// the hashes are BLAKE3 of the bytes — at sizes where the runs of
// sweepRun blocks end inside, on and past the last block, and the last
// block is short or full.
func TestSweepModes(t *testing.T) {
	defer func(p bool) { sweepPrefetch = p }(sweepPrefetch)
	r := rand.New(rand.NewPCG(81, 2))
	head := make([]byte, 1000)
	for _, n := range []int{2*leafCoords + 5, sweepRun * leafCoords, sweepRun*leafCoords + 1, (2*sweepRun+3)*leafCoords - 7, 37 * leafCoords} {
		const k = 3
		var srcs []*source
		for range k {
			srcs = append(srcs, bytesSource(syncer.EncodeF32(adversarial(r, n))))
		}
		w, m := syncer.EncodeF32(adversarial(r, n)), syncer.EncodeF32(adversarial(r, n))
		agg := make([]byte, 4*n)
		runKernel(meanKernel(srcs, 0, n), n, f32View(agg))
		type result struct {
			wo, mo []byte
			hash   wire.Hash
			state  syncer.StateHashes
		}
		var first *result
		for _, procs := range []int{1, 2, 3} {
			for _, prefetch := range []bool{false, true} {
				what := fmt.Sprintf("n=%d procs=%d prefetch=%v", n, procs, prefetch)
				sweepPrefetch = prefetch
				old := runtime.GOMAXPROCS(procs)
				res := result{wo: make([]byte, 4*n), mo: make([]byte, 4*n)}
				fz := &fusion{n: n, pending: true, kernel: meanKernel(srcs, 0, n), head: head, srcs: srcs}
				fz.sweep(bytesSource(w), bytesSource(m), plainDest(res.wo), plainDest(res.mo), 0.7, 0.9, true)
				runtime.GOMAXPROCS(old)
				if !fz.swept || fz.state == nil {
					t.Fatalf("%s: swept %v, state %v", what, fz.swept, fz.state)
				}
				res.hash, res.state = fz.hash, *fz.state
				if first == nil {
					if want := wire.ContentHash(agg); res.hash != want {
						t.Fatalf("%s: aggregate hash %s, BLAKE3 of the Mean %s", what, res.hash, want)
					}
					if want := wire.ContentHash(append(append([]byte(nil), head...), res.wo...)); res.state.Weights != want {
						t.Fatalf("%s: weights hash %s, BLAKE3 of the blob %s", what, res.state.Weights, want)
					}
					if want := wire.ContentHash(res.mo); res.state.Momentum != want {
						t.Fatalf("%s: momentum hash %s, BLAKE3 %s", what, res.state.Momentum, want)
					}
					first = &res
					continue
				}
				if !bytes.Equal(res.wo, first.wo) || !bytes.Equal(res.mo, first.mo) || res.hash != first.hash || res.state != first.state {
					t.Fatalf("%s: differs from procs=1 without the prefetch: weights %s, momentum %s, hash %v, state %v", what,
						firstDiff(res.wo, first.wo, 4), firstDiff(res.mo, first.mo, 4), res.hash == first.hash, res.state == first.state)
				}
			}
		}
	}
}

// TestPrefetchLines: for K = 6 the three leaf hashes' lists hold every
// cache line of block 0 of all ten streams (inputs, weights, momentum and
// the two outputs), at any alignment, and nothing outside them; streams
// shorter than a block are left out.
func TestPrefetchLines(t *testing.T) {
	mem := make([]byte, 11*(leafBytes+64)+64)
	for _, shift := range []int{0, 4, 60} {
		var streams [][]byte
		want := map[uintptr]bool{}
		for s := range 10 {
			b := mem[s*(leafBytes+64)+shift:][:leafBytes+4*s]
			streams = append(streams, b)
			p := uintptr(unsafe.Pointer(&b[0]))
			for a := p; a < p+leafBytes; a++ {
				want[a&^63] = true
			}
		}
		streams = append(streams, mem[len(mem)-100:]) // shorter than a block
		pf := prefetchLines(streams)
		got := map[uintptr]bool{}
		for _, l := range pf {
			for _, a := range l {
				if !want[a] {
					t.Fatalf("shift %d: line %#x is no stream's block 0", shift, a)
				}
				got[a] = true
			}
		}
		if len(got) != len(want) {
			t.Fatalf("shift %d: %d of the %d lines listed", shift, len(got), len(want))
		}
	}
	if prefetchLines([][]byte{make([]byte, 100)}) != nil {
		t.Fatal("a list for streams shorter than a block")
	}
}
