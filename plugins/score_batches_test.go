package plugins

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWindowIndexMatchesLoader: the Go enumeration gives every training
// window of the trainer's data.make_windows (testdata/score/windows.json,
// trainer/tests/score_vectors.py) at the same index.
func TestWindowIndexMatchesLoader(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "score", "windows.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Lengths   []int    `json:"lengths"`
		WindowLen int      `json:"window_len"`
		Stride    int      `json:"stride"`
		Windows   [][2]int `json:"windows"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	w, err := NewWindowIndex(v.Lengths, v.WindowLen, v.Stride)
	if err != nil {
		t.Fatal(err)
	}
	if w.Count() != len(v.Windows) {
		t.Fatalf("%d windows, the loader has %d", w.Count(), len(v.Windows))
	}
	series := make([][]float32, len(v.Lengths))
	for s, n := range v.Lengths {
		series[s] = make([]float32, n)
		for i := range series[s] {
			series[s][i] = float32(s*1000 + i%1000)
		}
	}
	for i, want := range v.Windows {
		s, a, err := w.Locate(i)
		if err != nil || s != want[0] || a != want[1] {
			t.Fatalf("window %d: series %d start %d (%v), loader says %v", i, s, a, err, want)
		}
		b, err := w.AppendWindows(nil, series, []int{i})
		if err != nil || len(b) != 4*v.WindowLen {
			t.Fatalf("window %d: %d bytes, %v", i, len(b), err)
		}
	}
	if _, _, err := w.Locate(w.Count()); err == nil {
		t.Error("Locate past the end succeeded")
	}
}

// TestPickScoreWindows: the draw is a function of its inputs only, the own
// batch comes from the trainer's shards and the control batch from the
// others, windows are distinct, and every window of a pool is about as
// likely (a loose bound on a fixed sample: deterministic, never flaky).
func TestPickScoreWindows(t *testing.T) {
	d := BatchDraw{TaskID: "task-1", Round: 3, Fragment: 1, Trainer: "did:tenzro:trainer:a"}
	copy(d.Randomness[:], "chain randomness after the window")
	own, ctl, err := PickScoreWindows(d, 1000, []int{2, 5}, 6, 16)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, i := range own {
		if i%6 != 2 && i%6 != 5 || i < 0 || i >= 1000 || seen[i] {
			t.Errorf("own window %d: not in shards 2, 5 of 6, or repeated", i)
		}
		seen[i] = true
	}
	for _, i := range ctl {
		if i%6 == 2 || i%6 == 5 || i < 0 || i >= 1000 || seen[i] {
			t.Errorf("control window %d: in the trainer's shards, or repeated", i)
		}
		seen[i] = true
	}
	again, ctl2, _ := PickScoreWindows(d, 1000, []int{5, 2}, 6, 16)
	if fmt.Sprint(again, ctl2) != fmt.Sprint(own, ctl) {
		t.Error("the draw depends on the order the shards are listed in")
	}
	for _, mod := range []func(*BatchDraw){
		func(x *BatchDraw) { x.Randomness[0] ^= 1 },
		func(x *BatchDraw) { x.Round++ },
		func(x *BatchDraw) { x.Fragment++ },
		func(x *BatchDraw) { x.Trainer += "b" },
		func(x *BatchDraw) { x.TaskID += "b" },
	} {
		x := d
		mod(&x)
		o2, _, _ := PickScoreWindows(x, 1000, []int{2, 5}, 6, 16)
		if fmt.Sprint(o2) == fmt.Sprint(own) {
			t.Errorf("a changed draw %+v picked the same windows", x)
		}
	}
	// A whole pool: a permutation of it.
	all, _, err := PickScoreWindows(d, 30, []int{0}, 3, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]bool{}
	for _, i := range all {
		got[i] = true
	}
	for i := 0; i < 30; i += 3 {
		if !got[i] {
			t.Errorf("window %d of the only own pool never drawn: %v", i, all)
		}
	}
	// Uniformity over 4000 draws of one window from a pool of 10.
	counts := make([]int, 10)
	for r := 0; r < 4000; r++ {
		x := d
		x.Round = uint64(r)
		o, _, err := PickScoreWindows(x, 20, []int{1}, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		counts[o[0]/2]++
	}
	for i, c := range counts { // mean 400, sd 19
		if c < 300 || c > 500 {
			t.Errorf("window %d drawn %d times in 4000 (counts %v)", 2*i+1, c, counts)
		}
	}
}

// TestPickScoreWindowsGolden pins the derivation of docs/protocol/scoring.md
// §3 (the seed, the rejection sampling, the partial Fisher–Yates order).
func TestPickScoreWindowsGolden(t *testing.T) {
	var d BatchDraw
	copy(d.Randomness[:], strings.Repeat("\x42", 32))
	d.TaskID, d.Round, d.Fragment, d.Trainer = "t", 7, 2, "did:tenzro:trainer:x"
	own, ctl, err := PickScoreWindows(d, 5000, []int{3}, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(own, ctl), "[3651 2867 2419 2259] [3209 1364 3994 3493]"; got != want {
		t.Errorf("draw %s, want %s (seed %s)", got, want, d.Seed())
	}
	if s := d.Seed().String(); s != "5c44931ac1f7f2a301148b64accc45e0c397a0a2f41f6d4bae02b28a9ce8b560" {
		t.Errorf("seed %s", s)
	}
}

func TestPickScoreWindowsRefuses(t *testing.T) {
	var d BatchDraw
	for _, tc := range []struct {
		n, count, shardCount int
		shards               []int
		want                 string
	}{
		{100, 4, 1, []int{0}, "at least one own shard and one other"},
		{100, 4, 4, []int{0, 1, 2, 3}, "at least one own shard and one other"},
		{100, 4, 4, nil, "at least one own shard and one other"},
		{100, 4, 4, []int{1, 1}, "repeated"},
		{100, 4, 4, []int{4}, "outside"},
		{100, 0, 4, []int{1}, "batch of 0"},
		{10, 4, 4, []int{1}, "too few windows"},
	} {
		_, _, err := PickScoreWindows(d, tc.n, tc.shards, tc.shardCount, tc.count)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
	if _, _, err := PickScoreWindows(d, 10, []int{1}, 4, 4); !errors.Is(err, ErrFewWindows) {
		t.Errorf("few windows: %v", err)
	}
}
