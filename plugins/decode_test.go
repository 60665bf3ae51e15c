package plugins

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
)

// refDecode is an independent Go decoder of the built-in codecs
// (docs/protocol/compression.md), used to cross-check the Wasm ones. It
// returns F32 values, or ok=false where the format refuses the input.
func refDecode(codec string, p map[string]float64, n int, ts map[string]syncer.DecodeTensor) ([]float32, bool) {
	out := make([]float32, n)
	scales := func(block int) ([]float32, bool) {
		s, ok := ts["scale"]
		nb := (n + block - 1) / block
		if !ok || s.Dtype != "F32" || len(s.Data) != 4*nb {
			return nil, false
		}
		v := toF32(s.Data)
		for _, x := range v {
			if math.Signbit(float64(x)) || math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, false
			}
		}
		return v, true
	}
	switch codec {
	case "Int8Block", "Int4Block", "Sign1":
		block := int(p["block"])
		name := map[string]string{"Int8Block": "q", "Int4Block": "q", "Sign1": "bits"}[codec]
		q, ok := ts[name]
		if !ok || len(ts) != 2 {
			return nil, false
		}
		s, ok := scales(block)
		if !ok {
			return nil, false
		}
		switch codec {
		case "Int8Block":
			if q.Dtype != "I8" || len(q.Data) != n {
				return nil, false
			}
			for c := 0; c < n; c++ {
				if int8(q.Data[c]) == -128 {
					return nil, false
				}
				out[c] = float32(int8(q.Data[c])) * s[c/block]
			}
		case "Int4Block":
			if q.Dtype != "U8" || len(q.Data) != (n+1)/2 {
				return nil, false
			}
			if n%2 == 1 && q.Data[n/2]>>4 != 0 {
				return nil, false
			}
			for c := 0; c < n; c++ {
				v := int(q.Data[c/2]>>(4*(c%2))) & 15
				if v >= 8 {
					v -= 16
				}
				if v == -8 {
					return nil, false
				}
				out[c] = float32(v) * s[c/block]
			}
		case "Sign1":
			if q.Dtype != "U8" || len(q.Data) != (n+7)/8 {
				return nil, false
			}
			if n%8 != 0 && q.Data[n/8]>>(n%8) != 0 {
				return nil, false
			}
			for c := 0; c < n; c++ {
				out[c] = s[c/block]
				if q.Data[c/8]>>(c%8)&1 == 1 {
					out[c] = -s[c/block]
				}
			}
		}
	case "TopK":
		k := int(math.Floor(p["k"] * float64(n)))
		k = max(1, min(n, k))
		idx, ok1 := ts["indices"]
		val, ok2 := ts["values"]
		sc, hasScale := ts["scale"]
		if !ok1 || !ok2 || idx.Dtype != "I32" || len(idx.Data) != 4*k || len(ts) != 2+b2i(hasScale) {
			return nil, false
		}
		var scale float32
		if val.Dtype != []string{"BF16", "F16", "I8"}[int(p["values"])] {
			return nil, false
		}
		switch val.Dtype {
		case "I8":
			if !hasScale || sc.Dtype != "F32" || len(sc.Data) != 4 || len(val.Data) != k {
				return nil, false
			}
			scale = math.Float32frombits(binary.LittleEndian.Uint32(sc.Data))
			if math.Signbit(float64(scale)) || math.IsNaN(float64(scale)) || math.IsInf(float64(scale), 0) {
				return nil, false
			}
		case "F16", "BF16":
			if hasScale || len(val.Data) != 2*k {
				return nil, false
			}
		default:
			return nil, false
		}
		prev := -1
		for j := 0; j < k; j++ {
			i := int(int32(binary.LittleEndian.Uint32(idx.Data[4*j:])))
			if i < 0 || i >= n || i <= prev {
				return nil, false
			}
			prev = i
		}
		for j := 0; j < k; j++ {
			i := int(int32(binary.LittleEndian.Uint32(idx.Data[4*j:])))
			var v float32
			switch val.Dtype {
			case "I8":
				if int8(val.Data[j]) == -128 {
					return nil, false
				}
				v = float32(int8(val.Data[j])) * scale
			case "BF16":
				v = math.Float32frombits(uint32(binary.LittleEndian.Uint16(val.Data[2*j:])) << 16)
			case "F16":
				v = f16ToF32(binary.LittleEndian.Uint16(val.Data[2*j:]))
			}
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, false
			}
			out[i] = v
		}
	}
	return out, true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func f16ToF32(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&31), float64(h&0x3ff)
	switch e {
	case 31:
		if m == 0 {
			return sign * float32(math.Inf(1))
		}
		return float32(math.NaN())
	case 0:
		return sign * float32(m*math.Pow(2, -24))
	}
	return sign * float32((1+m/1024)*math.Pow(2, float64(e-15)))
}

func tensor(name, dtype string, data []byte) syncer.DecodeTensor {
	size := map[string]int{"F32": 4, "BF16": 2, "F16": 2, "I8": 1, "U8": 1, "I32": 4}[dtype]
	return syncer.DecodeTensor{Name: name, Dtype: dtype, Shape: []int64{int64(len(data) / size)}, Data: data}
}

func i32s(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func resolveCodec(t testing.TB, e *Engine, name, params string) syncer.RuleRef {
	t.Helper()
	rr, err := e.ResolveCodec(context.Background(), name, json.RawMessage(params))
	if err != nil {
		t.Fatalf("resolve codec %s: %v", name, err)
	}
	return rr
}

func decode(e *Engine, rr syncer.RuleRef, n int, ts ...syncer.DecodeTensor) ([]byte, error) {
	out, err := e.Decode(context.Background(), syncer.DecodeInput{Codec: rr, Dtype: machine.F32, N: n, Tensors: ts})
	return out.Values, err
}

func TestDecodeBuiltinCodecs(t *testing.T) {
	e := testEngine(t)
	nan := math.Float32frombits(0x7fc00000)
	int4 := resolveCodec(t, e, "int4-block", `{"block":2}`)
	int8 := resolveCodec(t, e, "int8-block", `{"block":2}`)
	sign := resolveCodec(t, e, "sign1", `{"block":4}`)
	topk := resolveCodec(t, e, "topk", `{"k":0.5}`)
	topkF16 := resolveCodec(t, e, "topk", `{"k":0.5,"values":1}`)
	topkI8 := resolveCodec(t, e, "topk", `{"k":0.5,"values":2}`)
	bf := func(v ...float32) []byte {
		b := make([]byte, 2*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(x)>>16))
		}
		return b
	}
	cases := []struct {
		name    string
		rule    syncer.RuleRef
		n       int
		tensors []syncer.DecodeTensor
		want    []float32
		err     string // substring of the refusal
	}{
		{"int4 ok", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, 2, 1))},
			[]float32{-0.5, 3.5, -14, 2, 3}, ""},
		{"int4 wrong length", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19}), tensor("scale", "F32", f32s(0.5, 2, 1))},
			nil, "q has 2 bytes, want 3 for N=5"},
		{"int4 scale count", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, 2))},
			nil, "scale has 8 bytes, want 12 for N=5"},
		{"int4 NaN scale", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, nan, 1))},
			nil, "scale of block 1 is NaN"},
		{"int4 negative scale", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, -1, 1))},
			nil, "scale of block 1 is NaN, infinite or negative"},
		{"int4 code -8", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x78, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, 2, 1))},
			nil, "q at 0 is -8"},
		{"int4 padding", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x13}), tensor("scale", "F32", f32s(0.5, 2, 1))},
			nil, "padding nibble"},
		{"int4 missing tensor", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03})}, nil, `tensor "scale" is missing`},
		{"int4 extra tensor", int4, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, 2, 1)), tensor("w", "F32", f32s(1))},
			nil, `tensor "w" is not part of the encoding`},
		{"int4 wrong dtype", int4, 5, []syncer.DecodeTensor{tensor("q", "I8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, 2, 1))},
			nil, `tensor "q" has dtype I8, want U8`},
		{"int8 ok", int8, 3, []syncer.DecodeTensor{tensor("q", "I8", []byte{127, 0x81, 2}), tensor("scale", "F32", f32s(0.25, 3))},
			[]float32{31.75, -31.75, 6}, ""},
		{"int8 -128", int8, 3, []syncer.DecodeTensor{tensor("q", "I8", []byte{127, 0x80, 2}), tensor("scale", "F32", f32s(0.25, 3))},
			nil, "q at 1 is -128"},
		{"int8 infinite scale", int8, 3, []syncer.DecodeTensor{tensor("q", "I8", []byte{127, 1, 2}), tensor("scale", "F32", f32s(float32(math.Inf(1)), 3))},
			nil, "scale of block 0 is NaN, infinite or negative"},
		{"sign1 ok", sign, 6, []syncer.DecodeTensor{tensor("bits", "U8", []byte{0b100101}), tensor("scale", "F32", f32s(2, 0.5))},
			[]float32{-2, 2, -2, 2, 0.5, -0.5}, ""},
		{"sign1 padding bits", sign, 6, []syncer.DecodeTensor{tensor("bits", "U8", []byte{0b1100101}), tensor("scale", "F32", f32s(2, 0.5))},
			nil, "padding bits"},
		{"sign1 wrong length", sign, 6, []syncer.DecodeTensor{tensor("bits", "U8", []byte{1, 0}), tensor("scale", "F32", f32s(2, 0.5))},
			nil, "bits has 2 bytes, want 1 for N=6"},
		{"topk bf16 ok", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(1, 3)), tensor("values", "BF16", bf(1.5, -2))},
			[]float32{0, 1.5, 0, -2}, ""},
		{"topk f16 ok", topkF16, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(0, 2)), tensor("values", "F16", []byte{0x00, 0x3e, 0x01, 0x00})},
			[]float32{1.5, 0, float32(math.Pow(2, -24)), 0}, ""},
		{"topk int8 ok", topkI8, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(0, 2)), tensor("values", "I8", []byte{4, 0xfe}), tensor("scale", "F32", f32s(0.5))},
			[]float32{2, 0, -1, 0}, ""},
		{"topk index out of range", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(1, 4)), tensor("values", "BF16", bf(1.5, -2))},
			nil, "index 1 is out of range"},
		{"topk negative index", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(-1, 2)), tensor("values", "BF16", bf(1.5, -2))},
			nil, "index 0 is out of range"},
		{"topk unsorted", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(3, 1)), tensor("values", "BF16", bf(1.5, -2))},
			nil, "index 1 is not greater than the one before it"},
		{"topk repeated", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(2, 2)), tensor("values", "BF16", bf(1.5, -2))},
			nil, "index 1 is not greater than the one before it"},
		{"topk wrong k", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(1, 2, 3)), tensor("values", "BF16", bf(1.5, -2, 1))},
			nil, "indices has 12 bytes, want 8 for N=4"},
		{"topk NaN value", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(1, 3)), tensor("values", "BF16", bf(nan, -2))},
			nil, "value 0 is NaN or infinite"},
		{"topk NaN scale", topkI8, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(0, 2)), tensor("values", "I8", []byte{4, 2}), tensor("scale", "F32", f32s(nan))},
			nil, "scale is NaN"},
		{"topk values dtype differs from the spec", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(0, 2)), tensor("values", "F16", []byte{0x00, 0x3e, 0x01, 0x00})},
			nil, "tensor values must be BF16 (values=0)"},
		{"topk scale without int8", topk, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(1, 3)), tensor("values", "BF16", bf(1, -2)), tensor("scale", "F32", f32s(1))},
			nil, "scale is only allowed with I8 values"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(e, tc.rule, tc.n, tc.tensors...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, f32s(tc.want...)) {
				t.Fatalf("decoded %v, want %v", toF32(got), tc.want)
			}
		})
	}
}

// TestDecodeRefusesBeforeAllocating: the output size is checked against the
// page limit before the guest allocates anything.
func TestDecodeRefusesBeforeAllocating(t *testing.T) {
	e, err := NewEngine(context.Background(), Config{MemoryPages: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	rr := resolveCodec(t, e, "sign1", `{}`)
	n := 8 << 20 // 32 MiB of output, limit 4 MiB
	_, err = decode(e, rr, n, tensor("bits", "U8", make([]byte, n/8)), tensor("scale", "F32", make([]byte, 4*n/64)))
	var rf *syncer.RuleFailure
	if !errors.As(err, &rf) || rf.Code != CodeTooLarge {
		t.Fatalf("err = %v, want a CodeTooLarge rule failure", err)
	}
}

func TestResolveCodec(t *testing.T) {
	e := testEngine(t)
	rr := resolveCodec(t, e, "int4-block", `{"block":64}`)
	if rr.Name != "Int4Block" || string(rr.Params) != `{"block":64}` {
		t.Fatalf("resolved %+v", rr)
	}
	if d := resolveCodec(t, e, "topk", `{}`); string(d.Params) != `{"k":0.01,"values":0}` {
		t.Fatalf("topk defaults: %s", d.Params)
	}
	// A codec named by its plugin hash or id resolves to the same plugin.
	for _, ref := range []string{"sha256:" + rr.Hash.String(), "Int4Block"} {
		if d := resolveCodec(t, e, ref, `{"block":64}`); d.Hash != rr.Hash || string(d.Params) != string(rr.Params) {
			t.Fatalf("%s resolved to %+v", ref, d)
		}
	}
	for _, bad := range []struct{ codec, params, err string }{
		{"int3-block", `{}`, "unknown codec"},
		{"int4-block", `{"block":0}`, "block"},
		{"int4-block", `{"blocks":64}`, "has no parameter blocks"},
		{"topk", `{"k":2}`, "outside"},
		{"Mean", `{}`, "is a aggregate plugin, not decode"},
	} {
		if _, err := e.ResolveCodec(context.Background(), bad.codec, json.RawMessage(bad.params)); err == nil || !strings.Contains(err.Error(), bad.err) {
			t.Errorf("%s %s: err = %v, want %q", bad.codec, bad.params, err, bad.err)
		}
	}
	// A decode plugin cannot stand in for a rule.
	if _, err := e.ResolveRule(context.Background(), "Int4Block", nil, 1, 1); err == nil {
		t.Error("a codec resolved as an aggregation rule")
	}
}

// TestDecodeMatchesReference decodes random valid and corrupted encodings
// with the Wasm codecs and the Go reference: same verdict, same bytes.
func TestDecodeMatchesReference(t *testing.T) {
	e := testEngine(t)
	r := rand.New(rand.NewPCG(12, 34))
	for iter := 0; iter < 200; iter++ {
		codec, params, n, ts := randomEncoding(r)
		checkAgainstReference(t, e, codec, params, n, ts)
	}
}

func randomEncoding(r *rand.Rand) (string, map[string]float64, int, []syncer.DecodeTensor) {
	n := 1 + r.IntN(300)
	block := 1 + r.IntN(70)
	rb := func(k int) []byte {
		b := make([]byte, k)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	sc := func(k int) []byte {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(r.Float64() * 3)
		}
		return f32s(v...)
	}
	nb := (n + block - 1) / block
	var codec string
	var ts []syncer.DecodeTensor
	p := map[string]float64{"block": float64(block)}
	switch r.IntN(4) {
	case 0:
		codec = "Int8Block"
		ts = []syncer.DecodeTensor{tensor("q", "I8", rb(n)), tensor("scale", "F32", sc(nb))}
	case 1:
		codec = "Int4Block"
		q := rb((n + 1) / 2)
		if n%2 == 1 && r.IntN(2) == 0 {
			q[n/2] &= 0x0f
		}
		ts = []syncer.DecodeTensor{tensor("q", "U8", q), tensor("scale", "F32", sc(nb))}
	case 2:
		codec = "Sign1"
		bits := rb((n + 7) / 8)
		if n%8 != 0 && r.IntN(2) == 0 {
			bits[n/8] &= byte(1<<(n%8)) - 1
		}
		ts = []syncer.DecodeTensor{tensor("bits", "U8", bits), tensor("scale", "F32", sc(nb))}
	default:
		codec = "TopK"
		frac := []float64{0.01, 0.1, 0.3, 1}[r.IntN(4)]
		vi := r.IntN(3)
		p = map[string]float64{"k": frac, "values": float64(vi)}
		if r.IntN(8) == 0 {
			p["values"] = float64((vi + 1) % 3) // the spec says another value dtype
		}
		k := max(1, min(n, int(math.Floor(frac*float64(n)))))
		perm := r.Perm(n)[:k]
		idx := make([]int32, k)
		for i, v := range perm {
			idx[i] = int32(v)
		}
		sortI32(idx)
		vals := []string{"BF16", "F16", "I8"}[vi]
		ts = []syncer.DecodeTensor{tensor("indices", "I32", i32s(idx...))}
		if vals == "I8" {
			ts = append(ts, tensor("values", "I8", rb(k)), tensor("scale", "F32", sc(1)))
		} else {
			ts = append(ts, tensor("values", vals, rb(2*k)))
		}
	}
	// Corrupt one byte sometimes (a scale, an index, a length).
	if r.IntN(3) == 0 {
		t := &ts[r.IntN(len(ts))]
		switch r.IntN(2) {
		case 0:
			if len(t.Data) > 0 {
				t.Data[r.IntN(len(t.Data))] ^= byte(1 << r.IntN(8))
			}
		case 1:
			t.Data = append(t.Data, make([]byte, map[string]int{"F32": 4, "BF16": 2, "F16": 2, "I8": 1, "U8": 1, "I32": 4}[t.Dtype])...)
			t.Shape = []int64{t.Shape[0] + 1}
		}
	}
	return codec, p, n, ts
}

func sortI32(v []int32) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

func checkAgainstReference(t testing.TB, e *Engine, codec string, params map[string]float64, n int, ts []syncer.DecodeTensor) {
	t.Helper()
	raw, _ := json.Marshal(params)
	rr := resolveCodec(t, e, codec, string(raw))
	got, err := decode(e, rr, n, ts...)
	byName := map[string]syncer.DecodeTensor{}
	for _, x := range ts {
		byName[x.Name] = x
	}
	want, ok := refDecode(codec, params, n, byName)
	if ok != (err == nil) {
		t.Fatalf("%s n=%d: Wasm err=%v, reference accepts=%v", codec, n, err, ok)
	}
	if ok && !bytes.Equal(got, f32s(want...)) {
		t.Fatalf("%s n=%d: Wasm and reference decodings differ", codec, n)
	}
	if err != nil {
		var rf *syncer.RuleFailure
		if !errors.As(err, &rf) && !strings.Contains(err.Error(), "payload") {
			t.Fatalf("%s: refusal is neither a rule failure nor a payload error: %v", codec, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	e := testEngine(f)
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(7), uint64(99))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		codec, params, n, ts := randomEncoding(r)
		checkAgainstReference(t, e, codec, params, n, ts)
	})
}

// TestDecodeIsBoundedByFuel: a decode that runs out of fuel is the
// deterministic rule failure 1000, with the same fuel every time.
func TestDecodeIsBoundedByFuel(t *testing.T) {
	e, err := NewEngine(context.Background(), Config{Fuel: 50_000})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	rr := resolveCodec(t, e, "int8-block", `{}`)
	n := 1 << 16
	var fuel []uint64
	for i := 0; i < 2; i++ {
		out, err := e.Decode(context.Background(), syncer.DecodeInput{Codec: rr, Dtype: machine.F32, N: n,
			Tensors: []syncer.DecodeTensor{tensor("q", "I8", make([]byte, n)), tensor("scale", "F32", make([]byte, 4*n/64))}})
		var rf *syncer.RuleFailure
		if !errors.As(err, &rf) || rf.Code != CodeOutOfFuel {
			t.Fatalf("err = %v, want out of fuel", err)
		}
		fuel = append(fuel, out.Fuel)
	}
	if fuel[0] != fuel[1] || fuel[0] != 50_000 {
		t.Fatalf("fuel %v, want the whole budget twice", fuel)
	}
}

// TestManifestABIVersions: ABI 1 manifests still parse (old plugins load);
// the decode kind needs ABI 2, lists its tensors, and only decoders list any.
func TestManifestABIVersions(t *testing.T) {
	for _, tc := range []struct{ manifest, err string }{
		{`{"abi":1,"id":"Old","version":"1.0.0","kind":"aggregate","dtypes":["F32"],"params":[]}`, ""},
		{`{"abi":2,"id":"New","version":"1.0.0","kind":"aggregate","dtypes":["F32"],"params":[]}`, ""},
		{`{"abi":2,"id":"Dec","version":"1.0.0","kind":"decode","dtypes":["F32"],"params":[],"tensors":[{"name":"q","dtypes":["I8"]}]}`, ""},
		{`{"abi":3,"id":"Future","version":"1.0.0","kind":"aggregate","dtypes":["F32"],"params":[]}`, "implements ABI 1..2"},
		{`{"abi":1,"id":"Dec","version":"1.0.0","kind":"decode","dtypes":["F32"],"params":[],"tensors":[{"name":"q","dtypes":["I8"]}]}`, "kind decode needs abi >= 2"},
		{`{"abi":2,"id":"Dec","version":"1.0.0","kind":"decode","dtypes":["F32"],"params":[]}`, "tensors: 0 entries"},
		{`{"abi":2,"id":"Dec","version":"1.0.0","kind":"decode","dtypes":["F32"],"params":[],"tensors":[{"name":"q","dtypes":["U16"]}]}`, `dtype "U16"`},
		{`{"abi":2,"id":"Dec","version":"1.0.0","kind":"decode","dtypes":["F32"],"params":[],"tensors":[{"name":"q","dtypes":["I8"]},{"name":"q","dtypes":["I8"]}]}`, "listed twice"},
		{`{"abi":2,"id":"Agg","version":"1.0.0","kind":"aggregate","dtypes":["F32"],"params":[],"tensors":[{"name":"q","dtypes":["I8"]}]}`, "only decode plugins list tensors"},
		{`{"abi":2,"id":"Dec","version":"1.0.0","kind":"decode","dtypes":["F32"],"params":[],"chunking":"coordinate","tensors":[{"name":"q","dtypes":["I8"]}]}`, "decode plugins do not chunk"},
	} {
		_, err := abi.ParseManifest([]byte(tc.manifest))
		if (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v, want %q", tc.manifest, err, tc.err)
		}
	}
}
