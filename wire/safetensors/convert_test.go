package safetensors

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
)

// toBF16InMemory is ToBF16To's reference: parse, round each F32 tensor with
// FromF32AsBF16, encode.
func toBF16InMemory(t *testing.T, b []byte, lim Limits) ([]byte, int) {
	t.Helper()
	ts, md, err := Parse(b, lim)
	if err != nil {
		t.Fatalf("reference parse: %v", err)
	}
	n := 0
	for i, x := range ts {
		if x.Dtype != "F32" {
			continue
		}
		v, err := F32Values(x)
		if err != nil {
			t.Fatal(err)
		}
		ts[i] = FromF32AsBF16(x.Name, x.Shape, v)
		n++
	}
	out, err := Encode(ts, md)
	if err != nil {
		t.Fatal(err)
	}
	return out, n
}

func TestToBF16To(t *testing.T) {
	big := make([]float32, 70000) // spans two of ToBF16To's reads
	for i := range big {
		big[i] = float32(i) * 1.0009765625 // not representable in BF16: rounds
	}
	tie := math.Float32frombits(0x3f808000) // exactly between two BF16 values, even below
	cases := []struct {
		name      string
		tensors   []Tensor
		md        map[string]string
		converted int
		want      map[string][]uint16 // BF16 bits of some tensors
	}{
		{"f32 tensors round to nearest even, metadata kept",
			[]Tensor{FromF32("b", []int64{3}, []float32{1, tie, -2.5}), FromF32("a", []int64{1}, []float32{float32(math.NaN())})},
			map[string]string{"format": "pt"}, 2,
			map[string][]uint16{"b": {0x3f80, 0x3f80, 0xc020}}},
		{"a large tensor streams in chunks", []Tensor{FromF32("w", []int64{70000}, big)}, nil, 1, nil},
		{"bf16 and u8 tensors are copied", []Tensor{FromF32AsBF16("a", []int64{2}, []float32{1, 2}), {Name: "u", Dtype: "U8", Shape: []int64{}, Data: []byte{7}},
			FromF32("z", []int64{1}, []float32{3})}, nil, 1, map[string][]uint16{"a": {0x3f80, 0x4000}, "z": {0x4040}}},
		{"nothing to convert writes nothing", []Tensor{FromF32AsBF16("a", []int64{2}, []float32{1, 2})}, nil, 0, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in, err := Encode(tc.tensors, tc.md)
			if err != nil {
				t.Fatal(err)
			}
			var w bytes.Buffer
			n, err := ToBF16To(&w, bytes.NewReader(in), int64(len(in)), DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.converted {
				t.Fatalf("converted %d tensors, want %d", n, tc.converted)
			}
			if n == 0 {
				if w.Len() != 0 {
					t.Fatalf("wrote %d bytes with nothing to convert", w.Len())
				}
				return
			}
			want, _ := toBF16InMemory(t, in, DefaultLimits)
			if !bytes.Equal(w.Bytes(), want) {
				t.Fatal("streamed conversion differs from the in-memory one")
			}
			ts, md, err := Parse(w.Bytes(), DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if len(md) != len(tc.md) {
				t.Fatalf("metadata %v, want %v", md, tc.md)
			}
			for _, x := range ts {
				if x.Dtype == "F32" {
					t.Fatalf("tensor %q still F32", x.Name)
				}
				bits, ok := tc.want[x.Name]
				for i := 0; ok && i < len(bits); i++ {
					if got := uint16(x.Data[2*i]) | uint16(x.Data[2*i+1])<<8; got != bits[i] {
						t.Fatalf("tensor %q value %d: %#04x, want %#04x", x.Name, i, got, bits[i])
					}
				}
			}
		})
	}
}

func TestToBF16ToRefusesBadFiles(t *testing.T) {
	var w bytes.Buffer
	bad := file(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}`, make([]byte, 8))
	if _, err := ToBF16To(&w, bytes.NewReader(bad), int64(len(bad)), DefaultLimits); !errors.Is(err, ErrLayout) {
		t.Fatalf("a tensor whose offsets do not fit its shape: err %v, want ErrLayout", err)
	}
	if w.Len() != 0 {
		t.Fatalf("wrote %d bytes for a refused file", w.Len())
	}
}

// FuzzToBF16To: whatever ParseHeaderAt accepts converts, and the streamed
// output equals the in-memory conversion; whatever it refuses writes
// nothing.
func FuzzToBF16To(f *testing.F) {
	good, _ := Encode([]Tensor{FromF32("a", []int64{2}, []float32{1, 2}), {Name: "b", Dtype: "U8", Shape: []int64{}, Data: []byte{1}}}, map[string]string{"k": "v"})
	f.Add(good)
	f.Add(file(`{}`, nil))
	f.Add(file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, []byte{0, 0, 0xc0, 0x7f}))
	lim := Limits{MaxHeader: 1 << 16, MaxTensors: 256, MaxTotal: 1 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		var w bytes.Buffer
		n, err := ToBF16To(&w, bytes.NewReader(b), int64(len(b)), lim)
		if err != nil || n == 0 {
			if w.Len() != 0 {
				t.Fatalf("wrote %d bytes, converted %d, err %v", w.Len(), n, err)
			}
			return
		}
		want, wn := toBF16InMemory(t, b, lim)
		if wn != n || !bytes.Equal(w.Bytes(), want) {
			t.Fatalf("streamed conversion (%d tensors) differs from the in-memory one (%d)", n, wn)
		}
	})
}

// BenchmarkToBF16To: the CLI's conversion of a 64 MiB F32 file (16 Mi
// values in 8 tensors), streamed, against the in-memory path it replaces
// (Parse, FromF32AsBF16, Encode). Both report MB/s of F32 input.
func BenchmarkToBF16To(b *testing.B) {
	var ts []Tensor
	v := make([]float32, 2<<20)
	for i := range v {
		v[i] = float32(i) * 1.0009765625
	}
	for i := 0; i < 8; i++ {
		ts = append(ts, FromF32(string(rune('a'+i)), []int64{int64(len(v))}, v))
	}
	in, err := Encode(ts, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for i := 0; i < b.N; i++ {
			if _, err := ToBF16To(io.Discard, bytes.NewReader(in), int64(len(in)), DefaultLimits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-memory", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		for i := 0; i < b.N; i++ {
			ts, md, err := Parse(in, DefaultLimits)
			if err != nil {
				b.Fatal(err)
			}
			for j, x := range ts {
				f, _ := F32Values(x)
				ts[j] = FromF32AsBF16(x.Name, x.Shape, f)
			}
			if _, err := Encode(ts, md); err != nil {
				b.Fatal(err)
			}
		}
	})
}
