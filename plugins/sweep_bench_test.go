//go:build linux

package plugins

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tenzro/train/machine"
)

// BenchmarkSweep times the fused finalize's sweep (fused.go) in process on
// the black-box bench's shape — K = 6, N = 8.65M f32 (207 MB of inputs, no
// cache holds them), Nesterov with momentum, the new state's hashes behind
// a 1000-byte header — beside its parts, all in the same run:
//
//   - read-once: every input byte read once (a Go loop over uint64s);
//   - mean: the Mean kernel alone on every core;
//   - parts/*: one core, block by block as the sweep goes: the Mean alone,
//     Mean + step, and Mean + step + the three 16 KiB leaf hashes;
//   - sweep/procs=P: the sweep itself, on P cores;
//   - sweep/procs=P/paired: the sweep with and without its prefetch.
//
// Each reports cpu-ms/op (the process's user + system CPU per op) beside
// ns/op: on a shared machine the CPU a sweep needs moves less than its
// wall time. What a change to the sweep buys is measured here first, then
// black box by bench/plugins/node_finalize.py.
func BenchmarkSweep(b *testing.B) {
	const k, n = 6, 8_650_000
	r := rand.New(rand.NewPCG(1, 2))
	vals := func() []byte {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*n)
	}
	var ins [][]byte
	var srcs []*source
	for range k {
		x := vals()
		ins = append(ins, x)
		srcs = append(srcs, bytesSource(x))
	}
	w, m := vals(), vals()
	wo, mo := make([]byte, 4*n), make([]byte, 4*n)
	copy(wo, w) // fault the outputs' pages in: no sub-benchmark pays for them
	copy(mo, m)
	head := make([]byte, 1000)
	run := func(name string, procs int, op func()) {
		b.Run(name, func(b *testing.B) {
			if procs > 0 {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			}
			b.SetBytes(int64(k) * 4 * n)
			c0 := cpuTime()
			for b.Loop() {
				op()
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
	run("read-once", 1, func() {
		var s uint64
		for _, x := range ins {
			u := unsafe.Slice((*uint64)(unsafe.Pointer(&x[0])), len(x)/8)
			var a0, a1, a2, a3 uint64
			for i := 0; i+4 <= len(u); i += 4 {
				a0 += u[i]
				a1 += u[i+1]
				a2 += u[i+2]
				a3 += u[i+3]
			}
			s += a0 ^ a1 ^ a2 ^ a3
		}
		sweepSink = s
	})
	run("mean", 0, func() { runKernel(meanKernel(srcs, 0, n), n, f32View(wo)) })
	for _, part := range []string{"mean", "mean+step", "mean+step+hash"} {
		run("parts/"+part, 1, func() {
			kern := meanKernel(srcs, 0, n)()
			buf := make([]float32, leafCoords)
			th := newTreeHash(int64(n) * 4)
			for b0 := 0; b0 < n; b0 += leafCoords {
				b1 := min(b0+leafCoords, n)
				g := buf[:b1-b0]
				kern(b0, b1, g)
				if part == "mean" {
					continue
				}
				gb := unsafe.Slice((*byte)(unsafe.Pointer(&g[0])), 4*len(g))
				nesterovRange(machine.F32, w[4*b0:4*b1], wo[4*b0:4*b1], m[4*b0:4*b1], mo[4*b0:4*b1], gb, 0, b1-b0, true, 0.7, 0.9, true)
				if part == "mean+step+hash" && len(gb) == leafBytes {
					i := b0 / leafCoords
					th.leaf(i, gb, leafPrefetch{})
					th.leaf(i, wo[4*b0:4*b1], leafPrefetch{})
					th.leaf(i, mo[4*b0:4*b1], leafPrefetch{})
				}
			}
		})
	}
	for _, procs := range []int{1, 2} {
		run(fmt.Sprintf("sweep/procs=%d", procs), procs, func() {
			fz := &fusion{n: n, pending: true, kernel: meanKernel(srcs, 0, n), head: head, srcs: srcs}
			fz.sweep(bytesSource(w), bytesSource(m), plainDest(wo), plainDest(mo), 0.7, 0.9, true)
		})
		// paired: each op sweeps with and without the prefetch
		// (sweepPrefetch), the order alternating from op to op, so that a
		// shared machine's load and any drift fall on both alike; reports
		// each one's ms and cpu-ms per sweep.
		b.Run(fmt.Sprintf("sweep/procs=%d/paired", procs), func(b *testing.B) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			defer func(p bool) { sweepPrefetch = p }(sweepPrefetch)
			names := []string{"plain", "prefetch"}
			var wall, cpu [2]time.Duration
			op := 0
			for b.Loop() {
				for j := range 2 {
					mode := (op + j) % 2
					sweepPrefetch = mode == 1
					t0, c0 := time.Now(), cpuTime()
					fz := &fusion{n: n, pending: true, kernel: meanKernel(srcs, 0, n), head: head, srcs: srcs}
					fz.sweep(bytesSource(w), bytesSource(m), plainDest(wo), plainDest(mo), 0.7, 0.9, true)
					wall[mode] += time.Since(t0)
					cpu[mode] += cpuTime() - c0
				}
				op++
			}
			for i, name := range names {
				b.ReportMetric(float64(wall[i])/1e6/float64(b.N), name+"-ms")
				b.ReportMetric(float64(cpu[i])/1e6/float64(b.N), name+"-cpu-ms")
			}
		})
	}
}

var sweepSink uint64

// cpuTime is the user + system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
