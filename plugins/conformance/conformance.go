// Package conformance checks any plugin module against ABI v1: that it
// registers (exports, imports, manifest, ABI version), runs
// deterministically (same bytes over repeated runs and on both wazero
// engines, compiler and interpreter), is symmetric under input permutation
// when its manifest claims it, gives the same bytes when chunked (when it
// claims coordinate-wise chunking), and fails cleanly on error paths and
// limits. `tenzro plugin test` runs it; so do the tests of the examples.
package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Options tune a run.
type Options struct {
	// Params are the rule parameters to test with (JSON object); needed
	// when the manifest has parameters without defaults.
	Params json.RawMessage
	// K is the number of inputs for aggregation (0: 7).
	K int
	// N is the number of values per input (0: 1027).
	N int
	// Workers > 0 runs the plugin in worker processes (plugins.Config.Workers),
	// as the node does: `tenzro plugin test` sets it, so a hostile module
	// under test cannot take the CLI down.
	Workers int
}

// Check is one conformance check.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Report lists the checks run.
type Report struct {
	Plugin string  `json:"plugin"`
	Hash   string  `json:"hash"`
	Checks []Check `json:"checks"`
}

// Passed reports whether every check passed.
func (r *Report) Passed() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

func (r *Report) add(name string, err error) bool {
	c := Check{Name: name, OK: err == nil}
	if err != nil {
		c.Detail = err.Error()
	}
	r.Checks = append(r.Checks, c)
	return err == nil
}

// String renders the report one check a line.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plugin %s sha256:%s\n", r.Plugin, r.Hash)
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s", mark, c.Name)
		if c.Detail != "" {
			fmt.Fprintf(&b, ": %s", c.Detail)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Run checks module. It returns an error only when the suite itself cannot
// run; a failing plugin gives a report with failed checks.
func Run(ctx context.Context, module []byte, opt Options) (*Report, error) {
	if opt.K == 0 {
		opt.K = 7
	}
	if opt.N == 0 {
		opt.N = 1027
	}
	rep := &Report{}
	comp, err := plugins.NewEngine(ctx, plugins.Config{Workers: opt.Workers})
	if err != nil {
		return nil, err
	}
	defer comp.Close(ctx)
	info, err := comp.Publish(ctx, module)
	if !rep.add("registers (manifest, imports, exports, ABI version, instrumentation)", err) {
		return rep, nil
	}
	rep.Plugin, rep.Hash = info.Name, info.Hash.String()
	interp, err := plugins.NewEngine(ctx, plugins.Config{Interpreter: true, Workers: opt.Workers})
	if err != nil {
		return nil, err
	}
	defer interp.Close(ctx)
	if _, err := interp.Publish(ctx, module); err != nil {
		return nil, fmt.Errorf("interpreter: %w", err)
	}
	man, err := plugins.ParseInfoManifest(info)
	if err != nil {
		return nil, err
	}
	ref := "sha256:" + info.Hash.String()
	r := rand.New(rand.NewPCG(0x7e2, 0x2a))
	switch man.Kind {
	case plugins.KindAggregate:
		aggregateChecks(ctx, rep, comp, interp, module, ref, man, opt, r)
	case plugins.KindVerify:
		verifyChecks(ctx, rep, comp, interp, module, ref, man, opt, r)
	case plugins.KindOuter:
		outerChecks(ctx, rep, comp, interp, ref, opt, r)
	case plugins.KindDecode:
		decodeChecks(ctx, rep, comp, interp, ref, man, opt, r)
	}
	return rep, nil
}

func randVec(r *rand.Rand, n int, shift float64) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(float32(r.NormFloat64()+shift)))
	}
	return b
}

func toBF16(b []byte) []byte {
	out := make([]byte, len(b)/2)
	for i := 0; i < len(b)/4; i++ {
		binary.LittleEndian.PutUint16(out[i*2:], uint16(binary.LittleEndian.Uint32(b[i*4:])>>16))
	}
	return out
}

func sameAgg(a, b syncer.AggregateOutput) error {
	if !bytes.Equal(a.Aggregate, b.Aggregate) {
		return errors.New("aggregate bytes differ")
	}
	if fmt.Sprint(a.Selected) != fmt.Sprint(b.Selected) || fmt.Sprint(a.Scores) != fmt.Sprint(b.Scores) {
		return errors.New("selection or scores differ")
	}
	if a.Fuel != b.Fuel {
		return fmt.Errorf("fuel differs: %d vs %d", a.Fuel, b.Fuel)
	}
	return nil
}

func aggregateChecks(ctx context.Context, rep *Report, comp, interp *plugins.Engine, module []byte, ref string, man *plugins.Manifest, opt Options, r *rand.Rand) {
	rr, err := comp.ResolveRule(ctx, ref, opt.Params, opt.K, opt.K)
	if !rep.add(fmt.Sprintf("resolves with K=%d", opt.K), err) {
		return
	}
	inputs := make([][]byte, opt.K)
	for i := range inputs {
		inputs[i] = randVec(r, opt.N, float64(i%3))
	}
	in := syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: opt.N, Inputs: inputs}
	first, err := comp.Aggregate(ctx, in)
	if !rep.add("aggregates F32 inputs", err) {
		return
	}
	rep.add("writes a finite aggregate", finite(first.Aggregate))
	var rerr error
	for i := 0; i < 3 && rerr == nil; i++ {
		again, err := comp.Aggregate(ctx, in)
		if err != nil {
			rerr = err
		} else {
			rerr = sameAgg(first, again)
		}
	}
	rep.add("deterministic over repeated runs", rerr)
	other, err := interp.Aggregate(ctx, in)
	if err == nil {
		err = sameAgg(first, other)
	}
	rep.add("same bytes on the interpreter engine", err)
	if man.Symmetric {
		perm := r.Perm(opt.K)
		pin := in
		pin.Inputs = make([][]byte, opt.K)
		for i, p := range perm {
			pin.Inputs[i] = inputs[p]
		}
		po, err := comp.Aggregate(ctx, pin)
		if err == nil && !bytes.Equal(po.Aggregate, first.Aggregate) {
			err = errors.New("output changed under a permutation of the inputs")
		}
		rep.add("symmetric under input permutation (manifest claims it)", err)
	}
	if man.SupportsDtype("BF16") {
		bin := in
		bin.Dtype = machine.BF16
		bin.Inputs = make([][]byte, opt.K)
		for i := range inputs {
			bin.Inputs[i] = toBF16(inputs[i])
		}
		_, err := comp.Aggregate(ctx, bin)
		rep.add("aggregates BF16 inputs", err)
	} else {
		bin := in
		bin.Dtype = machine.BF16
		bin.Inputs = make([][]byte, opt.K)
		for i := range inputs {
			bin.Inputs[i] = toBF16(inputs[i])
		}
		_, err := comp.Aggregate(ctx, bin)
		rep.add("refuses an undeclared dtype with a recorded failure", wantFailure(err))
	}
	if man.Chunking == plugins.ChunkCoordinate || man.Chunking == plugins.ChunkPasses {
		rep.add("chunked run under a small memory limit gives the same bytes", chunked(ctx, module, ref, man, opt, r))
	}
	small, err := plugins.NewEngine(ctx, plugins.Config{Fuel: 1000, Workers: opt.Workers})
	if err == nil {
		defer small.Close(ctx)
		// Registration itself may run out (a Go runtime's _initialize).
		if _, err = small.Publish(ctx, module); err == nil {
			_, err = small.Aggregate(ctx, in)
		}
		err = wantCode(err, plugins.CodeOutOfFuel)
	}
	rep.add("out of fuel is a recorded failure", err)
	if len(man.Params) > 0 {
		p := man.Params[0]
		bad, _ := json.Marshal(map[string]float64{p.Name: p.Max + 1})
		_, err := comp.ResolveRule(ctx, ref, bad, opt.K, opt.K)
		if err == nil {
			err = errors.New("an out-of-range parameter was accepted")
		} else {
			err = nil
		}
		rep.add("refuses out-of-range parameters", err)
	}
}

// chunkedEngines returns an engine with a page limit too small for the
// fragment sizes below and one with the default limit, both holding module.
func chunkedEngines(ctx context.Context, module []byte) (small, big *plugins.Engine, err error) {
	const pages = 512 // 32 MiB: room for a Go runtime, too little for the whole call
	// This check compares bytes, not cost: a budget well above the node's
	// default, so that a slow (e.g. Go wasip1) rule is not cut short on the
	// 2M-coordinate fragment below.
	const fuel = 4 * plugins.DefaultFuel
	small, err = plugins.NewEngine(ctx, plugins.Config{MemoryPages: pages, Fuel: fuel})
	if err != nil {
		return nil, nil, err
	}
	big, err = plugins.NewEngine(ctx, plugins.Config{Fuel: fuel})
	if err != nil {
		small.Close(ctx)
		return nil, nil, err
	}
	if _, err = small.Publish(ctx, module); err == nil {
		_, err = big.Publish(ctx, module)
	}
	if err != nil {
		small.Close(ctx)
		big.Close(ctx)
		return nil, nil, err
	}
	return small, big, nil
}

func chunked(ctx context.Context, module []byte, ref string, man *plugins.Manifest, opt Options, r *rand.Rand) error {
	n := 2 << 20
	e, big, err := chunkedEngines(ctx, module)
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	defer big.Close(ctx)
	k := max(opt.K, 5)
	rr, err := big.ResolveRule(ctx, ref, opt.Params, k, k)
	if err != nil {
		return err
	}
	in := syncer.AggregateInput{Rule: rr, Dtype: machine.F32, N: n, Inputs: make([][]byte, k)}
	for i := range in.Inputs {
		in.Inputs[i] = randVec(r, n, float64(i%3))
	}
	a, err := big.Aggregate(ctx, in)
	if err != nil {
		return err
	}
	b, err := e.Aggregate(ctx, in)
	if err != nil {
		return fmt.Errorf("chunked: %w", err)
	}
	if !bytes.Equal(a.Aggregate, b.Aggregate) {
		return errors.New("chunked aggregate differs")
	}
	if man.Chunking == plugins.ChunkPasses && (fmt.Sprint(a.Selected) != fmt.Sprint(b.Selected) || fmt.Sprint(a.Scores) != fmt.Sprint(b.Scores)) {
		return errors.New("chunked selection or scores differ")
	}
	return nil
}

// chunkedVerify: a verifier with a chunked mode gives the same verdict on a
// fragment larger than the small engine's page limit.
func chunkedVerify(ctx context.Context, module []byte, ref string, man *plugins.Manifest, opt Options, r *rand.Rand) error {
	n, k := 2<<20, max(opt.K, 5)
	if !man.RoundLevel { // one input must outgrow the limit on its own
		n, k = 9<<20, 2
	}
	e, big, err := chunkedEngines(ctx, module)
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	defer big.Close(ctx)
	round := make([][]byte, k)
	for i := range round {
		round[i] = randVec(r, n, float64(i%3))
	}
	for _, input := range [][]byte{round[0], round[len(round)-1]} {
		rr, err := big.ResolveVerifier(ctx, ref)
		if err != nil {
			return err
		}
		in := syncer.VerifyInput{Verifier: rr, Dtype: machine.F32, N: n, Input: input, Round: round}
		a, err := big.Verify(ctx, in)
		if err != nil {
			return err
		}
		b, err := e.Verify(ctx, in)
		if err != nil {
			return fmt.Errorf("chunked: %w", err)
		}
		if a.Accept != b.Accept || a.Code != b.Code {
			return fmt.Errorf("chunked verdict %v/%d, whole %v/%d", b.Accept, b.Code, a.Accept, a.Code)
		}
	}
	return nil
}

func finite(b []byte) error {
	for i := 0; i+4 <= len(b); i += 4 {
		f := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("value %d is %v", i/4, f)
		}
	}
	return nil
}

func wantFailure(err error) error {
	var rf *syncer.RuleFailure
	if !errors.As(err, &rf) {
		return fmt.Errorf("want a recorded rule failure, got %v", err)
	}
	return nil
}

func wantCode(err error, code uint32) error {
	var rf *syncer.RuleFailure
	if !errors.As(err, &rf) || rf.Code != code {
		return fmt.Errorf("want rule failure code %d, got %v", code, err)
	}
	return nil
}

func verifyChecks(ctx context.Context, rep *Report, comp, interp *plugins.Engine, module []byte, ref string, man *plugins.Manifest, opt Options, r *rand.Rand) {
	full := ref
	if len(opt.Params) > 0 {
		var m map[string]float64
		if err := json.Unmarshal(opt.Params, &m); err == nil {
			var kv []string
			for k, v := range m {
				kv = append(kv, fmt.Sprintf("%s=%v", k, v))
			}
			full = ref + "{" + strings.Join(kv, ",") + "}"
		}
	}
	rr, err := comp.ResolveVerifier(ctx, full)
	if !rep.add("resolves", err) {
		return
	}
	round := make([][]byte, opt.K)
	for i := range round {
		round[i] = randVec(r, opt.N, 0)
	}
	in := syncer.VerifyInput{Verifier: rr, Dtype: machine.F32, N: opt.N, Input: round[0], Round: round}
	a, err := comp.Verify(ctx, in)
	if !rep.add("verifies an F32 input", err) {
		return
	}
	b, err := interp.Verify(ctx, in)
	if err == nil && a != b {
		err = fmt.Errorf("compiler %+v, interpreter %+v", a, b)
	}
	rep.add("same verdict and fuel on the interpreter engine", err)
	c, err := comp.Verify(ctx, in)
	if err == nil && a != c {
		err = errors.New("verdict changed between runs")
	}
	rep.add("deterministic over repeated runs", err)
	if man.Chunking == plugins.ChunkCoordinate || man.Chunking == plugins.ChunkPasses {
		rep.add("chunked run under a small memory limit gives the same verdict", chunkedVerify(ctx, module, full, man, opt, r))
	}
}

func outerChecks(ctx context.Context, rep *Report, comp, interp *plugins.Engine, ref string, opt Options, r *rand.Rand) {
	rr, err := comp.ResolveOuter(ctx)
	if err != nil || rr.Hash.String() != strings.TrimPrefix(ref, "sha256:") {
		rr = syncer.RuleRef{Name: rep.Plugin, Params: json.RawMessage("{}")}
		rr.Hash, _ = parseHash(ref)
	}
	in := syncer.OuterStepInput{Rule: rr, Dtype: machine.F32, N: opt.N, Weights: randVec(r, opt.N, 0), Aggregate: randVec(r, opt.N, 0), LR: 0.7, Beta: 0.9, Nesterov: true}
	a, err := comp.OuterStep(ctx, in)
	if !rep.add("first step", err) {
		return
	}
	in.Momentum = a.Momentum
	b, err := comp.OuterStep(ctx, in)
	if !rep.add("later step with momentum", err) {
		return
	}
	c, err := interp.OuterStep(ctx, in)
	if err == nil && (!bytes.Equal(b.Weights, c.Weights) || !bytes.Equal(b.Momentum, c.Momentum)) {
		err = errors.New("interpreter result differs")
	}
	rep.add("same bytes on the interpreter engine", err)
}

// decodeChecks feeds a codec random tensors of every listed dtype (mostly
// malformed for its format): the verdict, the bytes and the fuel must be
// the same on repeated calls and on the interpreter, and a refusal must be a
// recorded rule failure, never a crash or an infrastructure error.
func decodeChecks(ctx context.Context, rep *Report, comp, interp *plugins.Engine, ref string, man *plugins.Manifest, opt Options, r *rand.Rand) {
	rr, err := comp.ResolveCodec(ctx, ref, nil)
	if !rep.add("resolves with default parameters", err) {
		return
	}
	sizes := map[string]int{"F32": 4, "BF16": 2, "F16": 2, "I8": 1, "U8": 1, "I32": 4}
	var err2 error
	for trial := 0; trial < 8 && err2 == nil; trial++ {
		in := syncer.DecodeInput{Codec: rr, Dtype: machine.F32, N: opt.N}
		for _, ts := range man.Tensors {
			d := ts.Dtypes[r.IntN(len(ts.Dtypes))]
			cnt := []int{opt.N, (opt.N + 1) / 2, (opt.N + 7) / 8, 1 + opt.N/64, r.IntN(opt.N + 1)}[r.IntN(5)]
			data := make([]byte, cnt*sizes[d])
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			in.Tensors = append(in.Tensors, syncer.DecodeTensor{Name: ts.Name, Dtype: d, Shape: []int64{int64(cnt)}, Data: data})
		}
		a, errA := comp.Decode(ctx, in)
		b, errB := comp.Decode(ctx, in)
		c, errC := interp.Decode(ctx, in)
		switch {
		case fmt.Sprint(errA) != fmt.Sprint(errB) || fmt.Sprint(errA) != fmt.Sprint(errC):
			err2 = fmt.Errorf("verdicts differ: %v / %v / %v", errA, errB, errC)
		case !bytes.Equal(a.Values, b.Values) || !bytes.Equal(a.Values, c.Values) || a.Fuel != b.Fuel || a.Fuel != c.Fuel:
			err2 = errors.New("decoded bytes or fuel differ between calls or engines")
		case errA != nil:
			var rf *syncer.RuleFailure
			if !errors.As(errA, &rf) {
				err2 = fmt.Errorf("refusal is not a rule failure: %v", errA)
			}
		}
	}
	rep.add("same verdict, bytes and fuel on repeated calls and on the interpreter", err2)
}

func parseHash(ref string) (h [32]byte, err error) {
	x, err := wire.ParseHash(ref)
	return x, err
}
