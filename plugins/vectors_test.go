package plugins

import (
	"testing"
)

// Hand-checked vectors from the published definitions.
func TestClassicVectors(t *testing.T) {
	e := testEngine(t)
	tests := []struct {
		name string
		ref  string
		in   [][]float32
		want []float32
		sel  []bool
	}{
		// Blanchard et al. with Flower's neighbour clamp max(1, K-f-2):
		// scores 0.25, 0.09, 0.09 -> tie to the lowest index -> 0.7.
		{"krum f=1 relaxed", "Krum{f=1,relaxed=1}", [][]float32{{0.2}, {0.7}, {1.0}}, []float32{0.7}, []bool{false, true, false}},
		// beta=0.25 of K=4 trims one value at each end: mean(1, 2) = 1.5.
		{"trimmed mean", "TrimmedMean{alpha_bps=2500}", [][]float32{{0.5}, {1}, {2}, {100}}, []float32{1.5}, nil},
		{"mean", "Mean", [][]float32{{1, 2}, {3, 4}, {5, 9}}, []float32{3, 5}, nil},
		{"median odd", "CoordinateMedian", [][]float32{{1, -5}, {100, 0}, {2, 7}}, []float32{2, 0}, nil},
		{"median even", "CoordinateMedian", [][]float32{{1}, {100}, {2}, {3}}, []float32{2.5}, nil},
		{"multikrum", "MultiKrum{f=1,m=2}", [][]float32{{0}, {1}, {2}, {3}, {100}}, []float32{1.5}, []bool{false, true, true, false, false}},
		// theta = K-2f = 5 chosen by repeated Krum (drops 100 and -100),
		// beta = 3 closest to the median 2 of {0..4}: {1,2,3} -> 2.
		{"bulyan", "Bulyan{f=1}", [][]float32{{0}, {1}, {2}, {3}, {4}, {100}, {-100}}, []float32{2}, []bool{true, true, true, true, true, false, false}},
		{"geomedian symmetric", "GeometricMedian{iterations=50}", [][]float32{{-1, 0}, {1, 0}, {0, 1}, {0, -1}}, []float32{0, 0}, nil},
		// all within tau: one step from 0 is the mean.
		{"centered clipping", "CenteredClipping{tau=100,iterations=1}", [][]float32{{1}, {2}, {3}}, []float32{2}, nil},
		// tau=1 clips each to unit length: (1 + 1 + 1)/3 = 1.
		{"centered clipping clips", "CenteredClipping{tau=1,iterations=1}", [][]float32{{10}, {20}, {30}}, []float32{1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rr := mustResolve(t, e, tc.ref, len(tc.in))
			out := aggregate(t, e, rr, tc.in)
			got := toF32(out.Aggregate)
			for i := range tc.want {
				if d := got[i] - tc.want[i]; d > 1e-6 || d < -1e-6 {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
			if tc.sel != nil {
				for i := range tc.sel {
					if out.Selected[i] != tc.sel[i] {
						t.Fatalf("selected %v, want %v", out.Selected, tc.sel)
					}
				}
			}
			if out.Fuel == 0 {
				t.Fatal("no fuel charged")
			}
		})
	}
}
