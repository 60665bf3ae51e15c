package syncer_test

import (
	"bytes"
	"testing"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// TestFragmentHeader: when FragmentHeader says the weights' file is its
// header followed by the values, that is byte for byte the file
// WriteFragment writes; when the file orders the values otherwise (names
// out of the file's sorted order) or the layout does not span them, it
// says so.
func TestFragmentHeader(t *testing.T) {
	f32 := func(name string, n int64) wire.TensorInfo {
		return wire.TensorInfo{Name: name, Dtype: "F32", Shape: []int64{n}}
	}
	for _, tc := range []struct {
		name    string
		tensors []wire.TensorInfo
		size    int64
		whole   bool
	}{
		{"one tensor", []wire.TensorInfo{f32("w", 1000)}, 4000, true},
		{"sorted", []wire.TensorInfo{f32("a.bias", 3), f32("a.weight", 12), f32("b", 1)}, 64, true},
		{"2-d", []wire.TensorInfo{{Name: "m", Dtype: "F32", Shape: []int64{7, 9}}}, 252, true},
		{"bf16", []wire.TensorInfo{{Name: "m", Dtype: "BF16", Shape: []int64{10}}}, 20, true},
		{"unsorted", []wire.TensorInfo{f32("b", 3), f32("a", 3)}, 24, false},
		{"short layout", []wire.TensorInfo{f32("w", 10)}, 44, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := make([]byte, tc.size)
			for i := range values {
				values[i] = byte(i*7 + 3)
			}
			header, whole, err := syncer.FragmentHeader(tc.tensors, tc.size)
			if err != nil || whole != tc.whole {
				t.Fatalf("whole %v, err %v; want %v", whole, err, tc.whole)
			}
			var file bytes.Buffer
			if _, err := syncer.WriteFragment(&file, tc.tensors, values); err != nil {
				t.Fatal(err)
			}
			same := bytes.Equal(file.Bytes(), append(append([]byte(nil), header...), values...))
			if whole && !same {
				t.Fatal("header followed by the values is not the file WriteFragment writes")
			}
			if !whole && header != nil {
				t.Fatal("a header given for a file that is not header + values")
			}
		})
	}
	if _, _, err := syncer.FragmentHeader([]wire.TensorInfo{{Name: "w", Dtype: "Q7", Shape: []int64{2}}}, 8); err == nil {
		t.Fatal("an unknown dtype gave a header")
	}
}
