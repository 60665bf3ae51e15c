package syncer

import (
	"slices"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestScoreWindowsFollowTheSpecSplit: the scorer's batches follow the
// spec's shard_split — without it, exactly the contiguous draw
// (PickScoreWindows, so specs written before the field score the same
// windows); with "series", windows of the trainer's series-balanced blocks
// only, drawn from every long series' block, and the control never from
// them.
func TestScoreWindowsFollowTheSpecSplit(t *testing.T) {
	lens := []int{3000, 120, 2000, 400, 90}
	wi, err := NewWindowIndex(lens, 80, 1)
	if err != nil {
		t.Fatal(err)
	}
	series := wire.ShardSplitSeries
	d := BatchDraw{TaskID: "t-split", Round: 3, Fragment: 1, Trainer: "did:x"}
	shards := []int{2}
	for _, tc := range []struct {
		name  string
		split *string
	}{{"absent", nil}, {"series", &series}} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &wire.TaskSpec{TrainerCount: 4, ShardSplit: tc.split}
			own, ctl, err := scoreWindows(spec, wi, d, shards, 64)
			if err != nil {
				t.Fatal(err)
			}
			if tc.split == nil {
				wo, wc, err := PickScoreWindows(d, wi.Count(), wi.ShardGap(), shards, 4, 64)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(own, wo) || !slices.Equal(ctl, wc) {
					t.Fatal("without shard_split the draw is not the contiguous one")
				}
				return
			}
			blocks, err := SeriesShardBlocks(wi.SeriesCounts(), 4, wi.ShardGap())
			if err != nil {
				t.Fatal(err)
			}
			in := func(i int) bool {
				for _, b := range blocks[2] {
					if i >= b[0] && i < b[1] {
						return true
					}
				}
				return false
			}
			seen := map[int]bool{}
			for _, i := range own {
				if !in(i) {
					t.Fatalf("own window %d outside shard 2's blocks %v", i, blocks[2])
				}
				s, _, _ := wi.Locate(i)
				seen[s] = true
			}
			if !seen[0] || !seen[2] {
				t.Fatalf("own windows from series %v: want both long series (0 and 2)", seen)
			}
			for _, i := range ctl {
				if in(i) {
					t.Fatalf("control window %d is in the trainer's blocks", i)
				}
			}
		})
	}
	bad := "contiguous"
	if _, _, err := scoreWindows(&wire.TaskSpec{TrainerCount: 4, ShardSplit: &bad}, wi, d, shards, 4); err == nil {
		t.Fatal("an unknown shard_split drew windows")
	}
}
