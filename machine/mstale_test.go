package machine

import (
	"context"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

func u64p(v uint64) *uint64 { return &v }

// TestCheckStaleVerdicts: what the chain checks of a commit's stale
// verdicts (the cross-round self-copy rule, copies.md §6) without the
// payloads: a rejected input, no copy_of beside it, a round among the
// StaleLookbackRounds before, in which the trainer has a record for the
// same fragment.
func TestCheckStaleVerdicts(t *testing.T) {
	x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
	// A has records in rounds 0..3 of fragment 0; B only in round 3 (joined
	// late) and in round 2 of fragment 1.
	for round := uint64(0); round < 4; round++ {
		if err := x.putJSON(KSTranscript, RecordKey("t", round, 0, "A"), Record{SubmissionTx: wire.SubmissionTx{TrainerDID: "A"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range [][]byte{RecordKey("t", 3, 0, "B"), RecordKey("t", 2, 1, "B")} {
		if err := x.putJSON(KSTranscript, k, Record{SubmissionTx: wire.SubmissionTx{TrainerDID: "B"}}); err != nil {
			t.Fatal(err)
		}
	}
	runStaleCases(t, x, []staleCase{
		{"none", 3, 0, []wire.CommitInput{{TrainerDID: "A"}, {TrainerDID: "B"}}, ""},
		{"round r-1", 3, 0, []wire.CommitInput{stale("A", 2), {TrainerDID: "B"}}, ""},
		{"round r-2", 3, 0, []wire.CommitInput{stale("A", 1)}, ""},
		{"round 0 from round 1", 1, 0, []wire.CommitInput{stale("A", 0)}, ""},
		{"beyond the lookback", 3, 0, []wire.CommitInput{stale("A", 0)}, "compares rounds 1..2 only"},
		{"its own round", 3, 0, []wire.CommitInput{stale("A", 3)}, "compares rounds 1..2 only"},
		{"a later round", 1, 0, []wire.CommitInput{stale("A", 2)}, "compares rounds 0..0 only"},
		{"round 0 has nothing before", 0, 0, []wire.CommitInput{stale("A", 0)}, "compares rounds 0..-1 only"},
		{"no record in that round", 3, 0, []wire.CommitInput{stale("B", 2)}, "has no record for fragment 0"},
		{"kept", 3, 0, []wire.CommitInput{{TrainerDID: "A", StaleOfRound: u64p(2)}}, "but not rejected"},
		{"copy and replay", 3, 0, []wire.CommitInput{{TrainerDID: "A", StaleOfRound: u64p(2), CopyOf: "B", Rejected: "copy"}, {TrainerDID: "B"}}, "both a copy of B and a replay"},
	})
}

// staleCase is a commit of fragment 0 of run "t" at round, under
// copies.sketch_dim dim (0: off), and the error checkStaleVerdicts must
// give it (a refusal naming err; "": none).
type staleCase struct {
	name   string
	round  uint64
	dim    int
	inputs []wire.CommitInput
	err    string
}

// stale is trainer d's input named a replay of its round-q input.
func stale(d string, q uint64) wire.CommitInput {
	return wire.CommitInput{TrainerDID: d, StaleOfRound: u64p(q), Rejected: "replay"}
}

func runStaleCases(t *testing.T, x *mtx, cases []staleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, x.checkStaleVerdicts("t", tc.round, tc.dim, &wire.FragmentCommit{Fragment: 0, Inputs: tc.inputs}), tc.err)
		})
	}
}

// wantInvalid fails unless err is nil (want "") or a KindInvalid refusal
// that says want.
func wantInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) || KindOf(err) != KindInvalid {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestSettleStale: a replay earns nothing and forfeits the fragment's N (the
// original's pay): a trainer that trained once and replays it afterwards
// ends with paid weight 0; one replay among honest rounds costs that round
// and the original's.
func TestSettleStale(t *testing.T) {
	x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
	r := scoredRun(10000)
	r.Scorer = nil
	for round := uint64(0); round < 4; round++ {
		var a, b wire.CommitInput
		a, b = wire.CommitInput{TrainerDID: "A"}, wire.CommitInput{TrainerDID: "B"}
		if round > 0 { // A replays its round-0 input every round after
			a = wire.CommitInput{TrainerDID: "A", StaleOfRound: u64p(round - 1), Rejected: "replay"}
		}
		if round == 3 { // B replays once, in the last round
			b = wire.CommitInput{TrainerDID: "B", StaleOfRound: u64p(1), Rejected: "replay"}
		}
		fc := &wire.FragmentCommit{Status: wire.FragAggregated, Inputs: []wire.CommitInput{a, b, {TrainerDID: "C"}}}
		if err := x.settleInputs(r, round, fc); err != nil {
			t.Fatal(err)
		}
	}
	for d, want := range map[string]int64{"A": 0, "B": 200, "C": 400} {
		if got := r.Trainer(d).PaidWeight().Int64(); got != want {
			t.Errorf("%s: paid weight %d (weight %q, forfeit %q), want %d", d, got, r.Trainer(d).Weight, r.Trainer(d).Forfeit, want)
		}
	}
	if r.Trainer("A").Accepted != 1 || r.Trainer("B").Accepted != 3 {
		t.Fatalf("accepted: A %d, B %d", r.Trainer("A").Accepted, r.Trainer("B").Accepted)
	}
}

// TestCheckStaleVerdictsBySketch: with copies.sketch_dim set (copies.md
// §7), a stale verdict may name any round older than the exact lookback
// whose commit gave the trainer's input to the fragment a sketch; without
// it, such a verdict is refused as before.
func TestCheckStaleVerdictsBySketch(t *testing.T) {
	x := NewMachine(MachineConfig{}).begin(context.Background(), emptyKV{}, Block{Height: 10})
	sk := []byte{0, 1, 0, 2}
	// Round 0: A's input to fragment 0 has a sketch, B's has none; round 1:
	// only fragment 1 has A's sketch.
	rc0 := wire.RoundCommit{TaskID: "t", Round: 0, Fragments: []wire.FragmentCommit{
		{Fragment: 0, Inputs: []wire.CommitInput{{TrainerDID: "A", Sketch: sk}, {TrainerDID: "B"}}}}}
	rc1 := wire.RoundCommit{TaskID: "t", Round: 1, Fragments: []wire.FragmentCommit{
		{Fragment: 0, Inputs: []wire.CommitInput{{TrainerDID: "A"}}}, {Fragment: 1, Inputs: []wire.CommitInput{{TrainerDID: "A", Sketch: sk}}}}}
	for q, rc := range []wire.RoundCommit{rc0, rc1} {
		if err := x.putJSON(KSTranscript, commitKey("t", uint64(q)), rc); err != nil {
			t.Fatal(err)
		}
	}
	runStaleCases(t, x, []staleCase{
		{"round r-3 by its sketch", 3, 16, []wire.CommitInput{stale("A", 0)}, ""},
		{"round r-4 by its sketch", 4, 16, []wire.CommitInput{stale("A", 0)}, ""},
		{"sketch off", 3, 0, []wire.CommitInput{stale("A", 0)}, "compares rounds 1..2 only"},
		{"no sketch in that round", 3, 16, []wire.CommitInput{stale("B", 0)}, "has no sketch"},
		{"the sketch of another fragment", 4, 16, []wire.CommitInput{stale("A", 1)}, "has no sketch"},
		{"round not committed", 9, 16, []wire.CommitInput{stale("A", 5)}, "has no sketch"},
	})
}

// TestCheckSketches: the form of a commit's sketches against the spec.
func TestCheckSketches(t *testing.T) {
	dim := 16
	on := &wire.TaskSpec{Copies: &wire.CopyRule{SketchDim: &dim}}
	off := &wire.TaskSpec{}
	good := make([]byte, 2*dim)
	for _, tc := range []struct {
		name   string
		spec   *wire.TaskSpec
		inputs []wire.CommitInput
		err    string
	}{
		{"kept inputs with sketches", on, []wire.CommitInput{{TrainerDID: "A", Sketch: good}, {TrainerDID: "B", Rejected: "norm"}}, ""},
		{"no sketch at all", off, []wire.CommitInput{{TrainerDID: "A"}}, ""},
		{"sketch off", off, []wire.CommitInput{{TrainerDID: "A", Sketch: good}}, "no copies.sketch_dim"},
		{"short", on, []wire.CommitInput{{TrainerDID: "A", Sketch: good[:30]}}, "sketch of 30 bytes, want 32"},
		{"empty", on, []wire.CommitInput{{TrainerDID: "A", Sketch: []byte{}}}, "sketch of 0 bytes"},
		{"on a copy", on, []wire.CommitInput{{TrainerDID: "A", Sketch: good, CopyOf: "B", Rejected: "copy"}}, "a copy or a replay"},
		{"on a replay", on, []wire.CommitInput{{TrainerDID: "A", Sketch: good, StaleOfRound: u64p(0), Rejected: "replay"}}, "a copy or a replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, checkSketches(tc.spec, &wire.FragmentCommit{Inputs: tc.inputs}), tc.err)
		})
	}
}
