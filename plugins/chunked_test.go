package plugins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"testing"

	wabin "github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/wasm"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
)

// chunkedRules are the rules whose chunked runs must give the bytes of a
// whole run: the distance-based ones (passes) and the coordinate-wise ones.
var chunkedRules = []string{
	"Krum{f=1}", "MultiKrum{f=1,m=3}", "Bulyan{f=1}", "GeometricMedian{iterations=3}",
	"GeometricMedian{iterations=0}", "CenteredClipping{tau=20,iterations=3}", "CenteredClipping{tau=1000}",
	"Mean", "TrimmedMean{alpha_bps=2000}", "CoordinateMedian",
}

func encodeAs(dt machine.Dtype, in [][]float32) [][]byte {
	out := make([][]byte, len(in))
	for i, v := range in {
		out[i] = syncer.EncodeValues(dt, v)
	}
	return out
}

func sameAggregate(t *testing.T, what string, a, b syncer.AggregateOutput, scores bool) {
	t.Helper()
	if !bytes.Equal(a.Aggregate, b.Aggregate) {
		diff := 0
		for i := 0; i+4 <= len(a.Aggregate) && i+4 <= len(b.Aggregate); i += 4 {
			if !bytes.Equal(a.Aggregate[i:i+4], b.Aggregate[i:i+4]) {
				diff++
			}
		}
		t.Fatalf("%s: aggregates differ (%d of %d coordinates)", what, diff, len(a.Aggregate)/4)
	}
	if fmt.Sprint(a.Selected) != fmt.Sprint(b.Selected) {
		t.Fatalf("%s: selection %v, want %v", what, b.Selected, a.Selected)
	}
	if !scores {
		return
	}
	if len(a.Scores) != len(b.Scores) {
		t.Fatalf("%s: %d scores, want %d", what, len(b.Scores), len(a.Scores))
	}
	for i := range a.Scores {
		if math.Float64bits(a.Scores[i]) != math.Float64bits(b.Scores[i]) {
			t.Fatalf("%s: score %d is %v, want %v", what, i, b.Scores[i], a.Scores[i])
		}
	}
}

// TestChunkedEqualsWholeForcedChunks runs every chunkable rule with chunks
// of 1, 3 and 8 Ki coordinates (the tail is not a multiple of 4) and
// requires the bytes, selection and scores of the whole run.
func TestChunkedEqualsWholeForcedChunks(t *testing.T) {
	ctx := context.Background()
	e := testEngine(t)
	forced := hostileEngine(t, Config{Fuel: 20_000_000_000})
	in := randInputs(newRand(), 7, 10_007, 1)
	for j := range in[5] { // one outlier, so selections are not trivial
		in[5][j] += 3
	}
	for _, dt := range []machine.Dtype{machine.F32, machine.BF16} {
		inputs := encodeAs(dt, in)
		for _, ref := range chunkedRules {
			whole, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: mustResolve(t, e, ref, 7), Dtype: dt, N: len(in[0]), Inputs: inputs})
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			passes := !isCoordinate(t, e, ref)
			for _, chunk := range []int{1024, 3072, 8192} {
				forced.chunkOverride = chunk
				part, err := forced.Aggregate(ctx, syncer.AggregateInput{Rule: mustResolve(t, forced, ref, 7), Dtype: dt, N: len(in[0]), Inputs: inputs})
				if err != nil {
					t.Fatalf("%s chunk %d: %v", ref, chunk, err)
				}
				sameAggregate(t, fmt.Sprintf("%s %s chunk %d", ref, dt, chunk), whole, part, passes)
				if part.Fuel == 0 || part.Fuel == whole.Fuel {
					t.Fatalf("%s chunk %d: fuel %d (whole run %d): the run did not chunk", ref, chunk, part.Fuel, whole.Fuel)
				}
			}
		}
	}
}

func isCoordinate(t *testing.T, e *Engine, ref string) bool {
	t.Helper()
	rr := mustResolve(t, e, ref, 7)
	p, err := e.lookup(context.Background(), rr.Hash)
	if err != nil {
		t.Fatal(err)
	}
	return p.manifest.Chunking == ChunkCoordinate
}

// TestChunkedEqualsWholeAtPageLimits: fragments that do not fit small page
// limits (4, 6 and 7 MiB) run chunked because they must, and give the bytes
// of a whole run under the default limit.
func TestChunkedEqualsWholeAtPageLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ctx := context.Background()
	e := testEngine(t)
	in := randInputs(newRand(), 7, 200_003, 1) // 5.6 MB of f32 inputs
	for j := range in[2] {
		in[2][j] *= 4
	}
	refs := []string{"Krum{f=1}", "MultiKrum{f=1}", "Bulyan{f=1}", "GeometricMedian{iterations=2}", "CenteredClipping{tau=100,iterations=2}"}
	for _, pages := range []uint32{64, 96, 112} {
		small := hostileEngine(t, Config{Fuel: 20_000_000_000, MemoryPages: pages})
		for _, dt := range []machine.Dtype{machine.F32, machine.BF16} {
			inputs := encodeAs(dt, in)
			for _, ref := range refs {
				if aggregateBytes(7, len(in[0]), dt.Size(), 2) <= small.memBudget() {
					t.Fatalf("%d pages: the fragment fits, the test would not chunk", pages)
				}
				whole, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: mustResolve(t, e, ref, 7), Dtype: dt, N: len(in[0]), Inputs: inputs})
				if err != nil {
					t.Fatal(err)
				}
				part, err := small.Aggregate(ctx, syncer.AggregateInput{Rule: mustResolve(t, small, ref, 7), Dtype: dt, N: len(in[0]), Inputs: inputs})
				if err != nil {
					t.Fatalf("%s at %d pages: %v", ref, pages, err)
				}
				sameAggregate(t, fmt.Sprintf("%s %s at %d pages", ref, dt, pages), whole, part, true)
			}
		}
	}
}

// TestChunkedVerifiers: the norm verifiers (passes) and Finite (coordinate)
// give the whole run's verdict on chunked runs, accepting and rejecting.
func TestChunkedVerifiers(t *testing.T) {
	ctx := context.Background()
	e := testEngine(t)
	forced := hostileEngine(t, Config{Fuel: 20_000_000_000})
	small := hostileEngine(t, Config{Fuel: 20_000_000_000, MemoryPages: 64})
	r := newRand()
	round := randInputs(r, 5, 300_001, 1)
	for j := range round[4] {
		round[4][j] *= 1.5
	}
	round[1][299_999] = float32(math.Inf(1))
	norm := 0.0
	for _, v := range round[0] {
		norm += float64(v) * float64(v)
	}
	norm = math.Sqrt(norm)
	cases := []struct {
		ref    string
		params string
	}{
		{"L2NormBound", fmt.Sprintf(`{"max":%v}`, norm*1.0001)},
		{"L2NormBound", fmt.Sprintf(`{"max":%v}`, norm*0.9999)},
		{"NormRatio", `{"max_ratio":1.2}`},
		{"Finite", `{}`},
	}
	for _, dt := range []machine.Dtype{machine.F32, machine.BF16} {
		inputs := encodeAs(dt, round)
		for _, c := range cases {
			for i := range inputs {
				vin := func(eng *Engine) syncer.VerifyInput {
					ref, _, _, err := eng.resolve(ctx, c.ref, []byte(c.params), KindVerify)
					if err != nil {
						t.Fatal(err)
					}
					return syncer.VerifyInput{Verifier: ref, Dtype: dt, N: len(round[0]), Input: inputs[i], Round: inputs}
				}
				whole, err := e.Verify(ctx, vin(e))
				if err != nil {
					t.Fatal(err)
				}
				for name, eng := range map[string]*Engine{"chunks of 2048": forced, "64 pages": small} {
					forced.chunkOverride = 2048
					got, err := eng.Verify(ctx, vin(eng))
					if err != nil {
						t.Fatalf("%s %s input %d %s: %v", c.ref, c.params, i, name, err)
					}
					if name == "chunks of 2048" && got.Fuel == whole.Fuel {
						t.Fatalf("%s: the forced run did not chunk", c.ref)
					}
					if got.Accept != whole.Accept || got.Code != whole.Code {
						t.Fatalf("%s %s %s input %d %s: verdict %v/%d, whole run %v/%d", c.ref, c.params, dt, i, name, got.Accept, got.Code, whole.Accept, whole.Code)
					}
				}
			}
		}
	}
	// The cases above must exercise both verdicts.
	ref, _, _, _ := e.resolve(ctx, "L2NormBound", []byte(fmt.Sprintf(`{"max":%v}`, norm*0.9999)), KindVerify)
	v, err := small.Verify(ctx, syncer.VerifyInput{Verifier: ref, Dtype: machine.F32, N: len(round[0]), Input: syncer.EncodeF32(round[0])})
	if err != nil || v.Accept || v.Code != 2 {
		t.Fatalf("L2NormBound below the norm: %+v, %v", v, err)
	}
}

// passModule builds a "passes" aggregation plugin whose tenzro_chunk_plan
// writes the given passes and carry size.
func passModule(t *testing.T, passes, carry int32, withPass bool) []byte {
	t.Helper()
	i32 := wasm.ValueTypeI32
	tPlan := &wasm.FunctionType{Params: []wasm.ValueType{i32, i32, i32, i32, i32}, Results: []wasm.ValueType{i32}}
	tPass := &wasm.FunctionType{Params: make([]wasm.ValueType, 13), Results: []wasm.ValueType{i32}}
	for i := range tPass.Params {
		tPass.Params[i] = i32
	}
	m := &wasm.Module{TypeSection: []*wasm.FunctionType{tI32, tAlloc, tAgg, tPlan, tPass}}
	m.FunctionSection = []wasm.Index{0, 1, 2, 3, 4}
	plan := []byte{0x20, 0x04, 0x41}
	plan = append(plan, sleb(passes)...)
	plan = append(plan, 0x36, 0x02, 0x00, 0x20, 0x04, 0x41)
	plan = append(plan, sleb(carry)...)
	plan = append(plan, 0x36, 0x02, 0x04, 0x41, 0x00, 0x0b)
	m.CodeSection = []*wasm.Code{
		{Body: []byte{0x41, 0x01, 0x0b}},
		{Body: []byte{0x41, 0x80, 0x08, 0x0b}},
		{Body: []byte{0x41, 0x00, 0x0b}},
		{Body: plan},
		{Body: []byte{0x41, 0x00, 0x0b}},
	}
	m.MemorySection = &wasm.Memory{Min: 1}
	m.ExportSection = []*wasm.Export{
		{Type: wasm.ExternTypeMemory, Name: "memory", Index: 0},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_abi_version", Index: 0},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_alloc", Index: 1},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_aggregate", Index: 2},
		{Type: wasm.ExternTypeFunc, Name: "tenzro_chunk_plan", Index: 3},
	}
	if withPass {
		m.ExportSection = append(m.ExportSection, &wasm.Export{Type: wasm.ExternTypeFunc, Name: "tenzro_chunk_pass", Index: 4})
	}
	man := `{"abi":1,"id":"Passes","version":"0.0.1","kind":"aggregate","dtypes":["F32"],"params":[],"chunking":"passes"}`
	out, err := abi.AppendManifest(wabin.EncodeModule(m), []byte(man))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sleb(v int32) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

// TestChunkedContract: a "passes" plugin without its chunked entry point is
// refused at registration; a plan outside the ABI bounds is a recorded
// failure (code 1005); a rule without a chunked mode still fails with 1003.
func TestChunkedContract(t *testing.T) {
	ctx := context.Background()
	e := hostileEngine(t, Config{Fuel: 1_000_000})
	if _, err := e.Publish(ctx, passModule(t, 1, 0, false)); err == nil || !bytes.Contains([]byte(err.Error()), []byte("tenzro_chunk_pass")) {
		t.Fatalf("want a missing tenzro_chunk_pass error, got %v", err)
	}
	e.chunkOverride = 1024
	for _, c := range []struct{ passes, carry int32 }{{0, 0}, {MaxPasses + 1, 0}, {1, MaxCarryBytes + 1}, {-1, 16}} {
		err := runHostile(t, e, passModule(t, c.passes, c.carry, true))
		wantFailure(t, err, CodeBadPlan, "tenzro_chunk_plan")
	}
	if err := runHostile(t, e, passModule(t, 3, 64, true)); err != nil {
		t.Fatalf("a well-formed plan: %v", err)
	}
	// The hostile module has no chunked mode.
	if err := runHostile(t, e, buildModule(t, modSpec{aggBody: []byte{0x41, 0x00}})); err != nil {
		t.Fatalf("whole run: %v", err)
	}
	small := hostileEngine(t, Config{MemoryPages: 32})
	info, err := small.Publish(ctx, buildModule(t, modSpec{aggBody: []byte{0x41, 0x00}}))
	if err != nil {
		t.Fatal(err)
	}
	ref, _, _, err := small.resolve(ctx, "sha256:"+info.Hash.String(), nil, KindAggregate)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 4<<20)
	_, err = small.Aggregate(ctx, syncer.AggregateInput{Rule: ref, Dtype: machine.F32, N: len(big) / 4, Inputs: [][]byte{big}})
	wantFailure(t, err, CodeTooLarge, "chunked mode")
}

// goldenDigests are SHA-256 digests (aggregate, selection, scores) of the
// built-ins as they were before chunked passes existed (modules of commit
// fa1ff3a), on goldenInputs. Whole and chunked runs of today's modules must
// reproduce them: adding the chunked mode changed no result.
var goldenDigests = []struct{ ref, params, dtype, digest string }{
	{"Krum", `{"f":1}`, "F32", "226cb74071bc3eb5dbbb37cd5174e24c46619e06972fe7ace28ae2ac4cf894b5"},
	{"Krum", `{"f":1}`, "BF16", "dbbb1c0c11dcaafbc416fe5db4b0b237cce8c0dd0ad89ae18a860ed99b9c8477"},
	{"MultiKrum", `{"f":1,"m":3}`, "F32", "ecc69749495c90b48b7b63e389de80681fe257234d43cdea60a2145eea648288"},
	{"MultiKrum", `{"f":1,"m":3}`, "BF16", "17e2b167a41a6bddd8c6273a6553c01885dddc729a6523a32e391b79d80cfb42"},
	{"Bulyan", `{"f":1}`, "F32", "ff98f011bdc0dff90ff2200fbb2a5b9528b5d7d2c7578c9eb748a5e19d4f9bb5"},
	{"Bulyan", `{"f":1}`, "BF16", "34fb4b73aa74dd44f7c65778915a64852e44335a35d4fcfa619ecf517d54ffcc"},
	{"GeometricMedian", `{"iterations":4}`, "F32", "2aef56cd69156610c9cc3c2f28d0e52cc066fb3d06c4f64ba5cf248d4d77685f"},
	{"GeometricMedian", `{"iterations":4}`, "BF16", "acf5567fd5e92dec533722028606288e134440eb22b1787580e5592ce50065c5"},
	{"CenteredClipping", `{"tau":10,"iterations":3}`, "F32", "6899747a10c878390d340df92b99a91966ddd63c9e40763ceb017c62d42a8246"},
	{"CenteredClipping", `{"tau":10,"iterations":3}`, "BF16", "c7164486fcf2e2e85bd20918e38b29aa594de59e863e2bac61cb2e2aaa55d9b9"},
}

func goldenInputs() [][]float32 {
	in := randInputs(newRand(), 7, 10_007, 1)
	for j := range in[3] {
		in[3][j] += 2
	}
	return in
}

func outputDigest(a syncer.AggregateOutput) string {
	h := sha256.New()
	h.Write(a.Aggregate)
	for _, s := range a.Selected {
		if s {
			h.Write([]byte{1})
		} else {
			h.Write([]byte{0})
		}
	}
	for _, s := range a.Scores {
		h.Write(binary.LittleEndian.AppendUint64(nil, math.Float64bits(s)))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestResultsUnchangedByChunkedMode(t *testing.T) {
	ctx := context.Background()
	in := goldenInputs()
	whole := testEngine(t)
	forced := hostileEngine(t, Config{Fuel: 20_000_000_000})
	forced.chunkOverride = 2048
	for _, g := range goldenDigests {
		for name, e := range map[string]*Engine{"whole": whole, "chunked": forced} {
			rr, err := e.ResolveRule(ctx, g.ref, []byte(g.params), 7, 0)
			if err != nil {
				t.Fatal(err)
			}
			dt := machine.Dtype(g.dtype)
			out, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: rr, Dtype: dt, N: len(in[0]), Inputs: encodeAs(dt, in)})
			if err != nil {
				t.Fatal(err)
			}
			if d := outputDigest(out); d != g.digest {
				t.Errorf("%s%s %s %s: digest %s, before chunked mode %s", g.ref, g.params, dt, name, d, g.digest)
			}
		}
	}
}

// TestChunkedFuelIsOneBudget: the sub-calls of a chunked run share the
// call's fuel budget; a budget of exactly the fuel a chunked run reports
// suffices, one less is a recorded out-of-fuel failure.
func TestChunkedFuelIsOneBudget(t *testing.T) {
	ctx := context.Background()
	in := asBytes(randInputs(newRand(), 5, 5000, 1))
	run := func(fuel uint64) (syncer.AggregateOutput, error) {
		e := hostileEngine(t, Config{Fuel: fuel})
		e.chunkOverride = 1024
		rr := mustResolve(t, e, "GeometricMedian{iterations=2}", 5)
		return e.Aggregate(ctx, syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: 5000, Inputs: in})
	}
	ref, err := run(20_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := run(ref.Fuel); err != nil || got.Fuel != ref.Fuel || !bytes.Equal(got.Aggregate, ref.Aggregate) {
		t.Fatalf("budget = reported fuel %d: %v (fuel %d)", ref.Fuel, err, got.Fuel)
	}
	_, err = run(ref.Fuel - 1)
	wantFailure(t, err, CodeOutOfFuel, "out of fuel")
}
