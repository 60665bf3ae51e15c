package plugins

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTrainerShardsAreTheOwnPool: the windows a reference trainer with
// shards A trains on (testdata/score/shards.json, written by
// trainer/tests/score_vectors.py from the trainer's data.shard_indices and
// data.round_batches) are exactly the evaluator's own pool for A over the
// corpus WindowIndex enumerates (contiguous blocks, the same gap), so an
// own-shard score measures the trainer's own data and the control batch
// never does — not even a window sharing a point with it. For a synth://
// corpus (unbounded) the trainer's windows interleave (i mod shard_count).
func TestTrainerShardsAreTheOwnPool(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "score", "shards.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Lengths        []int   `json:"lengths"`
		WindowLen      int     `json:"window_len"`
		Stride         int     `json:"stride"`
		ShardCount     int     `json:"shard_count"`
		ShardGap       int     `json:"shard_gap"`
		Shards         []int   `json:"shards"`
		TrainerWindows []int   `json:"trainer_windows"`
		RoundBatches   [][]int `json:"round_batches"`
		Synth          struct {
			RoundBatches [][]int `json:"round_batches"`
		} `json:"synth"`
		Ranges []struct {
			N          int      `json:"n"`
			ShardCount int      `json:"shard_count"`
			Gap        int      `json:"gap"`
			Ranges     [][2]int `json:"ranges"`
		} `json:"ranges"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Ranges) == 0 {
		t.Fatal("no shard range vectors")
	}
	for _, c := range v.Ranges {
		for s, want := range c.Ranges {
			if lo, hi := ShardRange(s, c.ShardCount, c.N, c.Gap); lo != want[0] || hi != want[1] {
				t.Errorf("shard %d of %d over %d windows, gap %d: [%d, %d), the trainer's [%d, %d)", s, c.ShardCount, c.N, c.Gap, lo, hi, want[0], want[1])
			}
		}
	}
	w, err := NewWindowIndex(v.Lengths, v.WindowLen, v.Stride)
	if err != nil {
		t.Fatal(err)
	}
	if w.ShardGap() != v.ShardGap || v.ShardGap == 0 {
		t.Fatalf("shard gap: the index's %d, the trainer's %d", w.ShardGap(), v.ShardGap)
	}
	// Drawing the whole own pool gives a permutation of it.
	own, ctl, err := PickScoreWindows(BatchDraw{TaskID: "t-shards"}, w.Count(), w.ShardGap(), v.Shards, v.ShardCount, len(v.TrainerWindows))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(own)
	if !slices.Equal(own, v.TrainerWindows) {
		t.Fatalf("the evaluator's own pool (%d windows) is not the trainer's shard windows (%d)", len(own), len(v.TrainerWindows))
	}
	in := map[int]bool{}
	for _, i := range own {
		in[i] = true
	}
	for _, i := range ctl {
		if in[i] {
			t.Errorf("control window %d is one the trainer trains on", i)
		}
		// No control window shares a point with an own window: within one
		// series, windows within ShardGap of each other overlap.
		cs, ca, _ := w.Locate(i)
		for _, j := range own {
			if os, oa, _ := w.Locate(j); os == cs && oa-ca < v.WindowLen && ca-oa < v.WindowLen {
				t.Errorf("control window %d (series %d at %d) overlaps own window %d (at %d)", i, cs, ca, j, oa)
			}
		}
	}
	if len(ctl) == 0 {
		t.Fatal("no control windows drawn")
	}
	for r, b := range v.RoundBatches {
		for _, i := range b {
			if !in[i] {
				t.Errorf("batch %d: the trainer trains on window %d, outside the evaluator's own pool", r, i)
			}
		}
	}
	for r, b := range v.Synth.RoundBatches {
		for _, i := range b {
			if !slices.Contains(v.Shards, i%v.ShardCount) {
				t.Errorf("synth batch %d: window %d is in shard %d, not in %v", r, i, i%v.ShardCount, v.Shards)
			}
		}
	}
}

// TestCoHoldersTrainInTheirOwnPools: under shard_holders 2 (scoring.md
// §3.1) each holder's per-trainer batches (testdata/score/shards.json
// "coholders", data.round_batches with the trainer's DID) lie in the
// evaluator's own pool for its shards, and two trainers holding the same
// shards draw a different batch at every step — the draw today's seed
// would make equal, and the copy rule would then slash.
func TestCoHoldersTrainInTheirOwnPools(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "score", "shards.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Lengths    []int `json:"lengths"`
		WindowLen  int   `json:"window_len"`
		Stride     int   `json:"stride"`
		ShardCount int   `json:"shard_count"`
		CoHolders  struct {
			Task     string `json:"task"`
			Trainers []struct {
				DID            string  `json:"did"`
				Shards         []int   `json:"shards"`
				TrainerWindows []int   `json:"trainer_windows"`
				RoundBatches   [][]int `json:"round_batches"`
			} `json:"trainers"`
		} `json:"coholders"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	w, err := NewWindowIndex(v.Lengths, v.WindowLen, v.Stride)
	if err != nil {
		t.Fatal(err)
	}
	ts := v.CoHolders.Trainers
	if len(ts) < 2 || !slices.Equal(ts[0].Shards, ts[1].Shards) {
		t.Fatalf("the vector needs two trainers holding the same shards, has %d", len(ts))
	}
	for _, tr := range ts {
		own, _, err := PickScoreWindows(BatchDraw{TaskID: v.CoHolders.Task}, w.Count(), w.ShardGap(), tr.Shards, v.ShardCount, len(tr.TrainerWindows))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(own)
		if !slices.Equal(own, tr.TrainerWindows) {
			t.Fatalf("%s: the evaluator's own pool (%d windows) is not the trainer's shard windows (%d)", tr.DID, len(own), len(tr.TrainerWindows))
		}
		for r, b := range tr.RoundBatches {
			for _, i := range b {
				if _, found := slices.BinarySearch(own, i); !found {
					t.Errorf("%s batch %d: window %d outside its own pool", tr.DID, r, i)
				}
			}
		}
	}
	if len(ts[0].RoundBatches) == 0 || len(ts[0].RoundBatches) != len(ts[1].RoundBatches) {
		t.Fatalf("batches: %d and %d", len(ts[0].RoundBatches), len(ts[1].RoundBatches))
	}
	for i := range ts[0].RoundBatches {
		if slices.Equal(ts[0].RoundBatches[i], ts[1].RoundBatches[i]) {
			t.Errorf("step %d: the two holders of %v draw the same batch %v", i, ts[0].Shards, ts[0].RoundBatches[i])
		}
	}
}
