package plugins

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/syncer"
)

// KindDecode is the codec plugin kind (ABI v2, ABI.md §4.1).
const KindDecode = abi.KindDecode

var _ syncer.Decoder = (*Engine)(nil)

// CodecNames maps the spec's codec names to the built-in codec plugins.
var CodecNames = map[string]string{
	"int8-block": "Int8Block",
	"int4-block": "Int4Block",
	"topk":       "TopK",
	"sign1":      "Sign1",
}

// ResolveCodec implements syncer.Decoder: codec is a name from CodecNames,
// a decode plugin's id, or "sha256:<hex>"; params is a JSON object of
// numbers checked against the plugin's schema (defaults filled).
func (e *Engine) ResolveCodec(ctx context.Context, codec string, params json.RawMessage) (syncer.RuleRef, error) {
	ref := codec
	if id, ok := CodecNames[codec]; ok {
		ref = id
	} else if !strings.HasPrefix(codec, "sha256:") && strings.ToLower(codec) == codec {
		return syncer.RuleRef{}, fmt.Errorf("unknown codec %q (built-ins: int8-block, int4-block, topk, sign1; or a decode plugin's sha256:<hash>)", codec)
	}
	rr, _, _, err := e.resolve(ctx, ref, params, KindDecode)
	if err != nil {
		return syncer.RuleRef{}, fmt.Errorf("codec: %w", err)
	}
	return rr, nil
}

// Decode implements syncer.Decoder: it matches the payload's tensors to the
// plugin's manifest (names, dtypes, 1-D shapes), checks that the tensors and
// the N decoded values fit the page limit before anything is allocated, and
// runs tenzro_decode in a fresh instance under the fuel budget.
func (e *Engine) Decode(ctx context.Context, in syncer.DecodeInput) (out syncer.DecodeOutput, err error) {
	p, err := e.pluginFor(ctx, in.Codec, KindDecode)
	if err != nil {
		return out, err
	}
	params, err := paramVector(p.manifest, in.Codec.Params)
	if err != nil {
		return out, fmt.Errorf("plugins: %s: %w", p.info.Name, err)
	}
	dc, err := dtypeCode(in.Dtype)
	if err != nil {
		return out, fmt.Errorf("plugins: %w", err)
	}
	if !p.manifest.SupportsDtype(string(in.Dtype)) {
		return out, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeBadInput, Reason: fmt.Sprintf("codec does not decode to %s", in.Dtype)}
	}
	if in.N <= 0 || in.N > math.MaxInt32 {
		return out, fmt.Errorf("plugins: N=%d out of range", in.N)
	}
	slots, err := matchTensors(p.manifest, in.Tensors)
	if err != nil {
		return out, fmt.Errorf("%s payload: %w", p.info.Name, err)
	}
	need := uint64(in.N)*uint64(in.Dtype.Size()) + uint64(len(slots))*12 + uint64(len(params))*8 + guestSlack
	for _, t := range slots {
		if t != nil {
			need += uint64(len(t.Data)) + 16
		}
	}
	if need > e.memBudget() {
		return out, &syncer.RuleFailure{Rule: p.info.Name, Code: CodeTooLarge,
			Reason: fmt.Sprintf("decoding N=%d values needs %d bytes of guest memory, limit %d pages", in.N, need, e.cfg.MemoryPages)}
	}
	if e.pool != nil { // out of process, like every other plugin call (DESIGN §13)
		return e.remoteDecode(ctx, p, in)
	}
	c, err := e.newCall(ctx, p, e.cfg.Fuel, nil)
	if err != nil {
		return out, err
	}
	defer c.close(ctx)
	defer func() { out.Fuel = c.used() }()
	table := make([]byte, 12*len(slots))
	for i, t := range slots {
		if t == nil {
			binary.LittleEndian.PutUint32(table[12*i+8:], 0xff)
			continue
		}
		ptr, err := c.alloc(ctx, uint64(len(t.Data))+1) // +1: an empty tensor still gets a non-zero pointer
		if err != nil {
			return out, err
		}
		if err := c.write(ptr, t.Data); err != nil {
			return out, err
		}
		binary.LittleEndian.PutUint32(table[12*i:], ptr)
		binary.LittleEndian.PutUint32(table[12*i+4:], uint32(len(t.Data)))
		binary.LittleEndian.PutUint32(table[12*i+8:], abi.TensorDtypeCodes[t.Dtype])
	}
	tabPtr, err := c.alloc(ctx, uint64(len(table)))
	if err != nil {
		return out, err
	}
	parPtr, err := c.alloc(ctx, uint64(len(params))*8+8)
	if err != nil {
		return out, err
	}
	size := uint64(in.N) * uint64(in.Dtype.Size())
	outPtr, err := c.alloc(ctx, size)
	if err != nil {
		return out, err
	}
	if err := c.write(tabPtr, table); err != nil {
		return out, err
	}
	if err := c.write(parPtr, f64Bytes(params)); err != nil {
		return out, err
	}
	res, err := c.invoke(ctx, "tenzro_decode", dc, uint64(in.N), uint64(len(slots)), uint64(tabPtr), uint64(parPtr),
		uint64(len(params)), uint64(outPtr))
	if err != nil {
		return out, err
	}
	if rc := uint32(res[0]); rc != 0 {
		return out, c.guestError(ctx, rc)
	}
	out.Values, err = c.read(outPtr, size)
	return out, err
}

// matchTensors puts the payload's tensors into the manifest's order: every
// tensor must be listed, 1-D, of a listed dtype; required ones present.
func matchTensors(m *abi.Manifest, ts []syncer.DecodeTensor) ([]*syncer.DecodeTensor, error) {
	slots := make([]*syncer.DecodeTensor, len(m.Tensors))
	index := map[string]int{}
	var names []string
	for i, s := range m.Tensors {
		index[s.Name] = i
		names = append(names, s.Name)
	}
	for i := range ts {
		t := &ts[i]
		j, ok := index[t.Name]
		if !ok {
			return nil, fmt.Errorf("tensor %q is not part of the encoding (tensors: %s)", t.Name, strings.Join(names, ", "))
		}
		if slots[j] != nil {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		if len(t.Shape) != 1 {
			return nil, fmt.Errorf("tensor %q has shape %v, want one dimension", t.Name, t.Shape)
		}
		okDtype := false
		for _, d := range m.Tensors[j].Dtypes {
			okDtype = okDtype || d == t.Dtype
		}
		if !okDtype {
			return nil, fmt.Errorf("tensor %q has dtype %s, want %s", t.Name, t.Dtype, strings.Join(m.Tensors[j].Dtypes, " or "))
		}
		slots[j] = t
	}
	for j, s := range m.Tensors {
		if slots[j] == nil && !s.Optional {
			return nil, fmt.Errorf("tensor %q is missing", s.Name)
		}
	}
	return slots, nil
}
