package plugins

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	wasm "github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
)

const benchK, benchN = 6, 1 << 24 // 16.7M values per input

var (
	dataOnce sync.Once
	inF32    [][]float32
	inBytes  [][]byte
)

func data() ([][]float32, [][]byte) {
	dataOnce.Do(func() {
		r := rand.New(rand.NewPCG(1, 1))
		for i := 0; i < benchK; i++ {
			v := make([]float32, benchN)
			b := make([]byte, 4*benchN)
			for j := range v {
				v[j] = float32(r.NormFloat64())
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v[j]))
			}
			inF32, inBytes = append(inF32, v), append(inBytes, b)
		}
	})
	return inF32, inBytes
}

var cases = []struct {
	ref    string
	native func(x [][]float32, out []float32)
}{
	{"Mean", NativeMean},
	{"TrimmedMean{alpha_bps=2000}", func(x [][]float32, o []float32) { NativeTrimmedMean(x, 2000, o) }},
	{"CoordinateMedian", NativeMedian},
	{"Krum{f=1}", func(x [][]float32, o []float32) { NativeKrum(x, 1, o) }},
	{"MultiKrum{f=1,m=3}", func(x [][]float32, o []float32) { NativeMultiKrum(x, 1, 3, o) }},
	{"Bulyan{f=0}", func(x [][]float32, o []float32) { NativeBulyan(x, 0, o) }},
	{"GeometricMedian{iterations=4}", func(x [][]float32, o []float32) { NativeGeoMedian(x, 4, 1e-6, o) }},
	{"CenteredClipping{tau=10,iterations=1}", func(x [][]float32, o []float32) { NativeCC(x, 10, 1, o) }},
}

func engines(b *testing.B) (*wasm.Engine, *wasm.Engine) {
	ctx := context.Background()
	e, err := wasm.NewEngine(ctx, wasm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	nf, err := wasm.NewEngine(ctx, wasm.Config{NoFuel: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close(ctx); nf.Close(ctx) })
	return e, nf
}

func timeAgg(b *testing.B, e *wasm.Engine, ref string, in [][]byte) (time.Duration, syncer.AggregateOutput) {
	ctx := context.Background()
	rr, err := e.ResolveRule(ctx, ref, nil, benchK, benchK)
	if err != nil {
		b.Fatal(err)
	}
	t := time.Now()
	out, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: benchN, Inputs: in})
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(t), out
}

// BenchmarkRules: each rule in Wasm (with and without fuel) against the
// native Go loop, K=6, N=2^24, measured in the same run.
func BenchmarkRules(b *testing.B) {
	x, xb := data()
	e, nf := engines(b)
	out := make([]float32, benchN)
	for _, tc := range cases {
		b.Run(tc.ref, func(b *testing.B) {
			var tw, tn, tf time.Duration
			var fuel uint64
			// warm-up: one untimed call per engine and of the native loop
			timeAgg(b, e, tc.ref, xb)
			timeAgg(b, nf, tc.ref, xb)
			tc.native(x, out)
			for i := 0; i < b.N; i++ {
				// alternate which engine goes first: the first call after
				// the native loop pays for faulting in fresh guest memory
				if i%2 == 0 {
					d, o := timeAgg(b, e, tc.ref, xb)
					tw, fuel = tw+d, o.Fuel
					d, _ = timeAgg(b, nf, tc.ref, xb)
					tf += d
				} else {
					d, _ := timeAgg(b, nf, tc.ref, xb)
					tf += d
					d, o := timeAgg(b, e, tc.ref, xb)
					tw, fuel = tw+d, o.Fuel
				}
				t := time.Now()
				tc.native(x, out)
				tn += time.Since(t)
			}
			n := float64(b.N)
			b.ReportMetric(float64(tw.Milliseconds())/n, "wasm_ms")
			b.ReportMetric(float64(tf.Milliseconds())/n, "nofuel_ms")
			b.ReportMetric(float64(tn.Milliseconds())/n, "native_ms")
			b.ReportMetric(tn.Seconds()/tw.Seconds(), "speed_vs_native")
			b.ReportMetric(tn.Seconds()/tf.Seconds(), "nofuel_vs_native")
			b.ReportMetric(float64(fuel)/1e9, "Gfuel")
		})
	}
}

// BenchmarkVsNumpy runs numpy versions of the rules on the same shape
// (TENZRO_PYTHON) and reports numpy time / wasm time (> 1: Wasm is faster).
func BenchmarkVsNumpy(b *testing.B) {
	py := os.Getenv("TENZRO_PYTHON")
	if py == "" {
		b.Skip("TENZRO_PYTHON is unset (a python with numpy)")
	}
	_, xb := data()
	e, _ := engines(b)
	script, _ := filepath.Abs("numpy_rules.py")
	rules := []string{"Mean", "TrimmedMean{alpha_bps=2000}", "CoordinateMedian", "Krum{f=1}", "GeometricMedian{iterations=4}"}
	for _, ref := range rules { // warm-up
		timeAgg(b, e, ref, xb)
	}
	for i := 0; i < b.N; i++ {
		out, err := exec.Command(py, script, fmt.Sprint(benchK), fmt.Sprint(benchN)).Output()
		if err != nil {
			b.Fatalf("numpy: %v", err)
		}
		var np map[string]float64
		if err := json.Unmarshal(out, &np); err != nil {
			b.Fatalf("numpy output %q: %v", out, err)
		}
		for _, ref := range rules {
			d, _ := timeAgg(b, e, ref, xb)
			ms := float64(d.Microseconds()) / 1000
			b.Logf("%-32s wasm %8.1f ms  numpy %8.1f ms  numpy/wasm %.2f", ref, ms, np[ref], np[ref]/ms)
			b.ReportMetric(np[ref]/ms, "numpy_over_wasm_"+ref[:4])
		}
	}
}
