package plugins

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire/safetensors"
)

// TestCodecVectors decodes the Python trainer's encodings
// (testdata/codec_vectors.json, written by tenzro_trainer.codec) with the
// Wasm codecs: the bytes must equal the Python reference decoder's, which
// trainer/tests/test_codec.py checks on the Python side.
func TestCodecVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/codec_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []struct {
			Codec   string          `json:"codec"`
			Params  json.RawMessage `json:"params"`
			Dtype   string          `json:"dtype"`
			N       int             `json:"n"`
			Payload string          `json:"payload"`
			Decoded string          `json:"decoded"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) < 7 {
		t.Fatalf("%d vectors", len(file.Vectors))
	}
	e := testEngine(t)
	seen := map[string]bool{}
	for _, v := range file.Vectors {
		payload, _ := hex.DecodeString(v.Payload)
		want, _ := hex.DecodeString(v.Decoded)
		ts, _, err := safetensors.Parse(payload, safetensors.DefaultLimits)
		if err != nil {
			t.Fatalf("%s: %v", v.Codec, err)
		}
		in := syncer.DecodeInput{Codec: resolveCodec(t, e, v.Codec, string(v.Params)), Dtype: machine.Dtype(v.Dtype), N: v.N}
		for _, x := range ts {
			in.Tensors = append(in.Tensors, syncer.DecodeTensor{Name: x.Name, Dtype: x.Dtype, Shape: x.Shape, Data: x.Data})
		}
		out, err := e.Decode(context.Background(), in)
		if err != nil {
			t.Fatalf("%s %s: %v", v.Codec, v.Params, err)
		}
		if !bytes.Equal(out.Values, want) {
			t.Fatalf("%s %s N=%d %s: the Wasm decoding differs from the Python reference", v.Codec, v.Params, v.N, v.Dtype)
		}
		seen[v.Codec] = true
	}
	for _, c := range []string{"int8-block", "int4-block", "topk", "sign1"} {
		if !seen[c] {
			t.Errorf("no vector for %s", c)
		}
	}
}
