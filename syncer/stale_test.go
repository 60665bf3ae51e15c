package syncer_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// TestReplaysArePaidNothing: four trainers, three rounds, a challenge
// window of 3 blocks. Trainers 0–2 send a fresh gradient every round;
// trainer 3 sends its round-0 values again in rounds 1 and 2, re-bound to
// the new round (a valid submission). The stale rule names it a replay of
// the nearest earlier round it copies (round r−1): it is rejected with stale_of_round, unpaid (its round-0 pay forfeited too)
// and slashed copies.slash_bps per replay; the honest trainers'
// consecutive inputs are not flagged and are paid alike. A re-execution of
// a commit with a replay agrees with it, the verdict is in
// FragmentResultHash, and the receipt carries it and verifies.
func TestReplaysArePaidNothing(t *testing.T) {
	const M, R = 4, 3
	h := payRun(t, M, M-1, R, "Mean", challengeable)
	did := func(i int) string { return h.tr[i].DID.String() }
	first := h.gradient(3, 0, 0, 1)
	checked := false
	for round := 0; round < R; round++ {
		for i := 0; i < 3; i++ {
			if err := h.submit(h.gradient(i, round, 0, 1)); err != nil {
				t.Fatal(err)
			}
		}
		g := first
		if round > 0 {
			g = h.resend(first, 3, round) // the same values bound to the new round, re-signed
		}
		if err := h.submit(g); err != nil {
			t.Fatalf("round %d: a replay is a valid submission (the stale rule judges it at commit): %v", round, err)
		}
		h.closeRound(round)
		if round == 1 && !checked { // round 1's commit is still challengeable
			re, err := h.node.Reexecute(h.ctx, h.task, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !re.Agrees() || re.Commit == nil {
				t.Fatalf("re-execution of round 1: %+v", re)
			}
			// What a watcher compares: a syncer that spared the replayer, or
			// named an honest input a replay, commits another result hash.
			spared, invented := *re.Commit, *re.Commit
			spared.Inputs = append([]wire.CommitInput(nil), re.Commit.Inputs...)
			invented.Inputs = append([]wire.CommitInput(nil), re.Commit.Inputs...)
			named := 0
			for j, in := range re.Commit.Inputs {
				switch {
				case in.TrainerDID == did(3):
					if in.StaleOfRound == nil || *in.StaleOfRound != 0 {
						t.Fatalf("re-executed round 1: the replay is %+v", in)
					}
					spared.Inputs[j].StaleOfRound, spared.Inputs[j].Rejected = nil, ""
					named++
				case in.TrainerDID == did(0):
					zero := uint64(0)
					invented.Inputs[j].StaleOfRound, invented.Inputs[j].Rejected = &zero, "replay"
				}
			}
			if named != 1 || wire.FragmentResultHash(&spared) == re.Result || wire.FragmentResultHash(&invented) == re.Result {
				t.Fatal("a missed or invented stale verdict has the re-executed result hash")
			}
			checked = true
		}
	}
	v, tr := sealAndTranscript(h, R)
	if !checked {
		t.Fatal("round 1 was not re-executed")
	}
	for round, rc := range tr {
		fc := rc.Fragments[0]
		if fc.Status != wire.FragAggregated {
			t.Fatalf("round %d: %s %s", round, fc.Status, fc.Reason)
		}
		for _, in := range fc.Inputs {
			switch {
			case in.TrainerDID == did(3) && round > 0:
				if in.StaleOfRound == nil || *in.StaleOfRound != uint64(round-1) || in.CopyOf != "" || !strings.Contains(in.Rejected, "replay") {
					t.Errorf("round %d: the replay is %+v, want stale_of_round %d", round, in, round-1)
				}
				// The verdict is part of what a challenge disputes.
				c := fc
				c.Inputs = append([]wire.CommitInput(nil), fc.Inputs...)
				for j := range c.Inputs {
					c.Inputs[j].StaleOfRound = nil
				}
				if wire.FragmentResultHash(&c) == wire.FragmentResultHash(&fc) {
					t.Fatal("stale verdicts are not in FragmentResultHash")
				}
			default:
				if in.StaleOfRound != nil || in.Rejected != "" {
					t.Errorf("round %d: %s flagged: %+v", round, in.TrainerDID, in)
				}
			}
		}
	}
	slashed := map[string]string{}
	for _, tv := range v.Trainers {
		slashed[tv.DID] = tv.Slashed
	}
	pay := func(i int) string { return v.TrainerMetrics[did(i)].CurrentReward }
	for i := 0; i < 3; i++ {
		if pay(i) != pay(0) || pay(i) == "0" || slashed[did(i)] != "0" {
			t.Fatalf("honest trainer %d: paid %s slashed %s, trainer 0 paid %s", i, pay(i), slashed[did(i)], pay(0))
		}
	}
	// Two replays at 5000 bps of a 1000 stake: 500, then 250 — at least
	// 750 (its rounds without an accepted input are missed rounds too).
	if n, err := strconv.Atoi(slashed[did(3)]); pay(3) != "0" || err != nil || n < 750 {
		t.Fatalf("replayer: paid %s, slashed %s (want 0 and at least 750)", pay(3), slashed[did(3)])
	}
	h.receiptCarries(`"stale_of_round":1`)
}
