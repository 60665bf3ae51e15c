package machine

import (
	"fmt"
	"sort"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// contentHash is the content hash of bulk bytes (payloads, weights,
// momentum, aggregates, blobs): wire.ContentHash (BLAKE3-256).
func contentHash(b []byte) wire.Hash { return wire.ContentHash(b) }

// InitLayoutOf splits an initial-weights safetensors file into f fragments
// (PROTOCOL §5) and returns what the chain learns of it (file hash, model
// hash, each fragment's tensors, dtype, size and weights hash) and each
// fragment's canonical safetensors encoding (the bytes whose hash is the
// fragment's weights hash, stored as a blob).
func InitLayoutOf(raw []byte, f int) (*wire.InitLayout, [][]byte, error) {
	if len(raw) > MaxInitWeights {
		return nil, nil, Errf(KindInvalid, "init weights: %d bytes, limit %d", len(raw), MaxInitWeights)
	}
	tensors, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
	if err != nil {
		return nil, nil, Errf(KindInvalid, "init weights: %v", err)
	}
	if len(tensors) == 0 {
		return nil, nil, Errf(KindInvalid, "init weights: no tensors")
	}
	dt := Dtype(tensors[0].Dtype)
	for _, t := range tensors {
		if Dtype(t.Dtype) != dt {
			return nil, nil, Errf(KindInvalid, "init weights: tensor %q is %s but %q is %s; all tensors must share one dtype", t.Name, t.Dtype, tensors[0].Name, dt)
		}
	}
	if dt != F32 && dt != BF16 {
		return nil, nil, Errf(KindInvalid, "init weights: dtype %s unsupported (want F32 or BF16)", dt)
	}
	frags, err := SplitFragments(tensors, f)
	if err != nil {
		return nil, nil, Errf(KindInvalid, "init weights: %v", err)
	}
	l := &wire.InitLayout{File: contentHash(raw)}
	encs := make([][]byte, len(frags))
	hashes := make([]wire.Hash, len(frags))
	for i, ts := range frags {
		fl := wire.FragmentLayout{Dtype: string(dt)}
		for _, t := range ts {
			fl.Tensors = append(fl.Tensors, wire.TensorInfo{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape})
			fl.N += Elems(t.Shape)
		}
		enc, err := safetensors.Encode(ts, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("encode fragment %d: %w", i, err)
		}
		fl.WeightsHash = contentHash(enc)
		hashes[i] = fl.WeightsHash
		encs[i] = enc
		l.Fragments = append(l.Fragments, fl)
	}
	l.Model = ModelHash(hashes)
	return l, encs, nil
}

// SplitFragments assigns tensors to F fragments (docs/PROTOCOL.md §5):
// tensors sorted by name bytewise; fragments are contiguous runs in that
// order; fragment f closes after the first tensor at which the cumulative
// element count reaches ceil((f+1)·P/F), always leaving at least one tensor
// for each later fragment; the last fragment takes the rest.
func SplitFragments(tensors []safetensors.Tensor, f int) ([][]safetensors.Tensor, error) {
	if len(tensors) < f {
		return nil, fmt.Errorf("%d tensors cannot fill %d fragments (each fragment needs at least one tensor)", len(tensors), f)
	}
	ts := append([]safetensors.Tensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	var total int64
	for _, t := range ts {
		total += Elems(t.Shape)
	}
	out := make([][]safetensors.Tensor, f)
	j := 0
	var cum int64
	for fi := 0; fi < f; fi++ {
		if fi == f-1 {
			out[fi] = ts[j:]
			break
		}
		target := ((int64(fi)+1)*total + int64(f) - 1) / int64(f)
		out[fi] = append(out[fi], ts[j])
		cum += Elems(ts[j].Shape)
		j++
		for j < len(ts)-(f-fi-1) && cum < target {
			out[fi] = append(out[fi], ts[j])
			cum += Elems(ts[j].Shape)
			j++
		}
	}
	return out, nil
}

// Elems is the number of elements of a tensor of shape (the product of its
// dimensions).
func Elems(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// BuildFragment lays out one fragment of the initial weights: its tensors'
// layout, their values concatenated in that order, and its weights hash.
func BuildFragment(ts []safetensors.Tensor) (*FragLayout, wire.Hash, []byte, error) {
	fs := &FragLayout{Dtype: Dtype(ts[0].Dtype)}
	var data []byte
	for _, t := range ts {
		fs.Tensors = append(fs.Tensors, wire.TensorInfo{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape})
		fs.N += Elems(t.Shape)
		data = append(data, t.Data...)
	}
	enc, err := EncodeFragment(fs, data)
	if err != nil {
		return nil, wire.Hash{}, nil, err
	}
	return fs, contentHash(enc), data, nil
}

// EncodeFragment renders a fragment's values as canonical safetensors; its
// content hash is the fragment's weights hash.
func EncodeFragment(fs *FragLayout, data []byte) ([]byte, error) {
	ts := make([]safetensors.Tensor, len(fs.Tensors))
	off := int64(0)
	sz := int64(fs.Dtype.Size())
	for i, t := range fs.Tensors {
		n := Elems(t.Shape) * sz
		if off+n > int64(len(data)) {
			return nil, fmt.Errorf("fragment data shorter than its layout")
		}
		ts[i] = safetensors.Tensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: data[off : off+n]}
		off += n
	}
	return safetensors.Encode(ts, nil)
}

// FragmentValues checks a payload against the fragment's layout and returns
// its values concatenated in the fragment's tensor order.
func FragmentValues(fs *FragLayout, payload []byte) ([]byte, error) {
	tensors, _, err := safetensors.Parse(payload, safetensors.DefaultLimits)
	if err != nil {
		return nil, err
	}
	if len(tensors) != len(fs.Tensors) {
		return nil, fmt.Errorf("%d tensors, the fragment has %d", len(tensors), len(fs.Tensors))
	}
	byName := make(map[string]safetensors.Tensor, len(tensors))
	for _, t := range tensors {
		byName[t.Name] = t
	}
	var out []byte
	if len(fs.Tensors) > 1 {
		out = make([]byte, 0, fs.N*int64(fs.Dtype.Size()))
	}
	for _, want := range fs.Tensors {
		t, ok := byName[want.Name]
		if !ok {
			return nil, fmt.Errorf("tensor %q is missing", want.Name)
		}
		if t.Dtype != want.Dtype {
			return nil, fmt.Errorf("tensor %q has dtype %s, the fragment's is %s", want.Name, t.Dtype, want.Dtype)
		}
		if !EqualShape(t.Shape, want.Shape) {
			return nil, fmt.Errorf("tensor %q has shape %v, the fragment's is %v", want.Name, t.Shape, want.Shape)
		}
		if len(fs.Tensors) == 1 {
			return t.Data, nil // the payload's own bytes: no copy of a large single tensor
		}
		out = append(out, t.Data...)
	}
	return out, nil
}

// EqualShape says whether two shapes are the same.
func EqualShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
