//go:build wasip1

// Command go-median is an example third-party rule written with the Go SDK:
// the coordinate-wise median (Yin et al. 2018, ICML), ties broken by sorting
// values (so the result does not depend on input order).
//
//	tenzro plugin build plugins/examples/go-median
package main

import (
	"slices"

	"github.com/tenzro/train/plugins/sdk/go/tenzro"
)

func init() {
	tenzro.SetAggregate(func(a *tenzro.AggregateArgs) error {
		if a.K < 1 {
			return &tenzro.Error{Code: tenzro.ErrTooFew, Text: "need at least one input"}
		}
		col := make([]float32, a.K)
		for c := 0; c < a.N; c++ {
			for i := range a.Inputs {
				col[i] = a.Inputs[i][c]
			}
			slices.Sort(col)
			if a.K%2 == 1 {
				a.Out[c] = col[a.K/2]
			} else {
				a.Out[c] = float32((float64(col[a.K/2-1]) + float64(col[a.K/2])) / 2)
			}
		}
		for i := range a.Selected {
			a.Selected[i] = true
		}
		return nil
	})
}

func main() {}
