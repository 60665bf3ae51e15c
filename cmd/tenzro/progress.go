package main

// progress.go: what get-run prints beside the run's counters: the run's
// counters move only when a round is final, so it shows the submissions
// still on their way (machine.RunProgress) and where the round stands.

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// withProgress adds "progress" to the node's RunView JSON, leaving every
// field the node sent as it was.
func withProgress(raw json.RawMessage, p machine.Progress) any {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return raw
	}
	b, err := json.Marshal(p)
	if err != nil {
		return raw
	}
	m["progress"] = b
	return m
}

// pendingCell renders one trainer's pending counts.
func pendingCell(pc machine.PendingCounts) string {
	if pc.Pending == 0 {
		return "0"
	}
	if pc.Kept+pc.Rejected == 0 {
		return fmt.Sprintf("%d (recorded)", pc.Pending)
	}
	return fmt.Sprintf("%d (%d kept, %d rejected)", pc.Pending, pc.Kept, pc.Rejected)
}

// printProgress writes the round line: round r of R, fragments committed,
// the grace window and the round deadline, and finality.
func printProgress(w io.Writer, r *wire.RunView, p machine.Progress) {
	if len(r.Fragments) > 0 {
		fmt.Fprintf(w, "fragments %d (%d committed this round, %d submissions recorded this round)\n", len(r.Fragments), p.FragmentsCommitted, p.Records)
	}
	if r.Status != wire.StatusRunning {
		return
	}
	line := fmt.Sprintf("progress  round %d of %d (0-based), %d of %d fragments committed; a fragment commits at K=%d records once every active trainer sent or %s after the K-th",
		p.Round, p.MaxRounds, p.FragmentsCommitted, p.Fragments, p.Quorum, time.Duration(p.GraceWindowMs)*time.Millisecond)
	if p.RoundDeadlineMs > 0 {
		left := time.Until(time.UnixMilli(p.RoundDeadlineMs)).Round(time.Second)
		if left > 0 {
			line += fmt.Sprintf("; round deadline in %s", left)
		} else {
			line += fmt.Sprintf("; round deadline passed %s ago (the next syncer in succession may commit)", -left)
		}
	}
	fmt.Fprintln(w, line)
	if p.WindowBlocks > 0 {
		fmt.Fprintf(w, "final     %d of %d committed rounds final (challenge window %d blocks)%s\n", p.FinalRounds, p.CommittedRounds, p.WindowBlocks, machine.FinalAtText(p.PendingFinal))
	}
}
