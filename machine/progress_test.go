package machine

import (
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
)

// RunProgress on a run without a challenge window: every committed round is
// final at once, so only the open round's records are pending.
func TestRunProgressWithoutWindow(t *testing.T) {
	const a, b = "did:tenzro:machine:zA", "did:tenzro:machine:zB"
	v := &wire.RunView{TaskID: "t", Status: wire.StatusRunning, Round: 1,
		TrainerMetrics: map[string]wire.TrainerMetrics{a: {Submitted: 3, Accepted: 2}, b: {Submitted: 2, Accepted: 1}},
		Fragments:      []wire.FragmentView{{Accepted: 1}, {Accepted: 0}}}
	tr := []wire.RoundCommit{{Round: 0, Fragments: []wire.FragmentCommit{
		{Fragment: 0, Inputs: []wire.CommitInput{{TrainerDID: a}, {TrainerDID: b}}},
		{Fragment: 1, Inputs: []wire.CommitInput{{TrainerDID: a}, {TrainerDID: b, Rejected: "not finite"}}},
	}}}
	p := RunProgress(v, tr)
	if p.FinalRounds != 1 || p.CommittedRounds != 1 || p.Records != 1 || p.FragmentsCommitted != 0 {
		t.Fatalf("progress %+v", p)
	}
	if p.Trainers[a] != (PendingCounts{Pending: 1}) {
		t.Fatalf("a: %+v", p.Trainers[a])
	}
	if _, ok := p.Trainers[b]; ok {
		t.Fatalf("b has nothing pending: %+v", p.Trainers[b])
	}
	if strings.Contains(p.FinalWhen, "blocks after") || !strings.Contains(p.FinalWhen, "round 1") {
		t.Fatalf("final_when %q", p.FinalWhen)
	}
	if d := p.PendingDIDs(); len(d) != 1 || d[0] != a {
		t.Fatalf("pending DIDs %v", d)
	}
	v.Status = wire.StatusSealed
	if p := RunProgress(v, tr); !strings.Contains(p.FinalWhen, "sealed") || p.RoundDeadlineMs != 0 {
		t.Fatalf("sealed: %+v", p)
	}
}

// On a run with a challenge window, Progress names the height at which each
// committed round that is not final yet becomes final (issue 27 item 4).
func TestRunProgressSaysWhenPendingRoundsAreFinal(t *testing.T) {
	const a = "did:tenzro:machine:zA"
	v := &wire.RunView{TaskID: "t", Status: wire.StatusRunning, Round: 3, ChallengeWindowBlocks: 15, FinalRounds: 1,
		PendingFinal:   []wire.RoundFinality{{Round: 1, FinalAt: 120}, {Round: 2, FinalAt: 135}},
		TrainerMetrics: map[string]wire.TrainerMetrics{a: {Submitted: 3, Accepted: 1}}}
	tr := []wire.RoundCommit{
		{Round: 0, Fragments: []wire.FragmentCommit{{Inputs: []wire.CommitInput{{TrainerDID: a}}}}},
		{Round: 1, Fragments: []wire.FragmentCommit{{Inputs: []wire.CommitInput{{TrainerDID: a}}}}},
		{Round: 2, Fragments: []wire.FragmentCommit{{Inputs: []wire.CommitInput{{TrainerDID: a}}}}},
	}
	p := RunProgress(v, tr)
	if len(p.PendingFinal) != 2 || p.PendingFinal[1] != (wire.RoundFinality{Round: 2, FinalAt: 135}) {
		t.Fatalf("pending_final %+v", p.PendingFinal)
	}
	if !strings.Contains(p.FinalWhen, "1 of 3 committed rounds are final; round 1 final at height 120, round 2 at 135") {
		t.Fatalf("final_when %q", p.FinalWhen)
	}
	v.Status, v.PendingFinal = wire.StatusSealed, nil
	if p := RunProgress(v, tr); p.PendingFinal != nil || strings.Contains(p.FinalWhen, "height") {
		t.Fatalf("sealed: %+v", p)
	}
	for _, c := range []struct {
		pf   []wire.RoundFinality
		want string
	}{
		{nil, ""},
		{[]wire.RoundFinality{{Round: 4, FinalAt: 9}}, "; round 4 final at height 9"},
		{[]wire.RoundFinality{{Round: 0, FinalAt: 10}, {Round: 1, FinalAt: 11}, {Round: 2, FinalAt: 12}, {Round: 3, FinalAt: 13}, {Round: 4, FinalAt: 14}}, "; round 0 final at height 10, round 1 at 11, round 2 at 12 and 2 more"},
	} {
		if got := FinalAtText(c.pf); got != c.want {
			t.Errorf("FinalAtText(%v) = %q, want %q", c.pf, got, c.want)
		}
	}
}
