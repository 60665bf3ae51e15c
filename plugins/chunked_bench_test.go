package plugins_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	bench "github.com/tenzro/train/bench/plugins"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
)

// BenchmarkChunkedPasses times the distance-based rules on K=6, N=2^24 f32
// (the shape of bench/plugins) run whole under the default page limit and
// in chunked passes under small limits, against the native Go loop of
// bench/plugins, all in the same run. Not run by `go test` (benchmark):
//
//	go test ./plugins -run XXX -bench ChunkedPasses -benchtime=2x
func BenchmarkChunkedPasses(b *testing.B) {
	const k, n = 6, 1 << 24
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 1))
	x := make([][]float32, k)
	in := make([][]byte, k)
	for i := range x {
		x[i] = make([]float32, n)
		in[i] = make([]byte, 4*n)
		for j := range x[i] {
			x[i][j] = float32(r.NormFloat64())
			binary.LittleEndian.PutUint32(in[i][4*j:], math.Float32bits(x[i][j]))
		}
	}
	cases := []struct {
		ref    string
		native func(out []float32)
	}{
		{"Krum{f=1}", func(o []float32) { bench.NativeKrum(x, 1, o) }},
		{"MultiKrum{f=1,m=3}", func(o []float32) { bench.NativeMultiKrum(x, 1, 3, o) }},
		{"Bulyan{f=0}", func(o []float32) { bench.NativeBulyan(x, 0, o) }},
		{"GeometricMedian{iterations=4}", func(o []float32) { bench.NativeGeoMedian(x, 4, 1e-6, o) }},
		{"CenteredClipping{tau=10,iterations=1}", func(o []float32) { bench.NativeCC(x, 10, 1, o) }},
	}
	limits := []uint32{0, 4096, 1024} // default (whole), 256 MiB, 64 MiB
	engines := make([]*plugins.Engine, len(limits))
	for i, pages := range limits {
		e, err := plugins.NewEngine(ctx, plugins.Config{MemoryPages: pages})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close(ctx)
		engines[i] = e
	}
	out := make([]float32, n)
	run := func(e *plugins.Engine, ref string) (time.Duration, []byte) {
		rr, err := e.ResolveRule(ctx, ref, nil, k, k)
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		res, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: n, Inputs: in})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(t), res.Aggregate
	}
	for _, tc := range cases {
		b.Run(tc.ref, func(b *testing.B) {
			times := make([]time.Duration, len(engines))
			var native time.Duration
			for _, e := range engines { // warm-up: one untimed call per engine
				run(e, tc.ref)
			}
			tc.native(out)
			for i := 0; i < b.N; i++ {
				var first []byte
				for j, e := range engines {
					d, agg := run(e, tc.ref)
					times[j] += d
					if j == 0 {
						first = agg
					} else if string(agg) != string(first) {
						b.Fatalf("%d pages: chunked bytes differ from the whole run", limits[j])
					}
				}
				t := time.Now()
				tc.native(out)
				native += time.Since(t)
			}
			for j, d := range times {
				name := "whole"
				if limits[j] != 0 {
					name = fmt.Sprintf("%dMiB", limits[j]/16)
				}
				b.ReportMetric(float64(d.Milliseconds())/float64(b.N), name+"_ms")
				b.ReportMetric(native.Seconds()/d.Seconds(), name+"_vs_native")
			}
			b.ReportMetric(float64(native.Milliseconds())/float64(b.N), "native_ms")
		})
	}
}
