package chain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// mrun is the machine's view of task's run.
func (h *harness) mrun(task string) *machine.Run {
	h.t.Helper()
	var r *machine.Run
	if err := h.app.View(context.Background(), func(v machine.View) (err error) {
		r, err = machine.LoadRun(context.Background(), v.KV, task)
		return err
	}); err != nil {
		h.t.Fatal(err)
	}
	return r
}

// TestDeadSyncerSkippedInLaterRounds (issue 22 finding 11): the elected
// syncer (ticket 0) dies. Round 0 waits out one deadline and ticket 1
// commits; from round 1 on ticket 0 is skipped, so ticket 1 commits at the
// round's start instead of after another deadline, and ticket 0 is refused
// there. When ticket 1 in turn misses round 2, ticket 0 (back, after every
// other entrant) commits after one deadline, which shows it alive: round 3
// is its again, and ticket 1 is now the skipped one.
func TestDeadSyncerSkippedInLaterRounds(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	cands := []*did.Key{w.candA, w.candB}
	const task = "dead"
	succ := startRunRounds(t, h, w, task, 2, 2, 4, []*did.Key{w.t1, w.t2}, cands)
	first, second := keyOf(cands, succ[0]), keyOf(cands, succ[1])
	nonce := map[*did.Key]uint64{first: 10, second: 10}
	commit := func(k *did.Key, ticket uint64, f int) []byte {
		nonce[k]++
		return h.commit(task, f, k, ticket, wire.FragAggregated, "", nonce[k])
	}
	submitAll := func(round uint64) {
		t.Helper()
		var cases []txCase
		for f := uint64(0); f < 2; f++ {
			for i, tr := range []*did.Key{w.t1, w.t2} {
				ph := wire.ContentHash([]byte(fmt.Sprintf("r%d f%d t%d", round, f, i)))
				cases = append(cases, txCase{fmt.Sprintf("round %d f%d t%d", round, f, i), must(SubmissionTx(ManualChainID, tr, task, round, f, ph, 4)), CodeOK})
			}
		}
		runBlock(t, h, cases)
	}
	roundStart := func() time.Time { return time.UnixMilli(h.run(task).RoundMs) }

	// Round 0: ticket 0 is dead; ticket 1 commits after one deadline.
	submitAll(0)
	h.now = roundStart().Add(60 * time.Second)
	runBlock(t, h, []txCase{{"ticket 1 f0", commit(second, 1, 0), CodeOK}, {"ticket 1 f1", commit(second, 1, 1), CodeOK}})
	if r := h.mrun(task); r.Round != 1 || !slices.Equal(r.Skipped, []uint64{0}) {
		t.Fatalf("after round 0: round %d, skipped %v; want round 1, skipped [0]", r.Round, r.Skipped)
	}
	// Round 1: ticket 1's turn at once; ticket 0 is refused.
	submitAll(1)
	h.now = roundStart()
	if who, k := h.mrun(task).SyncerAt(h.now.UnixMilli()); who != second.DID.String() || k != 1 {
		t.Fatalf("round 1 starts with %s (ticket %d), want ticket 1", who, k)
	}
	runBlock(t, h, []txCase{
		{"skipped ticket 0 at the round's start", commit(first, 0, 0), CodeUnauthorized},
		{"ticket 1 f0 at once", commit(second, 1, 0), CodeOK},
		{"ticket 1 f1 at once", commit(second, 1, 1), CodeOK},
	})
	if r := h.mrun(task); r.Round != 2 || !slices.Equal(r.Skipped, []uint64{0}) {
		t.Fatalf("after round 1: round %d, skipped %v", r.Round, r.Skipped)
	}
	// Round 2: ticket 1 misses; ticket 0 serves after one deadline and is
	// restored, ticket 1 skipped.
	submitAll(2)
	h.now = roundStart().Add(60 * time.Second)
	runBlock(t, h, []txCase{{"ticket 0 f0 after a deadline", commit(first, 0, 0), CodeOK}, {"ticket 0 f1", commit(first, 0, 1), CodeOK}})
	r := h.mrun(task)
	if r.Round != 3 || !slices.Equal(r.Skipped, []uint64{1}) {
		t.Fatalf("after round 2: round %d, skipped %v; want round 3, skipped [1]", r.Round, r.Skipped)
	}
	if who, _ := r.SyncerAt(r.RoundMs); who != first.DID.String() {
		t.Fatalf("round 3 starts with %s, want the restored ticket 0", who)
	}
	h.conservation()
}

// TestHaltDoesNotCostASubmission (issue 22 finding 11): a submission sent
// inside its fragment's grace window, just before the chain halts for 42 s,
// lands in the first block after the halt, whose time is past the window.
// It is judged at the previous block's time (Block.ArrivalMs), the last
// moment the chain was live, so it counts; one that lands in any later
// block is after the window and is refused with the reason.
func TestHaltDoesNotCostASubmission(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	const task = "halt"
	startRun(t, h, w, task, 3, 2, []*did.Key{w.t1, w.t2, w.t3}, []*did.Key{w.candA})
	sub := func(k *did.Key, f uint64, tag string) []byte {
		return must(SubmissionTx(ManualChainID, k, task, 0, f, wire.ContentHash([]byte(tag)), 4))
	}
	// K = 2 records at T: fragment 0's 5 s grace window runs to T + 5 s.
	runBlock(t, h, []txCase{{"t1 f0", sub(w.t1, 0, "a"), CodeOK}, {"t2 f0", sub(w.t2, 0, "b"), CodeOK},
		{"t1 f1", sub(w.t1, 1, "c"), CodeOK}, {"t2 f1", sub(w.t2, 1, "d"), CodeOK}})
	kth := h.mrun(task).Fragments[0].KthMs
	// One more block 1 s later, then a 42 s halt: t3's submission, sent
	// before the halt, is in the first block after it.
	h.now = time.UnixMilli(kth).Add(time.Second)
	h.block()
	h.now = h.now.Add(42 * time.Second)
	runBlock(t, h, []txCase{{"t3 f0 sent before the halt", sub(w.t3, 0, "e"), CodeOK}})
	if n := len(h.mrun(task).Fragments[0].Records); n != 3 {
		t.Fatalf("fragment 0 has %d records, want 3", n)
	}
	// The next block's previous block is the one after the halt: t3's
	// fragment-1 submission now is after the window.
	h.now = h.now.Add(time.Second)
	res, _ := h.block(sub(w.t3, 1, "f"))
	if res[0].Code != CodeConflict || !strings.Contains(res[0].Log, "after the grace window") {
		t.Fatalf("a submission after the window: code %d %q", res[0].Code, res[0].Log)
	}
}

// TestHaltLongerThanADeadline (issue 22 item 9, halts): with halt_gap_ms set,
// a block more than that after the previous one moves the running round's
// clock forward by the gap less halt_gap_ms, so a 90 s halt in a round with
// a 60 s deadline closes nothing: a trainer's submission sent after the
// restart still counts, and the deadline then fires once 60 s of live block
// time have passed. Without the parameter the same history closes both
// fragments for lack of quorum at the first block after the halt. Two
// chains replaying the history with the parameter end with the same app
// hash.
func TestHaltLongerThanADeadline(t *testing.T) {
	const task = "long-halt"
	play := func(haltGap int64) (*harness, wire.Hash) {
		t.Helper()
		w := newWorld(t)
		g := w.genesis
		p := *g.Params
		p.HaltGapMs = haltGap
		g.Params = &p
		h := newHarness(t, "")
		h.genesis(g)
		startRun(t, h, w, task, 3, 2, []*did.Key{w.t1, w.t2, w.t3}, []*did.Key{w.candA})
		sub := func(k *did.Key, f uint64, tag string) []byte {
			return must(SubmissionTx(ManualChainID, k, task, 0, f, wire.ContentHash([]byte(tag)), 4))
		}
		runBlock(t, h, []txCase{{"t1 f0", sub(w.t1, 0, "a"), CodeOK}, {"t1 f1", sub(w.t1, 1, "b"), CodeOK}})
		h.now = h.now.Add(90 * time.Second) // the halt
		res, hash := h.block(sub(w.t2, 0, "c"))
		if haltGap == 0 {
			if r := h.mrun(task); r.Round != 1 || res[0].Code == CodeOK || !strings.Contains(res[0].Log, "round") {
				t.Fatalf("without halt_gap_ms, after a 90 s halt: round %d (want round 0 closed for lack of quorum), t2's submission code %d %q",
					r.Round, res[0].Code, res[0].Log)
			}
			return h, hash
		}
		if res[0].Code != CodeOK {
			t.Fatalf("after the halt, t2's submission: code %d %s", res[0].Code, res[0].Log)
		}
		r := h.mrun(task)
		if r.Round != 0 || r.Fragments[0].Closed || r.Fragments[1].Closed || len(r.Fragments[0].Records) != 2 {
			t.Fatalf("after the halt: round %d, fragments closed %v/%v, %d records", r.Round, r.Fragments[0].Closed, r.Fragments[1].Closed, len(r.Fragments[0].Records))
		}
		// Live block time, in steps under halt_gap_ms, up to the deadline:
		// fragment 1 (one record of K=2) closes for lack of quorum then.
		due := r.RoundMs + 60_000
		for h.now.UnixMilli() < due {
			h.now = time.UnixMilli(min(h.now.Add(9*time.Second).UnixMilli(), due))
			if fs := h.mrun(task).Fragments[1]; fs.Closed {
				t.Fatalf("fragment 1 closed at %d, before the live deadline %d", h.now.UnixMilli(), due)
			}
			_, hash = h.block()
		}
		if fs := h.mrun(task).Fragments[1]; !fs.Closed || fs.Commit == nil || fs.Commit.Status != wire.FragNoQuorum {
			t.Fatalf("fragment 1 after 60 s of live block time: closed %v commit %+v", fs.Closed, fs.Commit)
		}
		return h, hash
	}
	play(0)
	_, a := play(10_000)
	_, b := play(10_000)
	if a != b {
		t.Fatalf("two replays with halt_gap_ms: app hashes %s and %s", a, b)
	}
}

// TestHaltGapParam: halt_gap_ms is 0 (off) or within
// machine.MinHaltGapMs..MaxHaltGapMs; anything else is refused at genesis.
func TestHaltGapParam(t *testing.T) {
	for _, c := range []struct {
		v  int64
		ok bool
	}{{0, true}, {machine.MinHaltGapMs, true}, {DefaultHaltGapMs, true}, {machine.MaxHaltGapMs, true},
		{-1, false}, {100, false}, {machine.MaxHaltGapMs + 1, false}} {
		_, err := machine.ParseGenesis([]byte(fmt.Sprintf(`{"accounts":[],"params":{"halt_gap_ms":%d}}`, c.v)))
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "params.halt_gap_ms")) {
			t.Errorf("halt_gap_ms %d: %v (want ok %v)", c.v, err, c.ok)
		}
	}
}
