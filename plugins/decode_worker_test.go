//go:build linux

package plugins

import (
	"bytes"
	"context"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// TestDecodeInWorkers: a codec runs out of process like every other plugin
// call, with the same bytes, fuel and refusals as in process.
func TestDecodeInWorkers(t *testing.T) {
	w := workerEngine(t, Config{})
	e := testEngine(t)
	for _, tc := range []struct {
		codec, params string
		n             int
		ts            []syncer.DecodeTensor
	}{
		{"int4-block", `{"block":2}`, 5, []syncer.DecodeTensor{tensor("q", "U8", []byte{0x7f, 0x19, 0x03}), tensor("scale", "F32", f32s(0.5, 2, 1))}},
		{"topk", `{"k":0.5}`, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(1, 3)), tensor("values", "BF16", []byte{0, 0x3f, 0, 0xc0})}},
		{"topk", `{"k":0.5}`, 4, []syncer.DecodeTensor{tensor("indices", "I32", i32s(3, 1)), tensor("values", "BF16", []byte{0, 0x3f, 0, 0xc0})}},
	} {
		in := syncer.DecodeInput{Codec: resolveCodec(t, w, tc.codec, tc.params), Dtype: machine.F32, N: tc.n, Tensors: tc.ts}
		a, errA := w.Decode(context.Background(), in)
		b, errB := e.Decode(context.Background(), in)
		if (errA == nil) != (errB == nil) || errA != nil && errA.Error() != errB.Error() {
			t.Fatalf("%s: worker err %v, in-process err %v", tc.codec, errA, errB)
		}
		if !bytes.Equal(a.Values, b.Values) || a.Fuel != b.Fuel {
			t.Fatalf("%s: worker and in-process decodings differ (fuel %d vs %d)", tc.codec, a.Fuel, b.Fuel)
		}
	}
}
