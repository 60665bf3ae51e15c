package syncer

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// TestTensorValues: a stored payload's values are located in the
// fragment's tensor order without reading the data, and a payload of
// another layout is refused as fragmentValues refuses it.
func TestTensorValues(t *testing.T) {
	b := EncodeF32([]float32{1, 2, 3})
	a := EncodeF32([]float32{4, 5})
	raw, err := safetensors.Encode([]safetensors.Tensor{{Name: "b", Dtype: "F32", Shape: []int64{3}, Data: b}, {Name: "a", Dtype: "F32", Shape: []int64{2}, Data: a}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	layout := []wire.TensorInfo{{Name: "b", Dtype: "F32", Shape: []int64{3}}, {Name: "a", Dtype: "F32", Shape: []int64{2}}}
	v, err := TensorValues(bytes.NewReader(raw), int64(len(raw)), p, layout)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Bytes(20)
	if err != nil {
		t.Fatal(err)
	}
	fs := &machine.FragLayout{Tensors: layout, Dtype: machine.F32, N: 5}
	want, err := machine.FragmentValues(fs, raw)
	if err != nil || !bytes.Equal(got, want) || !bytes.Equal(got, append(append([]byte(nil), b...), a...)) {
		t.Fatalf("values %v, fragmentValues %v (%v)", got, want, err)
	}
	byPath := FileValues(p, v.Ranges...)
	if got2, err := byPath.Bytes(20); err != nil || !bytes.Equal(got2, got) {
		t.Fatalf("by path: %v %v", got2, err)
	}
	for _, bad := range [][]wire.TensorInfo{
		{{Name: "b", Dtype: "F32", Shape: []int64{3}}},
		{{Name: "b", Dtype: "BF16", Shape: []int64{3}}, {Name: "a", Dtype: "F32", Shape: []int64{2}}},
		{{Name: "b", Dtype: "F32", Shape: []int64{3}}, {Name: "c", Dtype: "F32", Shape: []int64{2}}},
		{{Name: "b", Dtype: "F32", Shape: []int64{1, 3}}, {Name: "a", Dtype: "F32", Shape: []int64{2}}},
	} {
		_, err1 := TensorValues(bytes.NewReader(raw), int64(len(raw)), "", bad)
		_, err2 := machine.FragmentValues(&machine.FragLayout{Tensors: bad, Dtype: machine.F32, N: 5}, raw)
		if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
			t.Fatalf("layout %v: %v vs fragmentValues %v", bad, err1, err2)
		}
	}
	if _, err := TensorValues(bytes.NewReader(raw[:len(raw)-1]), int64(len(raw)-1), "", layout); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("a truncated payload: %v", err)
	}
}

// TestNativeFinalize: the native engine finalizes through its separate
// steps, and a missing quorum is reported as the round engine reports it.
func TestNativeFinalize(t *testing.T) {
	ctx := context.Background()
	e := NewNativeEngine()
	rule, _ := e.ResolveRule(ctx, "Mean", nil, 2, 2)
	outer, _ := e.ResolveOuter(ctx)
	in := FinalizeInput{Rule: rule, Outer: outer, Dtype: machine.F32, N: 2, Quorum: 2, LR: 0.5, Beta: 0.9, Nesterov: true,
		Inputs:  []Values{BytesValues(EncodeF32([]float32{1, 2})), BytesValues(EncodeF32([]float32{3, 4}))},
		Weights: BytesValues(EncodeF32([]float32{10, 20}))}
	out, err := e.Finalize(ctx, in)
	if err != nil || out.Status != wire.FragAggregated || out.Kept != 2 || !out.Selected[0] || !out.Selected[1] {
		t.Fatalf("%+v %v", out, err)
	}
	agg, _ := e.Aggregate(ctx, AggregateInput{Rule: rule, Dtype: machine.F32, N: 2, Inputs: [][]byte{EncodeF32([]float32{1, 2}), EncodeF32([]float32{3, 4})}})
	if out.AggregateHash != wire.ContentHash(agg.Aggregate) {
		t.Fatal("aggregate hash")
	}
	step, _ := e.OuterStep(ctx, OuterStepInput{Rule: outer, Dtype: machine.F32, N: 2, Weights: EncodeF32([]float32{10, 20}), Aggregate: agg.Aggregate, LR: 0.5, Beta: 0.9, Nesterov: true})
	if !bytes.Equal(out.Weights, step.Weights) || !bytes.Equal(out.Momentum, step.Momentum) {
		t.Fatal("outer step")
	}
	in.Quorum = 3
	out, err = e.Finalize(ctx, in)
	if err != nil || out.Status != wire.FragNoQuorum || out.Reason != "2 of K=3 inputs left after verification" {
		t.Fatalf("%+v %v", out, err)
	}
}

// TestWriteFragment: the streamed weights file is encodeFragment's.
func TestWriteFragment(t *testing.T) {
	layout := []wire.TensorInfo{{Name: "z", Dtype: "BF16", Shape: []int64{2, 3}}, {Name: "a", Dtype: "BF16", Shape: []int64{4}}}
	values := EncodeValues(machine.BF16, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	want, err := machine.EncodeFragment(&machine.FragLayout{Tensors: layout, Dtype: machine.BF16, N: 10}, values)
	if err != nil {
		t.Fatal(err)
	}
	h := wire.NewContentHasher()
	var buf bytes.Buffer
	n, err := WriteFragment(io.MultiWriter(&buf, h), layout, values)
	if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) || h.Sum() != wire.ContentHash(want) {
		t.Fatalf("WriteFragment: %d bytes, %v", n, err)
	}
	if _, err := WriteFragment(&buf, layout, values[:4]); err == nil {
		t.Fatal("short values were written")
	}
}
