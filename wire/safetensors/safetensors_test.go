package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// file assembles a safetensors file from a raw header and data.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

const okEntry = `{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`

func TestParseRefuses(t *testing.T) {
	eight := make([]byte, 8)
	cases := []struct {
		name string
		b    []byte
		lim  Limits
		want error
		msg  string // substring the error must contain (names the field)
	}{
		{"empty file", nil, Limits{}, ErrShort, "at least 8"},
		{"7 bytes", make([]byte, 7), Limits{}, ErrShort, "at least 8"},
		{"header beyond file", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), Limits{}, ErrShort, "header length 100"},
		{"header beyond limit", file(`{"a":`+okEntry+`}`, eight), Limits{MaxHeader: 10}, ErrLimit, "limit 10"},
		{"huge header length", binary.LittleEndian.AppendUint64(nil, math.MaxUint64), Limits{}, ErrLimit, "header length"},
		{"not an object", file(`[]`, nil), Limits{}, ErrHeader, "not a JSON object"},
		{"leading space", file(` {}`, nil), Limits{}, ErrHeader, "not a JSON object"},
		{"empty header", file(``, nil), Limits{}, ErrHeader, "not a JSON object"},
		{"truncated JSON", file(`{"a":{"dtype":"F32"`, nil), Limits{}, ErrEntry, `"a"`},
		{"trailing garbage", file(`{}x`, nil), Limits{}, ErrHeader, "only space padding"},
		{"trailing newline", file("{}\n", nil), Limits{}, ErrHeader, "only space padding"},
		{"second object", file(`{}{}`, nil), Limits{}, ErrHeader, "only space padding"},
		{"invalid UTF-8", file("{\"\xff\":"+okEntry+"}", eight), Limits{}, ErrHeader, "UTF-8"},
		{"duplicate tensor", file(`{"a":`+okEntry+`,"a":`+okEntry+`}`, eight), Limits{}, ErrHeader, `duplicate key "a"`},
		{"duplicate metadata", file(`{"__metadata__":{},"__metadata__":{}}`, nil), Limits{}, ErrHeader, `duplicate key "__metadata__"`},
		{"duplicate field", file(`{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, `tensor "a": duplicate field "dtype"`},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}}`, eight), Limits{}, ErrEntry, `tensor "a": unknown field string "extra"`},
		{"missing dtype", file(`{"a":{"shape":[2],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, `tensor "a": missing field "dtype"`},
		{"missing shape", file(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, `missing field "shape"`},
		{"missing offsets", file(`{"a":{"dtype":"F32","shape":[2]}}`, eight), Limits{}, ErrEntry, `missing field "data_offsets"`},
		{"entry not object", file(`{"a":[1]}`, nil), Limits{}, ErrEntry, `tensor "a"`},
		{"unknown dtype", file(`{"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}}`, eight), Limits{}, ErrDtype, `tensor "a": dtype "F8_E4M3"`},
		{"lowercase dtype", file(`{"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}}`, eight), Limits{}, ErrDtype, `"f32"`},
		{"dtype not string", file(`{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, "dtype is number 4"},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, `tensor "a": shape[0] = -2 is negative`},
		{"fractional dim", file(`{"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, "shape[0] = 2.0"},
		{"exponent dim", file(`{"a":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, "shape[0] = 2e0"},
		{"dim beyond int64", file(`{"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, "shape[0]"},
		{"shape overflow", file(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, "overflows"},
		{"shape string", file(`{"a":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, `shape[0] is string "2"`},
		{"shape not array", file(`{"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}}`, eight), Limits{}, ErrEntry, "shape"},
		{"too many dims", file(`{"a":{"dtype":"U8","shape":[`+strings.Repeat("1,", 64)+`1],"data_offsets":[0,1]}}`, []byte{1}), Limits{}, ErrEntry, "more than 64"},
		{"one offset", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}}`, eight), Limits{}, ErrEntry, "data_offsets has 1 values"},
		{"three offsets", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}`, eight), Limits{}, ErrEntry, "more than 2"},
		{"negative offset", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, eight), Limits{}, ErrEntry, "data_offsets[0] = -8"},
		{"reversed offsets", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, eight), Limits{}, ErrLayout, `tensor "a": data_offsets [8,0] end before`},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, eight), Limits{}, ErrLayout, `tensor "a": F32 [3] needs 12 bytes`},
		{"not starting at 0", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)), Limits{}, ErrLayout, `tensor "a": data starts at 4`},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), Limits{}, ErrLayout, `tensor "b": data_offsets [4,8] overlap`},
		{"same region twice", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, eight), Limits{}, ErrLayout, "overlap"},
		{"hole", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 12)), Limits{}, ErrLayout, `tensor "b": hole of 4 bytes`},
		{"truncated data", file(`{"a":`+okEntry+`}`, make([]byte, 7)), Limits{}, ErrShort, "truncated"},
		{"trailing bytes", file(`{"a":`+okEntry+`}`, make([]byte, 9)), Limits{}, ErrLayout, "1 trailing bytes"},
		{"data without tensors", file(`{}`, []byte{1}), Limits{}, ErrLayout, "trailing"},
		{"metadata not object", file(`{"__metadata__":"x"}`, nil), Limits{}, ErrMetadata, "must be an object"},
		{"metadata number value", file(`{"__metadata__":{"k":1}}`, nil), Limits{}, ErrMetadata, `key "k": value is number 1`},
		{"metadata nested", file(`{"__metadata__":{"k":{}}}`, nil), Limits{}, ErrMetadata, `key "k"`},
		{"metadata null", file(`{"__metadata__":{"k":null}}`, nil), Limits{}, ErrMetadata, `key "k": value is null`},
		{"metadata dup key", file(`{"__metadata__":{"k":"a","k":"b"}}`, nil), Limits{}, ErrMetadata, `duplicate key "k"`},
		{"empty name", file(`{"":`+okEntry+`}`, eight), Limits{}, ErrEntry, "empty tensor name"},
		{"long name", file(`{"`+strings.Repeat("n", 513)+`":`+okEntry+`}`, eight), Limits{}, ErrEntry, "513 bytes, limit 512"},
		{"too many tensors", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), Limits{MaxTensors: 1}, ErrLimit, "more than 1 tensors"},
		{"data beyond MaxTotal", file(`{"a":`+okEntry+`}`, eight), Limits{MaxTotal: 4}, ErrLimit, `tensor "a": data reaches 8 bytes, limit 4`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts, md, err := Parse(c.b, c.lim)
			if !errors.Is(err, c.want) {
				t.Fatalf("Parse = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q does not contain %q", err, c.msg)
			}
			if ts != nil || md != nil {
				t.Fatal("results returned with an error")
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	// Entries in any order, any offsets order, escapes in names, padding,
	// zero-size tensors and scalars, metadata.
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	h := `{"z":{"shape":[2],"data_offsets":[0,8],"dtype":"F32"},` +
		`"__metadata__":{"format":"pt","b":""},` +
		`"\u0061":{"dtype":"U8","shape":[],"data_offsets":[12,13]},` +
		`"e":{"dtype":"BF16","shape":[0,5],"data_offsets":[8,8]},` +
		`"m":{"dtype":"I16","shape":[1,2],"data_offsets":[8,12]}}   `
	ts, md, err := Parse(file(h, data), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, x := range ts {
		names = append(names, x.Name)
	}
	if !reflect.DeepEqual(names, []string{"a", "e", "m", "z"}) {
		t.Fatalf("names %v", names)
	}
	if !bytes.Equal(ts[0].Data, []byte{13}) || !bytes.Equal(ts[2].Data, []byte{9, 10, 11, 12}) || len(ts[1].Data) != 0 {
		t.Fatalf("data %v", ts)
	}
	if !reflect.DeepEqual(md, map[string]string{"format": "pt", "b": ""}) {
		t.Fatalf("metadata %v", md)
	}
	if len(ts[0].Shape) != 0 || ts[0].Shape == nil {
		t.Fatalf("scalar shape %#v", ts[0].Shape)
	}
	// Data aliases the input and cannot grow into the next tensor.
	if cap(ts[2].Data) != 4 {
		t.Fatalf("cap %d", cap(ts[2].Data))
	}
}

func TestRoundTrip(t *testing.T) {
	in := []Tensor{
		FromF32("w", []int64{2, 2}, []float32{1, -2, 3.5, float32(math.Inf(1))}),
		{Name: "ids", Dtype: "I64", Shape: []int64{3}, Data: make([]byte, 24)},
		{Name: "flag", Dtype: "BOOL", Shape: []int64{}, Data: []byte{1}},
		{Name: "empty", Dtype: "F16", Shape: []int64{0}, Data: nil},
		{Name: "名前\"\\\n\x01", Dtype: "U8", Shape: []int64{1}, Data: []byte{7}},
		FromF32AsBF16("bf", []int64{3}, []float32{1, 1.01171875, -0.5}),
	}
	md := map[string]string{"b": "2", "a": "1"}
	b, err := Encode(in, md)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 {
		t.Fatalf("header length %d is not a multiple of 8", n)
	}
	if !strings.HasPrefix(string(b[8:]), `{"__metadata__":{"a":"1","b":"2"},"bf":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"empty":`) {
		t.Fatalf("header %s", b[8:8+n])
	}
	ts, md2, err := Parse(b, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(md2, md) {
		t.Fatalf("metadata %v", md2)
	}
	if len(ts) != len(in) {
		t.Fatalf("%d tensors", len(ts))
	}
	byName := map[string]Tensor{}
	for _, x := range in {
		byName[x.Name] = x
	}
	for _, x := range ts {
		want := byName[x.Name]
		if x.Dtype != want.Dtype || !reflect.DeepEqual(x.Shape, want.Shape) || !bytes.Equal(x.Data, want.Data) {
			t.Fatalf("tensor %q: got %+v want %+v", x.Name, x, want)
		}
	}
	b2, err := Encode(ts, md2)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("re-encoding differs (%v)", err)
	}
	v, err := F32Values(ts[4]) // "w"; the UTF-8 name sorts last
	if err != nil || !reflect.DeepEqual(v, []float32{1, -2, 3.5, float32(math.Inf(1))}) {
		t.Fatalf("F32Values %v %v", v, err)
	}
	bf, err := F32Values(ts[0])
	if err != nil || !reflect.DeepEqual(bf, []float32{1, 1.015625, -0.5}) {
		t.Fatalf("BF16 values %v %v", bf, err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	cases := []struct {
		name string
		ts   []Tensor
		want error
	}{
		{"duplicate", []Tensor{FromF32("a", []int64{1}, []float32{1}), FromF32("a", []int64{1}, []float32{1})}, ErrEntry},
		{"empty name", []Tensor{FromF32("", []int64{1}, []float32{1})}, ErrEntry},
		{"reserved name", []Tensor{FromF32(MetadataKey, []int64{1}, []float32{1})}, ErrEntry},
		{"long name", []Tensor{FromF32(strings.Repeat("x", 513), []int64{1}, []float32{1})}, ErrEntry},
		{"bad dtype", []Tensor{{Name: "a", Dtype: "F8", Shape: []int64{1}, Data: []byte{0}}}, ErrDtype},
		{"negative dim", []Tensor{{Name: "a", Dtype: "U8", Shape: []int64{-1}}}, ErrEntry},
		{"size mismatch", []Tensor{FromF32("a", []int64{3}, []float32{1, 2})}, ErrLayout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Encode(c.ts, nil); !errors.Is(err, c.want) {
				t.Fatalf("Encode = %v, want %v", err, c.want)
			}
		})
	}
	if _, err := Encode(nil, map[string]string{"k": "\xff"}); !errors.Is(err, ErrMetadata) {
		t.Fatalf("invalid UTF-8 metadata: %v", err)
	}
}

// pythonFile is what /work/shared/acceptance/st.py's write() produces for
// {"bias": ((2,), [0.5, -1.0]), "layer.0.weight": ((2,3), [1,2,3,4,5,6.25]),
// "scalar": ((), [3.0])} (Python's json.dumps with separators (",", ":")).
const pythonFile = "c0000000000000007b2262696173223a7b226474797065223a22463332222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c385d7d2c226c617965722e302e776569676874223a7b226474797065223a22463332222c227368617065223a5b322c335d2c22646174615f6f666673657473223a5b382c33325d7d2c227363616c6172223a7b226474797065223a22463332222c227368617065223a5b5d2c22646174615f6f666673657473223a5b33322c33365d7d7d202020202020200000003f000080bf0000803f0000004000004040000080400000a0400000c84000004040"

func TestPythonWriterCompat(t *testing.T) {
	want, err := hex.DecodeString(pythonFile)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Encode([]Tensor{
		FromF32("scalar", []int64{}, []float32{3}),
		FromF32("layer.0.weight", []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6.25}),
		FromF32("bias", []int64{2}, []float32{0.5, -1}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode =\n%q\nPython writes\n%q", got, want)
	}
	ts, _, err := Parse(want, DefaultLimits)
	if err != nil || len(ts) != 3 {
		t.Fatalf("Parse of the Python file: %v", err)
	}
	// When the acceptance helper and python3 are present, check it live.
	st, _ := filepath.Abs("../../../shared/acceptance/st.py")
	py, err := exec.LookPath("python3")
	if _, serr := os.Stat(st); err != nil || serr != nil {
		t.Skip("python3 or st.py not available; checked against the recorded bytes only")
	}
	out := filepath.Join(t.TempDir(), "py.safetensors")
	script := `import sys; sys.path.insert(0, sys.argv[1]); import st; st.write(sys.argv[2], {"bias": ((2,), [0.5, -1.0]), "layer.0.weight": ((2,3), [1,2,3,4,5,6.25]), "scalar": ((), [3.0])})`
	if msg, err := exec.Command(py, "-c", script, filepath.Dir(st), out).CombinedOutput(); err != nil {
		t.Fatalf("python: %v: %s", err, msg)
	}
	live, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(live, want) {
		t.Fatalf("st.py now writes %x", live)
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{0, 0},
		{float32(math.Copysign(0, -1)), 0x8000},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even below
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd below: up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above tie
		{math.Float32frombits(0x3f807fff), 0x3f80}, // below tie
		{math.MaxFloat32, 0x7f80},                  // overflow to +Inf
		{float32(math.Inf(-1)), 0xff80},
		{math.Float32frombits(0x00000001), 0x0000}, // smallest subnormal rounds to 0
		{math.Float32frombits(0x00018000), 0x0002}, // subnormal tie to even
	}
	for _, c := range cases {
		if got := F32ToBF16(c.f); got != c.want {
			t.Errorf("F32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(c.f), got, c.want)
		}
	}
	nan := F32ToBF16(math.Float32frombits(0x7f800001)) // signalling NaN with low payload
	if !math.IsNaN(float64(BF16ToF32(nan))) {
		t.Errorf("NaN became %#04x", nan)
	}
	for h := range 1 << 16 {
		f := BF16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToBF16(f); back != uint16(h) {
			t.Fatalf("bf16 %#04x → %g → %#04x", h, f, back)
		}
	}
}

func TestF16ToF32(t *testing.T) {
	cases := map[uint16]float32{
		0x3c00: 1, 0xc000: -2, 0x7bff: 65504, 0x0001: 5.960464477539063e-08,
		0x03ff: 6.097555160522461e-05, 0x0400: 6.103515625e-05, 0x8000: float32(math.Copysign(0, -1)),
		0x7c00: float32(math.Inf(1)),
	}
	for h, want := range cases {
		if got := F16ToF32(h); math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", h, got, want)
		}
	}
	if !math.IsNaN(float64(F16ToF32(0x7e00))) {
		t.Error("NaN")
	}
	if _, err := F32Values(Tensor{Name: "x", Dtype: "I32", Shape: []int64{1}, Data: make([]byte, 4)}); !errors.Is(err, ErrDtype) {
		t.Errorf("I32 to float32: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	good, _ := Encode([]Tensor{FromF32("a", []int64{2}, []float32{1, 2}), {Name: "b", Dtype: "U8", Shape: []int64{}, Data: []byte{1}}}, map[string]string{"k": "v"})
	f.Add(good)
	py, _ := hex.DecodeString(pythonFile)
	f.Add(py)
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{}}`, make([]byte, 8)))
	f.Add(file(`{}`, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, md, err := Parse(b, Limits{MaxHeader: 1 << 16, MaxTensors: 256, MaxTotal: 1 << 20})
		if err != nil {
			return
		}
		enc, err := Encode(ts, md)
		if err != nil {
			t.Fatalf("parsed file does not re-encode: %v", err)
		}
		ts2, md2, err := Parse(enc, DefaultLimits)
		if err != nil {
			t.Fatalf("re-encoded file does not parse: %v", err)
		}
		if len(md) == 0 {
			md = nil
		}
		if !reflect.DeepEqual(md, md2) || len(ts) != len(ts2) {
			t.Fatalf("metadata or count changed: %v %v", md, md2)
		}
		for i := range ts {
			a, b := ts[i], ts2[i]
			if a.Name != b.Name || a.Dtype != b.Dtype || !reflect.DeepEqual(a.Shape, b.Shape) || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("tensor %d changed: %+v vs %+v", i, a, b)
			}
		}
		enc2, err := Encode(ts2, md2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("canonical form is not a fixed point")
		}
	})
}

func BenchmarkParse33MB(b *testing.B) {
	const n = 33 << 20 / 4
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i)
	}
	buf, err := Encode([]Tensor{FromF32("fragment.0", []int64{n}, v)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, _, err := Parse(buf, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkF32Values33MB(b *testing.B) {
	const n = 33 << 20 / 4
	t := FromF32("fragment.0", []int64{n}, make([]float32, n))
	b.SetBytes(int64(len(t.Data)))
	for b.Loop() {
		if _, err := F32Values(t); err != nil {
			b.Fatal(err)
		}
	}
}
