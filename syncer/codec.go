package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// DecodeTensor is one tensor of an encoded payload, as parsed from its
// safetensors container.
type DecodeTensor struct {
	Name  string
	Dtype string
	Shape []int64
	Data  []byte
}

// DecodeInput decodes one compressed payload into a fragment's N values.
type DecodeInput struct {
	Codec RuleRef
	// Dtype is the fragment's element type: the output holds N values of it.
	Dtype   machine.Dtype
	N       int
	Tensors []DecodeTensor
}

// DecodeOutput is the decoded fragment.
type DecodeOutput struct {
	// Values holds N little-endian values of the fragment's dtype: what
	// verification, aggregation and the outer step see, exactly as an
	// uncompressed payload's tensors.
	Values []byte
	Fuel   uint64
}

// Decoder is implemented by engines that run codec plugins (plugin ABI v2,
// kind "decode"). It is part of the engine seam: a run with a compression
// codec needs an engine that implements it, and is refused at posting
// otherwise. Malformed encodings are deterministic *RuleFailure results.
type Decoder interface {
	// ResolveCodec turns a spec's codec name ("int4-block", "sha256:…") and
	// canonical JSON parameters into a RuleRef.
	ResolveCodec(ctx context.Context, codec string, params json.RawMessage) (RuleRef, error)
	Decode(ctx context.Context, in DecodeInput) (DecodeOutput, error)
}

// resolveCodec resolves a spec's compression field; nil when uncompressed.
func resolveCodec(ctx context.Context, eng Engine, spec *wire.TaskSpec) (*RuleRef, error) {
	c, err := spec.CompressionRef()
	if err != nil || c == nil {
		return nil, err
	}
	dec, ok := eng.(Decoder)
	if !ok {
		return nil, fmt.Errorf("spec: compression: this node's engine (%s) does not run codec plugins", eng.Profile().Engine)
	}
	ref, err := dec.ResolveCodec(ctx, c.Codec, c.Params)
	if err != nil {
		return nil, fmt.Errorf("spec: compression: %w", err)
	}
	return &ref, nil
}

// payloadValues returns a payload's values in the fragment's tensor order:
// the fragment's own tensors when codec is nil, else the codec plugin's
// decoding of the encoded tensors (docs/protocol/compression.md). The bytes
// hashed and signed are always the payload as sent; only the values differ.
func payloadValues(ctx context.Context, eng Engine, codec *RuleRef, fs *machine.FragLayout, payload []byte) ([]byte, uint64, error) {
	if codec == nil {
		v, err := machine.FragmentValues(fs, payload)
		return v, 0, err
	}
	dec, ok := eng.(Decoder)
	if !ok {
		return nil, 0, fmt.Errorf("the engine does not run codec plugins: %w", ErrLocal)
	}
	tensors, _, err := safetensors.Parse(payload, safetensors.DefaultLimits)
	if err != nil {
		return nil, 0, err
	}
	in := DecodeInput{Codec: *codec, Dtype: fs.Dtype, N: int(fs.N), Tensors: make([]DecodeTensor, len(tensors))}
	for i, t := range tensors {
		in.Tensors[i] = DecodeTensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: t.Data}
	}
	out, err := dec.Decode(ctx, in)
	if err != nil {
		return nil, out.Fuel, err
	}
	if len(out.Values) != int(fs.N)*fs.Dtype.Size() {
		return nil, out.Fuel, fmt.Errorf("codec %s returned %d bytes, want %d", codec.Name, len(out.Values), int(fs.N)*fs.Dtype.Size())
	}
	return out.Values, out.Fuel, nil
}

// sameJSON compares two JSON values by their RFC 8785 forms (a receipt may
// be re-indented on its way to a replay).
func sameJSON(a, b json.RawMessage) bool {
	ca, errA := jcs.Transform(a)
	cb, errB := jcs.Transform(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}
