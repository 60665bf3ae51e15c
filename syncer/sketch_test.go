package syncer_test

import (
	"fmt"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestReplayCyclesBySketch: four trainers, six rounds. Trainers 0–2 send a
// fresh gradient every round; trainer 3 trains in rounds 0–2 and then
// cycles through those three gradients (round r sends round r−3's values,
// re-bound), which the stale rule's payload comparison with rounds r−1,
// r−2 cannot see. With copies.sketch_dim set, every kept input carries a
// sketch and the replays are named stale_of_round r−3 by it; honest inputs
// are never flagged; a re-execution agrees and the sketches are in
// FragmentResultHash and the receipt. Without it, the cycle is kept (the
// limit copies.md §6 states).
func TestReplayCyclesBySketch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		copies string
		caught bool
	}{
		{"sketch", `"copies":{"sketch_dim":64},`, true},
		{"no sketch", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) { replayCycle(t, tc.copies, tc.caught) })
	}
}

func replayCycle(t *testing.T, copies string, caught bool) {
	const M, R, cycle = 4, 6, 3
	h := payRun(t, M, M-1, R, "Mean", copies+challengeable)
	did := func(i int) string { return h.tr[i].DID.String() }
	var trained []*wire.OuterGradient
	checked := false
	for round := 0; round < R; round++ {
		for i := 0; i < 3; i++ {
			if err := h.submit(h.gradient(i, round, 0, 1)); err != nil {
				t.Fatal(err)
			}
		}
		var g *wire.OuterGradient
		if round < cycle {
			g = h.gradient(3, round, 0, 1)
			trained = append(trained, g)
		} else {
			g = h.resend(trained[round%cycle], 3, round)
		}
		if err := h.submit(g); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		h.closeRound(round)
		if round == 4 && caught && !checked { // round 4's commit is still challengeable
			re, err := h.node.Reexecute(h.ctx, h.task, 4, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !re.Agrees() || re.Commit == nil {
				t.Fatalf("re-execution of round 4: %+v", re)
			}
			// A syncer that spared the cycling replayer, or altered a
			// sketch, commits another result hash.
			spared, altered := *re.Commit, *re.Commit
			spared.Inputs = append([]wire.CommitInput(nil), re.Commit.Inputs...)
			altered.Inputs = append([]wire.CommitInput(nil), re.Commit.Inputs...)
			for j, in := range re.Commit.Inputs {
				switch in.TrainerDID {
				case did(3):
					if in.StaleOfRound == nil || *in.StaleOfRound != 1 {
						t.Fatalf("re-executed round 4: the replay is %+v", in)
					}
					spared.Inputs[j].StaleOfRound, spared.Inputs[j].Rejected = nil, ""
				case did(0):
					sk := append([]byte(nil), in.Sketch...)
					sk[0] ^= 1
					altered.Inputs[j].Sketch = sk
				}
			}
			if wire.FragmentResultHash(&spared) == re.Result || wire.FragmentResultHash(&altered) == re.Result {
				t.Fatal("a missed replay or an altered sketch has the re-executed result hash")
			}
			checked = true
		}
	}
	_, tr := sealAndTranscript(h, R)
	if checked != caught {
		t.Fatalf("round 4 re-executed: %v, want %v", checked, caught)
	}
	for round, rc := range tr {
		fc := rc.Fragments[0]
		if fc.Status != wire.FragAggregated {
			t.Fatalf("round %d: %s %s", round, fc.Status, fc.Reason)
		}
		for _, in := range fc.Inputs {
			replay := in.TrainerDID == did(3) && round >= cycle
			switch {
			case replay && caught:
				if in.StaleOfRound == nil || *in.StaleOfRound != uint64(round-cycle) || in.Sketch != nil {
					t.Errorf("round %d: the cycling replay is %+v, want stale_of_round %d and no sketch", round, in, round-cycle)
				}
			case in.StaleOfRound != nil || in.Rejected != "":
				t.Errorf("round %d: %s flagged: %+v", round, in.TrainerDID, in)
			case caught && len(in.Sketch) != 2*64:
				t.Errorf("round %d: kept input of %s has a sketch of %d bytes", round, in.TrainerDID, len(in.Sketch))
			case !caught && in.Sketch != nil:
				t.Errorf("round %d: a sketch without copies.sketch_dim", round)
			}
		}
	}
	if caught {
		h.receiptCarries(fmt.Sprintf(`"stale_of_round":%d`, R-1-cycle))
		h.receiptCarries(`"sketch":"`)
	}
}
