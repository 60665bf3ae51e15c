package safetensors_test

import (
	"fmt"

	"github.com/tenzro/train/wire/safetensors"
)

func Example() {
	b, err := safetensors.Encode([]safetensors.Tensor{
		safetensors.FromF32("w", []int64{2, 2}, []float32{1, 2, 3, 4}),
		safetensors.FromF32("b", []int64{2}, []float32{0.5, -0.5}),
	}, map[string]string{"format": "pt"})
	if err != nil {
		panic(err)
	}
	ts, md, err := safetensors.Parse(b, safetensors.DefaultLimits)
	if err != nil {
		panic(err)
	}
	for _, t := range ts {
		v, _ := safetensors.F32Values(t)
		fmt.Println(t.Name, t.Dtype, t.Shape, v)
	}
	fmt.Println(md["format"], safetensors.F32ToBF16(1.0))
	// Output:
	// b F32 [2] [0.5 -0.5]
	// w F32 [2 2] [1 2 3 4]
	// pt 16256
}
