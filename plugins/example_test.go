package plugins_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
)

func f32(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// A trimmed mean over four inputs through the Wasm host.
func ExampleEngine_Aggregate() {
	ctx := context.Background()
	e, err := plugins.NewEngine(ctx, plugins.Config{}) // registry in memory
	if err != nil {
		panic(err)
	}
	defer e.Close(ctx)
	rule, err := e.ResolveRule(ctx, "TrimmedMean{alpha_bps=2500}", nil, 4, 4)
	if err != nil {
		panic(err)
	}
	out, err := e.Aggregate(ctx, syncer.AggregateInput{Rule: rule, Dtype: machine.F32, N: 1,
		Inputs: [][]byte{f32(0.5), f32(1), f32(2), f32(100)}})
	if err != nil {
		panic(err)
	}
	fmt.Println(rule.Name, string(rule.Params), math.Float32frombits(binary.LittleEndian.Uint32(out.Aggregate)))
	// Output: TrimmedMean {"alpha_bps":2500} 1.5
}

func ExampleParseRef() {
	r, err := plugins.ParseRef("MultiKrum{f=1,m=3}")
	fmt.Println(r.Name, r.Params["f"], r.Params["m"], err)
	// Output: MultiKrum 1 3 <nil>
}
