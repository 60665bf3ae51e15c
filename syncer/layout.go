package syncer

import (
	"fmt"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// contentHash is the content hash of bulk bytes (payloads, weights,
// momentum, blobs): wire.ContentHash once the hash migration lands.
func contentHash(b []byte) wire.Hash { return wire.SumBytes(b) }

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
			fl.N += elems(t.Shape)
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
