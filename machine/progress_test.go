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
