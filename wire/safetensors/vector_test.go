package safetensors

import (
	"encoding/hex"
	"testing"
)

// docVector is docs/protocol/safetensors.md §5: tensors "x" (F32 [1] = 1.5)
// and "a.b" (BF16 [2] = 1, −3.140625) with metadata {"format":"pt"}.
const docVector = "90000000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074227d2c22612e62223a7b226474797065223a2242463136222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c345d7d2c2278223a7b226474797065223a22463332222c227368617065223a5b315d2c22646174615f6f666673657473223a5b342c385d7d7d202020803f49c00000c03f"

func TestDocVector(t *testing.T) {
	b, err := Encode([]Tensor{
		FromF32("x", []int64{1}, []float32{1.5}),
		FromF32AsBF16("a.b", []int64{2}, []float32{1, -3.140625}),
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(b); got != docVector {
		t.Fatalf("Encode = %s", got)
	}
	if _, _, err := Parse(b, DefaultLimits); err != nil {
		t.Fatal(err)
	}
}
