package plugins

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSeriesShardsAreTheOwnPool: with shard_split "series" the windows a
// reference trainer with shards A trains on (testdata/score/shards.json
// "series", written by trainer/tests/score_vectors.py from the loader's
// data.series_shard_blocks and data.round_batches) are exactly the
// evaluator's own pool over the layout WindowIndex.Layout builds, the
// blocks are data.series_shard_blocks' for every vector case, and no
// control window shares a point with an own window.
func TestSeriesShardsAreTheOwnPool(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "score", "shards.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		WindowLen  int   `json:"window_len"`
		Stride     int   `json:"stride"`
		ShardCount int   `json:"shard_count"`
		Shards     []int `json:"shards"`
		Series     struct {
			Lengths        []int      `json:"lengths"`
			SeriesCounts   []int      `json:"series_counts"`
			ShardGap       int        `json:"shard_gap"`
			Blocks         [][][2]int `json:"blocks"`
			TrainerWindows []int      `json:"trainer_windows"`
			RoundBatches   [][]int    `json:"round_batches"`
			Cases          []struct {
				Counts     []int      `json:"counts"`
				ShardCount int        `json:"shard_count"`
				Gap        int        `json:"gap"`
				Blocks     [][][2]int `json:"blocks"`
			} `json:"cases"`
		} `json:"series"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	sv := v.Series
	if len(sv.Cases) == 0 || len(sv.TrainerWindows) == 0 {
		t.Fatal("no series-split vectors")
	}
	for _, c := range sv.Cases {
		got, err := SeriesShardBlocks(c.Counts, c.ShardCount, c.Gap)
		if err != nil {
			t.Fatal(err)
		}
		for s := range c.Blocks {
			if !slices.Equal(got[s], c.Blocks[s]) && !(len(got[s]) == 0 && len(c.Blocks[s]) == 0) {
				t.Errorf("counts %v, %d shards, gap %d: shard %d is %v, the trainer's %v", c.Counts, c.ShardCount, c.Gap, s, got[s], c.Blocks[s])
			}
		}
	}
	w, err := NewWindowIndex(sv.Lengths, v.WindowLen, v.Stride)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.SeriesCounts(), sv.SeriesCounts) || w.ShardGap() != sv.ShardGap {
		t.Fatalf("series counts %v gap %d, the trainer's %v gap %d", w.SeriesCounts(), w.ShardGap(), sv.SeriesCounts, sv.ShardGap)
	}
	layout, err := w.Layout("series", v.ShardCount)
	if err != nil {
		t.Fatal(err)
	}
	for s := range v.ShardCount {
		if !slices.Equal(layout.Blocks(s), sv.Blocks[s]) {
			t.Errorf("shard %d: %v, the trainer's %v", s, layout.Blocks(s), sv.Blocks[s])
		}
	}
	own, ctl, err := PickScoreWindowsIn(BatchDraw{TaskID: "t-series"}, layout, v.Shards, len(sv.TrainerWindows))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(own)
	if !slices.Equal(own, sv.TrainerWindows) {
		t.Fatalf("the evaluator's own pool (%d windows) is not the trainer's shard windows (%d)", len(own), len(sv.TrainerWindows))
	}
	in := map[int]bool{}
	for _, i := range own {
		in[i] = true
	}
	for _, i := range ctl {
		cs, ca, _ := w.Locate(i)
		for _, j := range own {
			if os, oa, _ := w.Locate(j); os == cs && oa-ca < v.WindowLen && ca-oa < v.WindowLen {
				t.Errorf("control window %d (series %d at %d) overlaps own window %d (at %d)", i, cs, ca, j, oa)
			}
		}
	}
	for r, b := range sv.RoundBatches {
		for _, i := range b {
			if !in[i] {
				t.Errorf("batch %d: the trainer trains on window %d, outside the evaluator's own pool", r, i)
			}
		}
	}
	// Every long series is in every shard; the contiguous layout is unchanged by the option.
	if _, err := w.Layout("interleaved", v.ShardCount); err == nil {
		t.Error("an unknown shard_split was accepted")
	}
}

// FuzzSeriesShardBlocks: for any window counts, shard count and gap the
// blocks are disjoint, inside their series, ascending within a shard, and
// cover every window of a series dealt whole; a split series puts one block
// in every shard, and blocks of different shards in one series are more
// than gap windows apart (no shared point).
func FuzzSeriesShardBlocks(f *testing.F) {
	f.Add([]byte{200, 3, 1, 90, 0}, uint8(4), uint8(10))
	f.Add([]byte{255, 255, 7}, uint8(1), uint8(0))
	f.Add([]byte{}, uint8(3), uint8(39))
	f.Fuzz(func(t *testing.T, raw []byte, shards, gap uint8) {
		if shards == 0 || len(raw) > 64 {
			return
		}
		counts := make([]int, len(raw))
		first := make([]int, len(raw)+1)
		for i, b := range raw {
			counts[i] = int(b) * 7
			first[i+1] = first[i] + counts[i]
		}
		S, g := int(shards%16)+1, int(gap%64)
		blocks, err := SeriesShardBlocks(counts, S, g)
		if err != nil {
			t.Fatal(err)
		}
		owner := map[int]int{}
		for s, bs := range blocks {
			prev := -1
			for _, b := range bs {
				if b[0] >= b[1] || b[0] < prev {
					t.Fatalf("shard %d: block %v empty or out of order", s, b)
				}
				prev = b[1]
				for i := b[0]; i < b[1]; i++ {
					if o, ok := owner[i]; ok {
						t.Fatalf("window %d in shards %d and %d", i, o, s)
					}
					owner[i] = s
				}
			}
		}
		for i, n := range counts {
			split := n/S > g
			seen := map[int]bool{}
			last := map[int]int{}
			for w := first[i]; w < first[i+1]; w++ {
				s, ok := owner[w]
				if !ok {
					if !split {
						t.Fatalf("series %d dealt whole, window %d unassigned", i, w)
					}
					continue
				}
				if l, ok := last[s]; ok && l != w-1 {
					t.Fatalf("series %d: shard %d holds two blocks", i, s)
				}
				for o, l := range last {
					if o != s && w-l <= g && split {
						t.Fatalf("series %d: window %d of shard %d within gap %d of shard %d's %d", i, w, s, g, o, l)
					}
				}
				last[s] = w
				seen[s] = true
			}
			if split && len(seen) != S {
				t.Fatalf("series %d split into %d shards, want %d", i, len(seen), S)
			}
			if !split && n > 0 && len(seen) != 1 {
				t.Fatalf("series %d dealt whole into %d shards", i, len(seen))
			}
		}
	})
}
