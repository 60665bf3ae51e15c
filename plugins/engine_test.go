package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/syncer"
)

func TestResolveRule(t *testing.T) {
	e := testEngine(t)
	ctx := context.Background()
	tests := []struct {
		ref     string
		params  string
		k       int
		want    string // canonical params, or error substring
		wantErr bool
	}{
		{"Mean", "", 3, `{}`, false},
		{"TrimmedMean{alpha_bps=2500}", "", 4, `{"alpha_bps":2500}`, false},
		{"TrimmedMean", `{"alpha_bps":2500}`, 4, `{"alpha_bps":2500}`, false},
		{"TrimmedMean{alpha_bps=2500}", `{"alpha_bps":2500}`, 4, `{"alpha_bps":2500}`, false},
		{"TrimmedMean{alpha_bps=2500}", `{"alpha_bps":1000}`, 4, "conflicts", true},
		{"TrimmedMean{alpha_bps=5000}", "", 4, "alpha_bps: 5000 outside [0, 4999]", true},
		{"Krum{f=1}", "", 5, `{"f":1,"relaxed":0}`, false},
		{"Krum{f=1}", "", 3, "needs K >= 2*f+3 = 5, quorum is 3", true},
		{"MultiKrum{f=1,m=3}", "", 5, `{"f":1,"m":3,"relaxed":0}`, false},
		{"MultiKrum{f=1,m=9}", "", 5, "refuses quorum K=5: m must be in [1, K]", true},
		{"Bulyan{f=1}", "", 7, `{"f":1}`, false},
		{"Bulyan{f=1}", "", 6, "needs K >= 4*f+3 = 7", true},
		{"GeometricMedian", "", 3, `{"iterations":4,"nu":0.000001}`, false},
		{"CenteredClipping{tau=2.5,iterations=3}", "", 3, `{"iterations":3,"tau":2.5}`, false},
		{"Krum{f=1.5}", "", 9, "not an integer", true},
		{"Krum{g=1}", "", 9, "has no parameter g (parameters: f, relaxed)", true},
		{"Median", "", 3, `unknown rule "Median"`, true},
		{"Finite", "", 3, "verify plugin, not aggregate", true},
		{"Krum{f=1", "", 5, "missing closing }", true},
		{"sha256:00", "", 5, "want 64 hex digits", true},
		{"sha256:" + strings.Repeat("ab", 32), "", 5, "unknown plugin", true},
		{"Mean", `[1]`, 3, "JSON object", true},
		{"Mean", "", 0, "quorum K=0", true},
	}
	for _, tc := range tests {
		t.Run(tc.ref+tc.params, func(t *testing.T) {
			rr, err := e.ResolveRule(ctx, tc.ref, json.RawMessage(tc.params), tc.k, 0)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(rr.Params) != tc.want {
				t.Fatalf("params %s, want %s", rr.Params, tc.want)
			}
			if rr.Hash.IsZero() {
				t.Fatal("no hash")
			}
			again, err := e.ResolveRule(ctx, "sha256:"+rr.Hash.String(), rr.Params, tc.k, 0)
			if err != nil || again.Hash != rr.Hash || !bytes.Equal(again.Params, rr.Params) {
				t.Fatalf("resolving by hash gave %+v, %v", again, err)
			}
		})
	}
}

func TestVerifiers(t *testing.T) {
	e := testEngine(t)
	ctx := context.Background()
	inf := float32(1)
	inf = inf / 0
	round := [][]byte{f32s(3, 4), f32s(0.3, 0.4), f32s(6, 8), f32s(30, 40)} // norms 5, 0.5, 10, 50
	tests := []struct {
		ref    string
		input  []byte
		accept bool
		code   uint32
	}{
		{"Finite", f32s(1, 2, 3), true, 0},
		{"Finite", f32s(1, inf, 3), false, 1},
		{"L2NormBound{max=5}", f32s(3, 4), true, 0},
		{"L2NormBound{max=4.9}", f32s(3, 4), false, 2},
		{"NormRatio{max_ratio=3}", round[2], true, 0},  // median 7.5; 10 <= 22.5
		{"NormRatio{max_ratio=3}", round[3], false, 3}, // 50 > 22.5
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			rr, err := e.ResolveVerifier(ctx, tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			in := syncer.VerifyInput{Verifier: rr, Dtype: machine.F32, N: len(tc.input) / 4, Input: tc.input}
			if rr.RoundLevel {
				in.Round = round
			}
			out, err := e.Verify(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Accept != tc.accept || out.Code != tc.code {
				t.Fatalf("got %+v, want accept=%v code=%d", out, tc.accept, tc.code)
			}
		})
	}
	if _, err := e.ResolveVerifier(ctx, "L2NormBound"); err == nil || !strings.Contains(err.Error(), "parameter max is required") {
		t.Fatalf("want a required-parameter error, got %v", err)
	}
}

func TestBF16(t *testing.T) {
	e := testEngine(t)
	bf := func(v ...float32) []byte {
		b := f32s(v...)
		out := make([]byte, len(v)*2)
		for i := range v {
			out[2*i], out[2*i+1] = b[4*i+2], b[4*i+3]
		}
		return out
	}
	rr := mustResolve(t, e, "Mean", 2)
	out, err := e.Aggregate(context.Background(), syncer.AggregateInput{Rule: rr, Dtype: machine.BF16, N: 2, Inputs: [][]byte{bf(1, 2), bf(3, 4)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := toF32(out.Aggregate); got[0] != 2 || got[1] != 3 {
		t.Fatalf("got %v", got)
	}
}

// memKV is a fake syncer.KV for registry tests.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *memKV) Get(_ context.Context, ks machine.Keyspace, key []byte) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	v, ok := k.m[string(ks)+"|"+string(key)]
	if !ok {
		return nil, machine.ErrNotFound
	}
	return append([]byte(nil), v...), nil
}

func (k *memKV) Scan(_ context.Context, ks machine.Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	k.mu.Lock()
	var keys []string
	for key := range k.m {
		if strings.HasPrefix(key, string(ks)+"|"+string(prefix)) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	k.mu.Unlock()
	for _, key := range keys {
		if err := fn([]byte(strings.TrimPrefix(key, string(ks)+"|")), k.m[key]); err != nil {
			return err
		}
	}
	return nil
}

func (k *memKV) Commit(_ context.Context, b *machine.Batch) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, op := range b.Ops {
		if op.Value == nil {
			delete(k.m, string(op.KS)+"|"+string(op.Key))
		} else {
			k.m[string(op.KS)+"|"+string(op.Key)] = op.Value
		}
	}
	return nil
}

func (k *memKV) Close() error { return nil }

func TestRegistryPersists(t *testing.T) {
	ctx := context.Background()
	kv := &memKV{m: map[string][]byte{}}
	mod := buildModule(t, modSpec{aggBody: []byte{0x41, 0x00}})
	e1 := hostileEngine(t, Config{KV: kv})
	info, err := e1.Publish(ctx, mod)
	if err != nil {
		t.Fatal(err)
	}
	if info.InstrumentedHash == info.Hash || info.CostTableHash != DefaultCostTable.Hash() || info.Builtin {
		t.Fatalf("bad info %+v", info)
	}
	// a second node with the same store finds it by hash
	e2 := hostileEngine(t, Config{KV: kv})
	got, err := e2.Get(ctx, info.Hash)
	if err != nil || got.InstrumentedHash != info.InstrumentedHash {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	list, err := e2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(builtin.Names())+1 || !list[0].Builtin || list[len(list)-1].Hash != info.Hash {
		t.Fatalf("List gave %d entries", len(list))
	}
	if _, err := e2.Get(ctx, [32]byte{1}); !errors.Is(err, ErrUnknownPlugin) {
		t.Fatalf("want ErrUnknownPlugin, got %v", err)
	}
}

func TestProfile(t *testing.T) {
	a := testEngine(t).Profile()
	b := hostileEngine(t, Config{Fuel: 20_000_000_000, Interpreter: true}).Profile()
	c := hostileEngine(t, Config{Fuel: 20_000_000_000, MemoryPages: 1024}).Profile()
	if a.Hash != b.Hash {
		t.Fatal("compiler and interpreter profiles differ")
	}
	if a.Hash == c.Hash {
		t.Fatal("the page limit does not change the profile hash")
	}
	if a.Engine != "wazero/"+goModVersion(t, wazeroModule) || !strings.Contains(string(a.Details), `"memory_pages":32768`) {
		t.Fatalf("profile %s %s", a.Engine, a.Details)
	}
}

func TestChunkedAggregateEqualsWhole(t *testing.T) {
	ctx := context.Background()
	small := hostileEngine(t, Config{MemoryPages: 64}) // 4 MiB
	e := testEngine(t)
	in := randInputs(newRand(), 5, 300_000, 1) // 6 MB of inputs
	for _, ref := range []string{"Mean", "TrimmedMean{alpha_bps=2000}", "CoordinateMedian"} {
		whole := aggregate(t, e, mustResolve(t, e, ref, 5), in)
		part, err := small.Aggregate(ctx, syncer.AggregateInput{Rule: mustResolve(t, small, ref, 5), Dtype: machine.F32, N: len(in[0]), Inputs: asBytes(in)})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole.Aggregate, part.Aggregate) {
			t.Fatalf("%s: chunked result differs", ref)
		}
	}
	// Distance-based rules run in chunked passes (chunked_test.go has the
	// byte-for-byte comparisons).
	if _, err := small.Aggregate(ctx, syncer.AggregateInput{Rule: mustResolve(t, small, "Krum{f=1}", 5), Dtype: machine.F32, N: len(in[0]), Inputs: asBytes(in)}); err != nil {
		t.Fatalf("Krum on a fragment larger than the page limit: %v", err)
	}
}
