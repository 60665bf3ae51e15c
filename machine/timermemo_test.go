package machine

import (
	"context"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestTimerMemo: a machine that keeps its timer memo across blocks leaves
// the state byte for byte as machines that start empty at every block do
// (the memo is a cache of a pure function of stored bytes), and a run
// whose round deadline passed while a syncer's commits are still awaited
// costs a block one read of its header and one scan of its fragment states,
// nothing decoded, once the memo holds it. A block whose timers find
// nothing to do reads the header once, memo or not (a miss decodes the
// bytes it read to key the memo).
func TestTimerMemo(t *testing.T) {
	ctx := context.Background()
	blocks := []Block{{Height: 3, TimeMs: 10, Hash: []byte{3}}, {Height: 4, TimeMs: 20, Hash: []byte{4}},
		{Height: 5, TimeMs: 700_000, Hash: []byte{5}}, {Height: 6, TimeMs: 700_100, Hash: []byte{6}},
		{Height: 7, TimeMs: 700_200, Hash: []byte{7}}, {Height: 8, TimeMs: 700_300, Hash: []byte{8}},
		{Height: 9, TimeMs: 700_400, Hash: []byte{9}}, {Height: 10, TimeMs: 1_400_000, Hash: []byte{10}}}
	// Between blocks, the run changes under the memo (the same change in
	// both modes): a fragment's records drop below quorum (same header, new
	// fragment bytes: the deadline now fires), then the run is cancelled (a
	// new header: the index cleanup).
	edits := map[int]func(r *Run){
		4: func(r *Run) { r.Fragments[1].Records = r.Fragments[1].Records[:1] },
		5: func(r *Run) { r.Status = wire.StatusCancelled },
	}
	cases := []struct {
		name  string
		recs  []int
		stuck bool // the deadline passes with every fragment at quorum: nothing fires
	}{
		{"every fragment at quorum, no commit yet", []int{4, 4, 4, 4}, true},
		{"fragments below quorum close at the deadline", []int{4, 4, 2, 0}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var states [2][]string
			for mode, shared := range []bool{true, false} {
				state, _ := commitState(t, 4, 4, func(f int) int { return tc.recs[f] })
				x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: 2, TimeMs: 6})
				x.set(KSMeta, activeKey("st"), []byte{})
				if err := x.finish(); err != nil {
					t.Fatal(err)
				}
				m := NewMachine(MachineConfig{})
				for n, blk := range blocks {
					if !shared {
						m = NewMachine(MachineConfig{})
					}
					if edit := edits[n]; edit != nil {
						r, err := LoadRun(ctx, state, "st")
						if err != nil {
							t.Fatal(err)
						}
						edit(r)
						x := NewMachine(MachineConfig{}).begin(ctx, state, Block{Height: blk.Height - 1, TimeMs: blk.TimeMs - 1})
						if err := x.putRun(r); err != nil {
							t.Fatal(err)
						}
						if err := x.finish(); err != nil {
							t.Fatal(err)
						}
					}
					ck := &ksCountKV{KV: state, ks: KSRuns}
					if err := m.BeginBlock(ctx, ck, blk); err != nil {
						t.Fatal(err)
					}
					if n < 5 && len(ck.writes) == 0 && ck.heads != 1 { // n = 5: cancelled, the run left the timers' index
						t.Fatalf("block %d (memo kept: %v): %d reads of the header, want 1", blk.Height, shared, ck.heads)
					}
					if shared && tc.stuck && (n == 3 || n == 4) && edits[n] == nil {
						if ck.gets != 1 || ck.scans != 1 || len(ck.writes) != 0 {
							t.Fatalf("block %d: %d reads, %d scans, %d writes of the run's keys; want 1, 1, 0 (the memo answers)", blk.Height, ck.gets, ck.scans, len(ck.writes))
						}
					}
					states[mode] = append(states[mode], strings.Join(ck.writes, "\n")+"\n--- state:\n"+dumpState(t, state))
				}
			}
			for n := range blocks {
				if states[0][n] != states[1][n] {
					t.Fatalf("after block %d, with the memo:\n%s\nwithout:\n%s", blocks[n].Height, states[0][n], states[1][n])
				}
			}
			if !tc.stuck && states[0][2] == states[0][1] {
				t.Fatal("the deadline changed nothing: this case no longer exercises a firing timer")
			}
			for _, n := range []int{4, 5} {
				if states[0][n] == states[0][n-1] {
					t.Fatalf("block %d: the edit before it changed nothing the timers wrote: the memo's invalidation is not exercised", blocks[n].Height)
				}
			}
		})
	}
}
