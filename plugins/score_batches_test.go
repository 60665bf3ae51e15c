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

// shardOf is the shard window i of n belongs to under ShardRange, -1 in a
// gap.
func shardOf(i, shardCount, n, gap int) int {
	for s := 0; s < shardCount; s++ {
		if lo, hi := ShardRange(s, shardCount, n, gap); i >= lo && i < hi {
			return s
		}
	}
	return -1
}

// TestShardRange: shards are ascending contiguous blocks; with gap 0 they
// partition the windows; with a gap, each shard but the first starts gap
// windows after the previous block ends, so indices of two shards differ by
// more than the gap (no shared point); a gap that would empty a block is
// capped at ⌊n/S⌋ − 1, so every shard keeps a window when n ≥ S.
func TestShardRange(t *testing.T) {
	for _, tc := range []struct{ n, shardCount, gap int }{
		{1000, 6, 0}, {1000, 6, 3}, {3419, 16, 39}, {7, 3, 0}, {7, 3, 1}, {10, 4, 5}, {0, 2, 0}, {1 << 40, 3, 7},
	} {
		prevHi, total := 0, 0
		g := min(tc.gap, max(tc.n/tc.shardCount-1, 0))
		for s := 0; s < tc.shardCount; s++ {
			lo, hi := ShardRange(s, tc.shardCount, tc.n, tc.gap)
			if lo > hi || lo < prevHi || hi > tc.n || tc.n >= tc.shardCount && lo == hi {
				t.Fatalf("%+v shard %d: [%d, %d) after %d", tc, s, lo, hi, prevHi)
			}
			block := int(int64(s) * int64(tc.n) / int64(tc.shardCount))
			wantLo := block
			if s > 0 {
				wantLo = block + g
			}
			if lo != wantLo || hi != int(int64(s+1)*int64(tc.n)/int64(tc.shardCount)) {
				t.Fatalf("%+v shard %d: [%d, %d), want [%d, %d)", tc, s, lo, hi, wantLo, int(int64(s+1)*int64(tc.n)/int64(tc.shardCount)))
			}
			if s > 0 && g == tc.gap && hi > lo && prevHi > 0 && lo-(prevHi-1) <= tc.gap {
				t.Fatalf("%+v shard %d starts at %d, within %d of the previous shard's last window %d", tc, s, lo, tc.gap, prevHi-1)
			}
			if hi > lo {
				prevHi = hi
			}
			total += hi - lo
		}
		if tc.gap == 0 && total != tc.n {
			t.Fatalf("%+v: shards hold %d of %d windows", tc, total, tc.n)
		}
	}
}

// TestPickScoreWindows: the draw is a function of its inputs only, the own
// batch comes from the trainer's shards and the control batch from the
// others (never from a gap), windows are distinct, and every window of a
// pool is about as likely (a loose bound on a fixed sample: deterministic,
// never flaky).
func TestPickScoreWindows(t *testing.T) {
	d := BatchDraw{TaskID: "task-1", Round: 3, Fragment: 1, Trainer: "did:tenzro:trainer:a"}
	copy(d.Randomness[:], "chain randomness after the window")
	own, ctl, err := PickScoreWindows(d, 1000, 3, []int{2, 5}, 6, 16)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, i := range own {
		if s := shardOf(i, 6, 1000, 3); s != 2 && s != 5 || seen[i] {
			t.Errorf("own window %d: in shard %d, not 2 or 5 of 6, or repeated", i, s)
		}
		seen[i] = true
	}
	for _, i := range ctl {
		if s := shardOf(i, 6, 1000, 3); s < 0 || s == 2 || s == 5 || seen[i] {
			t.Errorf("control window %d: in shard %d (a gap, or the trainer's), or repeated", i, s)
		}
		seen[i] = true
	}
	again, ctl2, _ := PickScoreWindows(d, 1000, 3, []int{5, 2}, 6, 16)
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
		o2, _, _ := PickScoreWindows(x, 1000, 3, []int{2, 5}, 6, 16)
		if fmt.Sprint(o2) == fmt.Sprint(own) {
			t.Errorf("a changed draw %+v picked the same windows", x)
		}
	}
	// A whole pool: a permutation of it.
	all, _, err := PickScoreWindows(d, 30, 2, []int{1}, 3, 8)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]bool{}
	for _, i := range all {
		got[i] = true
	}
	for i := 12; i < 20; i++ { // shard 1 of 3 over 30 windows, gap 2
		if !got[i] {
			t.Errorf("window %d of the only own pool never drawn: %v", i, all)
		}
	}
	// Uniformity over 4000 draws of one window from a pool of 10.
	counts := make([]int, 10)
	for r := 0; r < 4000; r++ {
		x := d
		x.Round = uint64(r)
		o, _, err := PickScoreWindows(x, 20, 0, []int{1}, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		counts[o[0]-10]++
	}
	for i, c := range counts { // mean 400, sd 19
		if c < 300 || c > 500 {
			t.Errorf("window %d drawn %d times in 4000 (counts %v)", 10+i, c, counts)
		}
	}
}

// TestPickScoreWindowsGolden pins the derivation of docs/protocol/scoring.md
// §3 (the seed, the rejection sampling, the partial Fisher–Yates order).
func TestPickScoreWindowsGolden(t *testing.T) {
	var d BatchDraw
	copy(d.Randomness[:], strings.Repeat("\x42", 32))
	d.TaskID, d.Round, d.Fragment, d.Trainer = "t", 7, 2, "did:tenzro:trainer:x"
	own, ctl, err := PickScoreWindows(d, 5000, 39, []int{3}, 8, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(own, ctl), "[2298 2116 2382 2226] [4350 1667 1480 957]"; got != want {
		t.Errorf("draw %s, want %s (seed %s)", got, want, d.Seed())
	}
	if s := d.Seed().String(); s != "5c44931ac1f7f2a301148b64accc45e0c397a0a2f41f6d4bae02b28a9ce8b560" {
		t.Errorf("seed %s", s)
	}
}

func TestPickScoreWindowsRefuses(t *testing.T) {
	var d BatchDraw
	for _, tc := range []struct {
		n, gap, count, shardCount int
		shards                    []int
		want                      string
	}{
		{100, 0, 4, 1, []int{0}, "at least one own shard and one other"},
		{100, 0, 4, 4, []int{0, 1, 2, 3}, "at least one own shard and one other"},
		{100, 0, 4, 4, nil, "at least one own shard and one other"},
		{100, 0, 4, 4, []int{1, 1}, "repeated"},
		{100, 0, 4, 4, []int{4}, "outside"},
		{100, 0, 0, 4, []int{1}, "batch of 0"},
		{100, -1, 4, 4, []int{1}, "batch of 4"},
		{10, 0, 4, 4, []int{1}, "too few windows"},
		{100, 30, 4, 4, []int{1}, "too few windows"},
	} {
		_, _, err := PickScoreWindows(d, tc.n, tc.gap, tc.shards, tc.shardCount, tc.count)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
	if _, _, err := PickScoreWindows(d, 10, 0, []int{1}, 4, 4); !errors.Is(err, ErrFewWindows) {
		t.Errorf("few windows: %v", err)
	}
}
