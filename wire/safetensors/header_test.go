package safetensors

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// agree checks that ParseHeaderAt locates exactly what Parse reads, and
// refuses exactly what it refuses, with the same error.
func agree(t *testing.T, b []byte, lim Limits) {
	t.Helper()
	ts, md, err := Parse(b, lim)
	at, mdAt, errAt := ParseHeaderAt(bytes.NewReader(b), int64(len(b)), lim)
	if (err == nil) != (errAt == nil) || err != nil && err.Error() != errAt.Error() {
		t.Fatalf("Parse: %v; ParseHeaderAt: %v", err, errAt)
	}
	if err != nil {
		return
	}
	if len(ts) != len(at) || len(md) != len(mdAt) {
		t.Fatalf("%d tensors and %d metadata keys, ParseHeaderAt %d and %d", len(ts), len(md), len(at), len(mdAt))
	}
	for i, x := range ts {
		a := at[i]
		if a.Name != x.Name || a.Dtype != x.Dtype || len(a.Shape) != len(x.Shape) || a.Len != int64(len(x.Data)) ||
			!bytes.Equal(b[a.Offset:a.Offset+a.Len], x.Data) {
			t.Fatalf("tensor %d: %+v vs %s %s %v (%d bytes)", i, a, x.Name, x.Dtype, x.Shape, len(x.Data))
		}
	}
}

func TestParseHeaderAtAgrees(t *testing.T) {
	good, _ := Encode([]Tensor{FromF32("b", []int64{3}, []float32{1, 2, 3}), FromF32("a", []int64{2}, []float32{4, 5}),
		{Name: "u", Dtype: "U8", Shape: []int64{}, Data: []byte{1}}}, map[string]string{"k": "v"})
	py, _ := hex.DecodeString(pythonFile)
	for _, b := range [][]byte{good, py, good[:len(good)-1], append(append([]byte(nil), good...), 0), good[:7], nil,
		file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{}}`, make([]byte, 8)),
		file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, make([]byte, 12)),
		file(`{}`, nil)} {
		agree(t, b, DefaultLimits)
		agree(t, b, Limits{MaxHeader: 16})
	}
}

func FuzzParseHeaderAt(f *testing.F) {
	good, _ := Encode([]Tensor{FromF32("a", []int64{2}, []float32{1, 2})}, nil)
	f.Add(good)
	f.Add(file(`{}`, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		agree(t, b, Limits{MaxHeader: 1 << 16, MaxTensors: 256, MaxTotal: 1 << 20})
	})
}

func TestEncodeTo(t *testing.T) {
	ts := []Tensor{FromF32("b", []int64{3}, []float32{1, 2, 3}), FromF32("a", []int64{2}, []float32{4, 5}), {Name: "u", Dtype: "U8", Shape: []int64{}, Data: []byte{1}}}
	for _, md := range []map[string]string{nil, {"k": "v"}} {
		want, err := Encode(ts, md)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := EncodeTo(&buf, ts, md)
		if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("EncodeTo: %d bytes, %v", n, err)
		}
	}
	if _, err := EncodeTo(&bytes.Buffer{}, []Tensor{{Name: "a", Dtype: "F32", Shape: []int64{2}, Data: []byte{1}}}, nil); err == nil {
		t.Fatal("a short tensor was encoded")
	}
}
