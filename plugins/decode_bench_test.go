package plugins

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
)

// BenchmarkDecode times one fragment's decode in Wasm (fuel on, a fresh
// instance per call, as the syncer runs it) against the native Go loop of
// refDecode. N defaults to 22,248 (the largest fragment of the demo model);
// TENZRO_BENCH_DECODE_N overrides it. bench/compression.py reports the ratio.
func BenchmarkDecode(b *testing.B) {
	n := 22248
	if v, err := strconv.Atoi(os.Getenv("TENZRO_BENCH_DECODE_N")); err == nil && v > 0 {
		n = v
	}
	e := testEngine(b)
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for _, codec := range []struct {
		name   string
		params map[string]float64
		enc    func() []syncer.DecodeTensor
	}{
		{"int4-block", map[string]float64{"block": 64}, func() []syncer.DecodeTensor {
			var out []syncer.DecodeTensor
			for _, t := range int4Encode(x, 64) {
				out = append(out, syncer.DecodeTensor{Name: t.Name, Dtype: t.Dtype, Shape: t.Shape, Data: t.Data})
			}
			return out
		}},
		{"topk", map[string]float64{"k": 0.01, "values": 0}, func() []syncer.DecodeTensor {
			k := max(1, int(math.Floor(0.01*float64(n))))
			idx := make([]int32, k)
			vals := make([]byte, 2*k)
			for j := range idx {
				idx[j] = int32(j * (n / k))
				vals[2*j+1] = 0x3f
			}
			return []syncer.DecodeTensor{tensor("indices", "I32", i32s(idx...)), tensor("values", "BF16", vals)}
		}},
		{"sign1", map[string]float64{"block": 64}, func() []syncer.DecodeTensor {
			nb := (n + 63) / 64
			bits := make([]byte, (n+7)/8)
			for i := range bits {
				bits[i] = byte(r.Uint32())
			}
			if n%8 != 0 {
				bits[len(bits)-1] &= byte(1<<(n%8)) - 1
			}
			sc := make([]float32, nb)
			for i := range sc {
				sc[i] = 0.01
			}
			return []syncer.DecodeTensor{tensor("bits", "U8", bits), tensor("scale", "F32", f32s(sc...))}
		}},
	} {
		ts := codec.enc()
		id := CodecNames[codec.name]
		byName := map[string]syncer.DecodeTensor{}
		for _, t := range ts {
			byName[t.Name] = t
		}
		rr := resolveCodec(b, e, codec.name, mapJSON(codec.params))
		b.Run(codec.name+"/wasm", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := e.Decode(context.Background(), syncer.DecodeInput{Codec: rr, Dtype: machine.F32, N: n, Tensors: ts}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(codec.name+"/native", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, ok := refDecode(id, codec.params, n, byName); !ok {
					b.Fatal("reference refused")
				}
			}
		})
	}
}

func mapJSON(m map[string]float64) string {
	s := "{"
	for k, v := range m {
		if len(s) > 1 {
			s += ","
		}
		s += strconv.Quote(k) + ":" + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return s + "}"
}
