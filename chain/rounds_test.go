package chain

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

func roundCommit(task string, round uint64, frags [][]wire.CommitInput, model string) wire.RoundCommit {
	c := wire.RoundCommit{TaskID: task, Round: round, Missed: []string{}, Evicted: []string{}, Joined: []string{}, Left: []string{},
		Equivocations: []wire.Hash{}, ModelHash: wire.ContentHash([]byte(model))}
	for i, in := range frags {
		sort.Slice(in, func(a, b int) bool { return in[a].TrainerDID < in[b].TrainerDID })
		c.Fragments = append(c.Fragments, wire.FragmentCommit{Fragment: i, Status: wire.FragAggregated, Inputs: in, Rule: "Mean", RuleParams: json.RawMessage(`{}`)})
	}
	return c
}

// TestRoundsAndFailover: only the elected syncer commits round 0, and only
// with inputs recorded on chain; when it misses round 1's deadline (block
// time) the next ticket commits it; the seal must carry exactly the
// committed rounds and be signed by the last committer; settlement pays the
// reward lines, refunds stakes and returns the rest to the sponsor.
func TestRoundsAndFailover(t *testing.T) {
	w := newWorld(t)
	w.spec = []byte(strings.Replace(string(w.spec), `"grace_window_ms":30000,`, `"grace_window_ms":30000,"round_deadline_ms":2500,`, 1))
	w.spec = []byte(strings.Replace(string(w.spec), `"max_rounds":3,`, `"max_rounds":2,"slashing":{"max_missed_rounds":1,"missed_round_bps":1000,"eviction_bps":2000,"equivocation_bps":5000},`, 1))
	a, b := newHarness(t, ""), newHarness(t, "")
	both := func(cases []txCase) {
		t.Helper()
		if x, y := runBlock(t, a, cases), runBlock(t, b, cases); x != y {
			t.Fatalf("height %d: app hashes differ", a.height)
		}
	}
	a.genesis(w.accounts...)
	b.genesis(w.accounts...)
	for _, blk := range w.history(t)[:3] {
		both(blk)
	}
	win, lose := w.winner(t, a)
	t1, t2 := w.t1.DID.String(), w.t2.DID.String()
	h := func(s string) wire.Hash { return wire.ContentHash([]byte(s)) }
	both([]txCase{
		{"t1 f0", must(SubmissionTx(w.t1, w.task, 0, 0, h("a"), 8)), CodeOK},
		{"t2 f0", must(SubmissionTx(w.t2, w.task, 0, 0, h("b"), 8)), CodeOK},
		{"t1 f1", must(SubmissionTx(w.t1, w.task, 0, 1, h("c"), 8)), CodeOK},
	})
	c0 := roundCommit(w.task, 0, [][]wire.CommitInput{
		{{TrainerDID: t1, PayloadHash: h("a"), Selected: true}, {TrainerDID: t2, PayloadHash: h("b"), Selected: true}},
		{{TrainerDID: t1, PayloadHash: h("c"), Selected: true}}}, "m0")
	forged := roundCommit(w.task, 0, [][]wire.CommitInput{{{TrainerDID: t1, PayloadHash: h("a"), Selected: true}},
		{{TrainerDID: t2, PayloadHash: h("zz"), Selected: true}}}, "m0")
	both([]txCase{
		{"loser commits", must(CommitRoundTx(lose, c0, 10)), CodeUnauthorized},
		{"unrecorded input", must(CommitRoundTx(win, forged, 10)), CodeInvalid},
		{"future round", must(CommitRoundTx(win, roundCommit(w.task, 1, [][]wire.CommitInput{{}, {}}, "x"), 10)), CodeConflict},
		{"winner commits round 0", must(CommitRoundTx(win, c0, 11)), CodeOK},
		{"replayed commit", must(CommitRoundTx(win, c0, 12)), CodeConflict},
	})
	both([]txCase{{"t1 r1 f0", must(SubmissionTx(w.t1, w.task, 1, 0, h("d"), 8)), CodeOK}})
	hiding := roundCommit(w.task, 1, [][]wire.CommitInput{{{TrainerDID: t1, PayloadHash: h("d"), Selected: true}}, {}}, "m1")
	c1 := hiding
	c1.Missed, c1.Evicted = []string{t2}, []string{t2} // max_missed_rounds 1: t2 is evicted
	// Block time moves 1 s per block; the deadline is 2.5 s.
	both([]txCase{{"early failover", must(CommitRoundTx(lose, c1, 20)), CodeUnauthorized}})
	both(nil)
	both([]txCase{
		{"winner after its deadline", must(CommitRoundTx(win, c1, 21)), CodeUnauthorized},
		{"commit hiding a missed round", must(CommitRoundTx(lose, hiding, 22)), CodeInvalid},
		{"next ticket commits round 1", must(CommitRoundTx(lose, c1, 22)), CodeOK},
	})
	c2 := roundCommit(w.task, 2, [][]wire.CommitInput{{}, {}}, "m2")
	both([]txCase{
		{"submission after the last round", must(SubmissionTx(w.t1, w.task, 2, 0, h("e"), 8)), CodeConflict},
		{"commit beyond max_rounds", must(CommitRoundTx(lose, c2, 23)), CodeConflict},
	})
	// The escrow is the pool (1000) plus t2's slash (30): ⌊1030·3/4⌋ and ⌊1030·1/4⌋.
	rewards := []wire.Payout{{DID: t1, Reward: "772", Refund: "0", Slashed: "0", WeightSum: "3"}, {DID: t2, Reward: "257", Refund: "0", Slashed: "30", WeightSum: "1"}}
	sort.Slice(rewards, func(i, j int) bool { return rewards[i].DID < rewards[j].DID })
	greedy := []wire.Payout{{DID: rewards[0].DID, Reward: "1031", Refund: "0", Slashed: "0", WeightSum: "1"}}
	both([]txCase{
		{"seal by the first syncer", must(SealTx(roundsReceipt(t, w.spec, win, []wire.RoundCommit{c0, c1}, rewards))), CodeUnauthorized},
		{"seal missing a round", must(SealTx(roundsReceipt(t, w.spec, lose, []wire.RoundCommit{c0}, rewards))), CodeInvalid},
		{"seal paying more than the escrow", must(SealTx(roundsReceipt(t, w.spec, lose, []wire.RoundCommit{c0, c1}, greedy))), CodeInvalid},
		{"seal", must(SealTx(roundsReceipt(t, w.spec, lose, []wire.RoundCommit{c0, c1}, rewards))), CodeOK},
	})
	for k, want := range map[string]string{w.sponsor.DID.String(): "8901", t1: "1272", t2: "727"} {
		if _, got := a.query(QueryBalance, k); got != want {
			t.Errorf("balance of %s: %s, want %s", k, got, want)
		}
	}
	a.conservation()
	_, raw := a.query(QueryRun, w.task)
	var r runRecord
	_ = json.Unmarshal([]byte(raw), &r)
	if tr := r.trainer(t2); tr == nil || tr.Status != wire.TrainerEvicted || tr.Slashed != "30" || tr.MissedRounds != 1 {
		t.Fatalf("t2 after missing round 1: %+v", tr)
	}
	if r.Status != wire.StatusSealed || len(r.RoundSyncers) != 2 || r.RoundSyncers[0] != win.DID.String() || r.RoundSyncers[1] != lose.DID.String() {
		t.Fatalf("run: %s", raw)
	}
}

// TestJoinLeaveEquivocation: a trainer who leaves in round 0 is refunded at
// once and listed in round 0's commit; one who enrols while the run is under
// way joins at round 1 and is listed there, as is round 1's equivocation;
// a commit that leaves any of them out is refused.
func TestJoinLeaveEquivocation(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.accounts...)
	for _, blk := range w.history(t)[:3] {
		runBlock(t, h, blk)
	}
	win, _ := w.winner(t, h)
	t1, t2, out := w.t1.DID.String(), w.t2.DID.String(), w.outsider.DID.String()
	hs := func(s string) wire.Hash { return wire.ContentHash([]byte(s)) }
	runBlock(t, h, []txCase{
		{"t2 leaves", must(LeaveTx(w.t2, w.task, 2)), CodeOK},
		{"t2 leaves twice", must(LeaveTx(w.t2, w.task, 3)), CodeNotFound},
		{"outsider enrols while running", must(EnrollTx(w.outsider, w.task, "10", 2)), CodeOK},
		{"joiner submits too early", must(SubmissionTx(w.outsider, w.task, 0, 0, hs("o"), 8)), CodeUnauthorized},
		{"t1 f0", must(SubmissionTx(w.t1, w.task, 0, 0, hs("a"), 8)), CodeOK},
	})
	if got := h.balance(w.t2); got != "500" {
		t.Fatalf("t2 after leaving: %s", got)
	}
	in0 := [][]wire.CommitInput{{{TrainerDID: t1, PayloadHash: hs("a"), Selected: true}}, {}}
	c0 := roundCommit(w.task, 0, in0, "m0")
	c0.Left = []string{t2}
	bad := roundCommit(w.task, 0, in0, "m0")
	runBlock(t, h, []txCase{
		{"commit without the leaver", must(CommitRoundTx(win, bad, 10)), CodeInvalid},
		{"commit round 0", must(CommitRoundTx(win, c0, 10)), CodeOK},
	})
	first := must(SubmissionTx(w.t1, w.task, 1, 0, hs("b"), 8))
	second := must(SubmissionTx(w.t1, w.task, 1, 0, hs("c"), 8))
	runBlock(t, h, []txCase{
		{"joiner submits", must(SubmissionTx(w.outsider, w.task, 1, 1, hs("o"), 8)), CodeOK},
		{"t1 r1", first, CodeOK},
		{"t1 equivocates", second, CodeOK},
	})
	sig := func(tx []byte) []byte {
		d, _ := DecodeTx(tx)
		return d.Submission.Signature
	}
	dg := wire.NewCanon(wire.DomainEquivocate).Str(w.task).Str(t1).U64(1).U64(0).Hash(hs("b")).Bytes(sig(first)).Hash(hs("c")).Bytes(sig(second)).Sum()
	in1 := [][]wire.CommitInput{{{TrainerDID: t1, PayloadHash: hs("b"), Selected: true}}, {{TrainerDID: out, PayloadHash: hs("o"), Selected: true}}}
	c1 := roundCommit(w.task, 1, in1, "m1")
	c1.Joined, c1.Equivocations = []string{out}, []wire.Hash{dg}
	noEq := c1
	noEq.Equivocations = []wire.Hash{}
	runBlock(t, h, []txCase{
		{"commit hiding the equivocation", must(CommitRoundTx(win, noEq, 11)), CodeInvalid},
		{"commit round 1", must(CommitRoundTx(win, c1, 11)), CodeOK},
	})
	h.conservation()
}
