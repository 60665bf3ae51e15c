//go:build linux

package plugins

import (
	"bytes"
	"context"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// BenchmarkWorkerOverhead times Mean on K=6, N=2^24 f32 (16.7M values, the
// largest fragment shape of bench/plugins) in process and in a worker,
// alternately, and reports the median of the per-iteration ratios
// worker/in-process (both measured in the same run). Not run by `go test`:
//
//	nice -n 10 go test ./plugins -run '^$' -bench WorkerOverhead -benchtime 5x
func BenchmarkWorkerOverhead(b *testing.B) {
	const k, n = 6, 1 << 24
	ctx := context.Background()
	in := asBytes(randInputs(newRand(), k, n, 1))
	local, err := NewEngine(ctx, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close(ctx)
	exe, _ := os.Executable()
	remote, err := NewEngine(ctx, Config{Workers: 1, WorkerCommand: []string{exe}})
	if err != nil {
		b.Fatal(err)
	}
	defer remote.Close(ctx)
	run := func(e *Engine) (time.Duration, syncer.AggregateOutput) {
		rr, err := e.ResolveRule(ctx, "Mean", nil, k, k)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		out, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: n, Inputs: in})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start), out
	}
	run(remote) // warm the worker (start-up, compile)
	var ratios, locals, remotes []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tl, a := run(local)
		tr, c := run(remote)
		if !bytes.Equal(a.Aggregate, c.Aggregate) || a.Fuel != c.Fuel {
			b.Fatal("worker result differs")
		}
		ratios = append(ratios, float64(tr)/float64(tl))
		locals = append(locals, float64(tl.Milliseconds()))
		remotes = append(remotes, float64(tr.Milliseconds()))
		if i == 0 {
			b.ReportMetric(float64(a.Fuel), "fuel")
		}
	}
	b.ReportMetric(median(ratios), "worker/inproc")
	b.ReportMetric(median(locals), "inproc-ms")
	b.ReportMetric(median(remotes), "worker-ms")
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
