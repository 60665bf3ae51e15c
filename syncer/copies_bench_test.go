package syncer

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// TestCopyRuleCost (TENZRO_COPY_BENCH=1 go test ./syncer -run TestCopyRuleCost -v):
// the copy rule on K inputs of N values against the native Mean over the same
// inputs, measured alternately in the same run (median of 5 each).
func TestCopyRuleCost(t *testing.T) {
	if testing.Short() || os.Getenv("TENZRO_COPY_BENCH") == "" {
		t.Skip("set TENZRO_COPY_BENCH=1")
	}
	for _, c := range []struct{ k, n int }{{8, 1 << 20}, {8, 10_000_000 / 4}} {
		values := make([][]byte, c.k)
		inputs := make([]wire.CommitInput, c.k)
		heights := make([]int64, c.k)
		for j := range values {
			values[j] = f32le(gauss(uint64(j+1), c.n, 0.01))
			inputs[j] = wire.CommitInput{TrainerDID: fmt.Sprintf("did:%d", j)}
			heights[j] = int64(j)
		}
		eng := NewNativeEngine()
		var rule, mean []time.Duration
		for r := 0; r < 5; r++ {
			in := append([]wire.CommitInput(nil), inputs...)
			t0 := time.Now()
			markCopies(in, values, heights, machine.F32, c.n, wire.DefaultCopyMinCosinePpm)
			rule = append(rule, time.Since(t0))
			t0 = time.Now()
			if _, err := eng.Aggregate(context.Background(), AggregateInput{Rule: RuleRef{Name: "Mean"}, Dtype: machine.F32, N: c.n, Inputs: values}); err != nil {
				t.Fatal(err)
			}
			mean = append(mean, time.Since(t0))
		}
		mr, mm := median(rule), median(mean)
		t.Logf("K=%d N=%d: copy rule %v, Mean %v, ratio %.1f", c.k, c.n, mr, mm, float64(mr)/float64(mm))
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
