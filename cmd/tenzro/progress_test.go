package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Issue 27 item 4: mid-run, get-run showed ACCEPTED 0 and REWARD 0 while the
// trainer's log said accepted 2, because the counters move only when a
// round is final. It now shows, beside the final counters, what is still
// pending (recorded, or committed and not final) and when it becomes final.
func TestGetRunShowsPendingBesideFinal(t *testing.T) {
	e := newEnv(t)
	const a, b = "did:tenzro:machine:zA", "did:tenzro:machine:zB"
	e.fake.run = &wire.RunView{TaskID: "mid", TaskSpec: json.RawMessage(specJSON("mid", "did:tenzro:human:zS", 2)), Status: wire.StatusRunning,
		Round: 2, RoundStartedMs: time.Now().UnixMilli(), ChallengeWindowBlocks: 3, FinalRounds: 1,
		PendingFinal: []wire.RoundFinality{{Round: 1, FinalAt: 57}},
		Trainers:     []wire.TrainerView{{DID: a, Status: wire.TrainerActive, Stake: "10"}, {DID: b, Status: wire.TrainerActive, Stake: "10"}},
		TrainerMetrics: map[string]wire.TrainerMetrics{
			a: {Submitted: 3, Accepted: 1, CurrentReward: "500"},
			b: {Submitted: 2, Accepted: 1, CurrentReward: "500"},
		},
		Fragments: []wire.FragmentView{{Index: 0, Accepted: 1}, {Index: 1}},
	}
	e.fake.transcript = []wire.RoundCommit{
		{Round: 0, Fragments: []wire.FragmentCommit{{Fragment: 0, Inputs: []wire.CommitInput{{TrainerDID: a}, {TrainerDID: b}}}}},
		{Round: 1, Fragments: []wire.FragmentCommit{{Fragment: 1, Inputs: []wire.CommitInput{{TrainerDID: a}, {TrainerDID: b, Rejected: "not finite"}}}}},
	}
	code, out, errOut := e.run("train", "get-run", "--task-id", "mid")
	if code != 0 {
		t.Fatalf("get-run: %d %q", code, errOut)
	}
	for _, want := range []string{
		"ACCEPTED(final)", "PENDING", "REWARD(final)",
		"2 (1 kept, 0 rejected)", // a: round 1 kept + round 2 recorded
		"1 (0 kept, 1 rejected)", // b: round 1 rejected
		"round 2 of 3", "0 of 2 fragments committed", "1 submissions recorded this round",
		"1 of 2 committed rounds final (challenge window 3 blocks); round 1 final at height 57",
		"3 blocks after the commit", "round deadline in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("get-run text lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = e.run("train", "get-run", "--task-id", "mid", "--format", "json")
	if code != 0 {
		t.Fatalf("get-run json: %d %q", code, errOut)
	}
	var got struct {
		TrainerMetrics map[string]wire.TrainerMetrics `json:"trainer_metrics"`
		Progress       machine.Progress               `json:"progress"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if got.TrainerMetrics[a].Accepted != 1 || got.Progress.Trainers[a] != (machine.PendingCounts{Pending: 2, Kept: 1}) ||
		got.Progress.Trainers[b] != (machine.PendingCounts{Pending: 1, Rejected: 1}) || got.Progress.FinalRounds != 1 ||
		got.Progress.CommittedRounds != 2 || got.Progress.FinalWhen == "" || len(got.Progress.PendingFinal) != 1 || got.Progress.PendingFinal[0].FinalAt != 57 {
		t.Fatalf("json progress: %+v", got)
	}

	// The same run once round 1 is final: nothing of it pending any more.
	e.fake.run.FinalRounds, e.fake.run.PendingFinal = 2, nil
	e.fake.run.TrainerMetrics = map[string]wire.TrainerMetrics{a: {Submitted: 3, Accepted: 2}, b: {Submitted: 2, Accepted: 1}}
	code, out, _ = e.run("train", "get-run", "--task-id", "mid", "--format", "json")
	got.Progress = machine.Progress{}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Progress.Trainers[a] != (machine.PendingCounts{Pending: 1}) {
		t.Fatalf("after finality: %+v", got.Progress)
	}
	if _, ok := got.Progress.Trainers[b]; ok {
		t.Fatalf("b has nothing pending once round 1 is final: %+v", got.Progress.Trainers[b])
	}
}

// tenzro train wait's line during the challenge window says which round is
// final next, at which height, and how many blocks are left (issue 27 item 3).
func TestWaitProgressCountsBlocksLeft(t *testing.T) {
	spec := json.RawMessage(`{"trainer_count":1,"max_rounds":2}`)
	r := &wire.RunView{TaskID: "w", TaskSpec: spec, Status: wire.StatusRunning, Round: 1, ChallengeWindowBlocks: 30,
		PendingFinal: []wire.RoundFinality{{Round: 0, FinalAt: 57}}, Fragments: []wire.FragmentView{{Committed: true}, {}}}
	for _, c := range []struct {
		height int64
		want   string
	}{
		{50, "round 0 final at height 57, 7 blocks left (height 50)"},
		{57, "round 0 final at height 57, 0 blocks left (height 57)"},
		{60, "round 0 final at height 57, 0 blocks left (height 60)"},
	} {
		if got := waitProgress(r, c.height); !strings.HasPrefix(got, "w: round 1 of 2: 1 of 2 fragments committed; 0 round(s) final") || !strings.HasSuffix(got, c.want) {
			t.Errorf("height %d: %q, want it to end %q", c.height, got, c.want)
		}
	}
	r.OpenChallenges = 1
	if got := waitProgress(r, 50); !strings.Contains(got, "7 blocks left; 1 open challenge(s): a challenged round is final only once its challenge is decided") {
		t.Errorf("with a challenge open: %q", got)
	}
	// Without a known height, no count.
	if got := waitProgress(r, 0); strings.Contains(got, "blocks left") {
		t.Errorf("height unknown: %q", got)
	}
}
