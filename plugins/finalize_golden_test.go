package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// The finalize golden: what the separate Verify, Aggregate and OuterStep
// calls of the round engine (syncer.computeFragment) gave for a set of
// fragments on the commit before Engine.Finalize existed — digests of the
// aggregate, new weights and momentum, fuel, selection, rejections and
// failures, for every built-in aggregation rule, F32 and BF16, with and
// without momentum, whole and chunked. testdata/finalize_golden.json was
// written by this file, unchanged, on that commit, and written again when
// TrimmedMean and CoordinateMedian got one sort loop per K, and again when
// the sort in those loops became a Batcher network (each time only their
// fuel changed; TestSortUnrolledMatchesPrevious compares their bytes with
// the previous modules'):
//
//	FINALIZE_GOLDEN=write go test ./plugins -run TestFinalizeGoldenSteps
//
// TestFinalizeGoldenSteps checks the separate calls still give it;
// TestFinalizeMatchesGolden checks Engine.Finalize gives it in every mode.

const goldenK, goldenN = 7, 4099

var goldenRules = []string{"Mean", "TrimmedMean{alpha_bps=2000}", "CoordinateMedian", "Krum{f=1}", "MultiKrum{f=1,m=3}",
	"Bulyan{f=1}", "GeometricMedian", "CenteredClipping{tau=2,iterations=2}"}

// goldenCase is one fragment to finalize.
type goldenCase struct {
	Name     string
	Rule     string
	Dtype    machine.Dtype
	K, N     int
	Momentum bool
	Verifier string // a round-level verifier, or ""
	Quorum   int
	NaN      bool // one input carries NaN and ±Inf
	Outlier  bool // one input is 1000 times the others
	Fuel     string
}

func goldenCases() []goldenCase {
	var cs []goldenCase
	for i, r := range goldenRules {
		for _, d := range []machine.Dtype{machine.F32, machine.BF16} {
			for _, m := range []bool{false, true} {
				cs = append(cs, goldenCase{Name: fmt.Sprintf("%s/%s/momentum=%v", r, d, m), Rule: r, Dtype: d, K: goldenK, N: goldenN, Momentum: m, Quorum: goldenK,
					Outlier: i%2 == 1})
			}
		}
	}
	cs = append(cs,
		goldenCase{Name: "Mean/NaN", Rule: "Mean", Dtype: machine.F32, K: goldenK, N: goldenN, Momentum: true, Quorum: goldenK, NaN: true},
		goldenCase{Name: "Mean/NormRatio", Rule: "Mean", Dtype: machine.F32, K: goldenK, N: goldenN, Momentum: true, Verifier: "NormRatio", Quorum: goldenK - 1, Outlier: true},
		goldenCase{Name: "Krum/NormRatio/BF16", Rule: "Krum{f=1}", Dtype: machine.BF16, K: goldenK, N: goldenN, Verifier: "NormRatio", Quorum: goldenK - 2, Outlier: true},
		goldenCase{Name: "Mean/NormRatio/no-quorum", Rule: "Mean", Dtype: machine.F32, K: goldenK, N: goldenN, Verifier: "NormRatio", Quorum: goldenK, Outlier: true},
		goldenCase{Name: "Mean/large", Rule: "Mean", Dtype: machine.F32, K: 4, N: 1<<19 + 3, Momentum: true, Quorum: 4},
		goldenCase{Name: "Krum/large/BF16", Rule: "Krum{f=0}", Dtype: machine.BF16, K: 4, N: 1<<20 + 5, Momentum: true, Quorum: 4},
		// fuel budgets: the aggregation runs out; the outer step runs out
		goldenCase{Name: "Mean/agg-out-of-fuel", Rule: "Mean", Dtype: machine.F32, K: goldenK, N: goldenN, Momentum: true, Quorum: goldenK, Fuel: "agg"},
		goldenCase{Name: "Mean/outer-out-of-fuel", Rule: "Mean", Dtype: machine.F32, K: goldenK, N: goldenN, Momentum: true, Quorum: goldenK, Fuel: "outer"},
	)
	return cs
}

// goldenFuel is the engine budget of a case's fuel setting: between the
// Mean's and the outer step's fuel on goldenK × goldenN (Mean charges less).
func goldenFuel(which string) uint64 {
	switch which {
	case "agg":
		return 10_000
	case "outer":
		return 200_000
	}
	return 20_000_000_000
}

// goldenData is a case's values: inputs, weights (Dtype), momentum (f32).
type goldenData struct {
	inputs   [][]byte
	weights  []byte
	momentum []byte
}

func (c goldenCase) data() goldenData {
	h := sha256.Sum256([]byte(c.Name))
	r := rand.New(rand.NewPCG(uint64(h[0])|uint64(h[1])<<8, uint64(c.K)))
	vals := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64() * scale)
		}
		return v
	}
	var d goldenData
	for i := 0; i < c.K; i++ {
		v := vals(c.N, 1e-2)
		if c.Outlier && i == 2 {
			for j := range v {
				v[j] *= 1000
			}
		}
		if c.NaN && i == 3 {
			v[5], v[6], v[7] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
		}
		d.inputs = append(d.inputs, syncer.EncodeValues(c.Dtype, v))
	}
	d.weights = syncer.EncodeValues(c.Dtype, vals(c.N, 1))
	if c.Momentum {
		d.momentum = syncer.EncodeF32(vals(c.N, 1e-2))
	}
	return d
}

// goldenResult is what a finalize decided, with digests of the bytes.
type goldenResult struct {
	Status    string   `json:"status"`
	Reason    string   `json:"reason,omitempty"`
	Rejected  []string `json:"rejected"`
	Selected  []bool   `json:"selected"`
	Kept      int      `json:"kept"`
	Aggregate string   `json:"aggregate,omitempty"`
	Weights   string   `json:"weights,omitempty"`
	Momentum  string   `json:"momentum,omitempty"`
	Fuel      uint64   `json:"fuel"`
}

func digest(b []byte) string {
	if b == nil {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// stepsResult finalizes through the separate calls, as
// syncer.computeFragment did.
func stepsResult(t testing.TB, e *Engine, c goldenCase, d goldenData) goldenResult {
	t.Helper()
	ctx := context.Background()
	res := goldenResult{Rejected: make([]string, c.K), Selected: make([]bool, c.K)}
	keep := make([]bool, c.K)
	for k := range keep {
		keep[k] = true
	}
	if c.Verifier != "" {
		v, err := e.ResolveVerifier(ctx, c.Verifier+"{max_ratio=3}")
		if err != nil {
			t.Fatal(err)
		}
		for k := range d.inputs {
			out, err := e.Verify(ctx, syncer.VerifyInput{Verifier: v, Dtype: c.Dtype, N: c.N, Input: d.inputs[k], Round: d.inputs})
			if err != nil {
				t.Fatal(err)
			}
			res.Fuel += out.Fuel
			if !out.Accept && keep[k] {
				keep[k] = false
				res.Rejected[k] = fmt.Sprintf("%s: %s", v.Name, out.Reason)
			}
		}
	}
	var kept [][]byte
	var keptIdx []int
	for k, ok := range keep {
		if ok {
			kept = append(kept, d.inputs[k])
			keptIdx = append(keptIdx, k)
		}
	}
	res.Kept = len(kept)
	if len(kept) < c.Quorum {
		res.Status = "no_quorum"
		res.Reason = fmt.Sprintf("%d of K=%d inputs left after verification", len(kept), c.Quorum)
		return res
	}
	rr, err := e.ResolveRule(ctx, c.Rule, nil, c.Quorum, c.K)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: rr, Dtype: c.Dtype, N: c.N, Inputs: kept})
	var rf *syncer.RuleFailure
	if errors.As(err, &rf) {
		res.Status, res.Reason = "rule_failed", rf.Error()
		return res
	} else if err != nil {
		t.Fatal(err)
	}
	res.Fuel += agg.Fuel
	for j, k := range keptIdx {
		res.Selected[k] = j < len(agg.Selected) && agg.Selected[j]
	}
	res.Aggregate = digest(agg.Aggregate)
	outer, err := e.ResolveOuter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	step, err := e.OuterStep(ctx, syncer.OuterStepInput{Rule: outer, Dtype: c.Dtype, N: c.N, Weights: d.weights, Momentum: d.momentum,
		Aggregate: agg.Aggregate, LR: 0.7, Beta: 0.9, Nesterov: true})
	if errors.As(err, &rf) {
		res.Status, res.Reason = "rule_failed", rf.Error()
		return res
	} else if err != nil {
		t.Fatal(err)
	}
	res.Fuel += step.Fuel
	res.Status = "aggregated"
	res.Weights, res.Momentum = digest(step.Weights), digest(step.Momentum)
	return res
}

const goldenFile = "testdata/finalize_golden.json"

// goldenEngines are the local engines of the golden's two modes (whole and
// chunked in 1024-coordinate chunks), one per fuel budget.
func goldenEngines(t testing.TB, chunk int) map[string]*Engine {
	t.Helper()
	out := map[string]*Engine{}
	for _, f := range []string{"", "agg", "outer"} {
		e, err := NewEngine(context.Background(), Config{Fuel: goldenFuel(f)})
		if err != nil {
			t.Fatal(err)
		}
		e.chunkOverride = chunk
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		out[f] = e
	}
	return out
}

func loadGolden(t testing.TB) map[string]goldenResult {
	t.Helper()
	raw, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]goldenResult
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func goldenKey(c goldenCase, chunk int) string { return fmt.Sprintf("%s/chunk=%d", c.Name, chunk) }

func sameResult(a, b goldenResult) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestFinalizeGoldenSteps: the separate calls give the golden (or write it).
func TestFinalizeGoldenSteps(t *testing.T) {
	write := os.Getenv("FINALIZE_GOLDEN") == "write"
	var g map[string]goldenResult
	if write {
		g = map[string]goldenResult{}
	} else {
		g = loadGolden(t)
	}
	for _, chunk := range []int{0, 1024} {
		es := goldenEngines(t, chunk)
		for _, c := range goldenCases() {
			got := stepsResult(t, es[c.Fuel], c, c.data())
			key := goldenKey(c, chunk)
			if write {
				g[key] = got
				continue
			}
			if want, ok := g[key]; !ok || !sameResult(got, want) {
				t.Errorf("%s: got %+v, want %+v", key, got, want)
			}
		}
	}
	if write {
		keys := make([]string, 0, len(g))
		for k := range g {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		raw, _ := json.MarshalIndent(g, "", " ")
		if err := os.WriteFile(filepath.Clean(goldenFile), append(raw, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d results", len(keys))
	}
}
