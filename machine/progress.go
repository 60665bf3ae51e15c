package machine

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tenzro/train/wire"
)

// Progress is a read-only reading of a run for people (get-run, the
// dashboard): the run's counters (TrainerMetrics: accepted, current_reward)
// move only when a round is final, at its commit for a run without a
// challenge window and ChallengeWindowBlocks blocks after it otherwise
// (settleInputs, finalizeRound). A trainer whose log already says
// "accepted" for its submissions sees 0 until then; Progress says how many
// are still on their way. Nothing here is consensus state: it is derived
// from a RunView and the transcript, both public.
type Progress struct {
	// Round is the open round (0-based), of MaxRounds.
	Round     uint64 `json:"round"`
	MaxRounds int    `json:"max_rounds"`
	// CommittedRounds are the closed rounds (transcript length); FinalRounds
	// of them are final.
	CommittedRounds uint64 `json:"committed_rounds"`
	FinalRounds     uint64 `json:"final_rounds"`
	// WindowBlocks is the run's challenge window (0: final at commit).
	WindowBlocks int64 `json:"challenge_window_blocks"`
	// Fragments committed in the open round, of Fragments; Records is the
	// submissions recorded in the open round across fragments.
	FragmentsCommitted int `json:"fragments_committed"`
	Fragments          int `json:"fragments"`
	Records            int `json:"records_this_round"`
	// Quorum is K; GraceWindowMs the wait after a fragment's K-th record;
	// RoundDeadlineMs (Unix ms) when the open round's deadline passes (the
	// next syncer in succession may commit).
	Quorum          int   `json:"quorum"`
	GraceWindowMs   int64 `json:"grace_window_ms"`
	RoundDeadlineMs int64 `json:"round_deadline_ms,omitempty"`
	// Trainers: per DID, submissions whose outcome is not final yet.
	Trainers map[string]PendingCounts `json:"trainers"`
	// PendingFinal: the committed rounds not final yet, each with the first
	// height at which it is final (no challenge open on it).
	PendingFinal []wire.RoundFinality `json:"pending_final,omitempty"`
	// FinalWhen says in words when the pending ones become final.
	FinalWhen string `json:"final_when"`
}

// PendingCounts is one trainer's submissions not yet counted in
// TrainerMetrics.Accepted.
type PendingCounts struct {
	// Pending: recorded (this round) or committed in a round that is not
	// final yet, kept or not.
	Pending uint64 `json:"pending"`
	// Kept: of those, committed and kept by the commit (each becomes
	// accepted, and earns payout weight, when its round is final).
	Kept uint64 `json:"kept"`
	// Rejected: of those, committed and refused by the commit (never paid).
	Rejected uint64 `json:"rejected"`
}

// RunProgress reads v and its transcript tr. Pending counts are
// submitted − inputs of final rounds (every record is an input of its
// fragment's commit, checkCommit); a proven equivocation also counts as
// submitted and stays in Pending.
func RunProgress(v *wire.RunView, tr []wire.RoundCommit) Progress {
	p := Progress{Round: v.Round, CommittedRounds: uint64(len(tr)), FinalRounds: v.FinalRounds,
		WindowBlocks: v.ChallengeWindowBlocks, Fragments: len(v.Fragments), Trainers: map[string]PendingCounts{}}
	spec, _, err := wire.ParseSpec(v.TaskSpec)
	if err == nil {
		p.MaxRounds, p.Quorum, p.GraceWindowMs = spec.MaxRounds, spec.Quorum, spec.GraceWindowMs
	}
	if v.ChallengeWindowBlocks == 0 || v.Status == wire.StatusSealed {
		p.FinalRounds = p.CommittedRounds
	}
	p.FinalRounds = min(p.FinalRounds, p.CommittedRounds)
	for _, f := range v.Fragments {
		if f.Committed {
			p.FragmentsCommitted++
		}
		p.Records += f.Accepted
	}
	if v.Status == wire.StatusRunning && v.RoundStartedMs > 0 && spec != nil {
		p.RoundDeadlineMs = v.RoundStartedMs + spec.RoundDeadline()
	}
	finalInputs := map[string]uint64{}
	for _, rc := range tr {
		isFinal := rc.Round < p.FinalRounds
		for _, fc := range rc.Fragments {
			for _, in := range fc.Inputs {
				if isFinal {
					finalInputs[in.TrainerDID]++
					continue
				}
				pc := p.Trainers[in.TrainerDID]
				if in.Rejected == "" {
					pc.Kept++
				} else {
					pc.Rejected++
				}
				p.Trainers[in.TrainerDID] = pc
			}
		}
	}
	for d, m := range v.TrainerMetrics {
		pc := p.Trainers[d]
		if m.Submitted > finalInputs[d] {
			pc.Pending = m.Submitted - finalInputs[d]
		}
		pc.Pending = max(pc.Pending, pc.Kept+pc.Rejected)
		p.Trainers[d] = pc
	}
	for d, pc := range p.Trainers {
		if pc == (PendingCounts{}) {
			delete(p.Trainers, d)
		}
	}
	if v.Status == wire.StatusRunning {
		p.PendingFinal = v.PendingFinal
	}
	p.FinalWhen = finalWhen(v, p)
	return p
}

func finalWhen(v *wire.RunView, p Progress) string {
	switch v.Status {
	case wire.StatusSealed:
		return "sealed: every round is final; counters and rewards are settled"
	case wire.StatusCancelled:
		return "cancelled"
	case wire.StatusAwaiting:
		return "awaiting enrolment: nothing recorded yet"
	}
	grace := time.Duration(p.GraceWindowMs) * time.Millisecond
	s := fmt.Sprintf("a submission of round %d counts once its fragment commits (K=%d records, then all active trainers or the %s grace window)", p.Round, p.Quorum, grace)
	if p.WindowBlocks > 0 {
		s += fmt.Sprintf(" and its round is final, %d blocks after the commit with no open challenge; %d of %d committed rounds are final", p.WindowBlocks, p.FinalRounds, p.CommittedRounds)
		s += FinalAtText(p.PendingFinal)
	}
	return s + "; accepted and reward count final rounds only"
}

// FinalAtText names the height at which each pending round is final
// ("; round 3 final at height 120, round 4 at 135"), or "" when none is
// pending. The first three rounds are named, then how many more.
func FinalAtText(pf []wire.RoundFinality) string {
	var b strings.Builder
	for i, f := range pf {
		switch {
		case i == 3:
			fmt.Fprintf(&b, " and %d more", len(pf)-i)
			return b.String()
		case i == 0:
			fmt.Fprintf(&b, "; round %d final at height %d", f.Round, f.FinalAt)
		default:
			fmt.Fprintf(&b, ", round %d at %d", f.Round, f.FinalAt)
		}
	}
	return b.String()
}

// PendingDIDs lists the DIDs with pending counts, sorted.
func (p Progress) PendingDIDs() []string {
	out := make([]string, 0, len(p.Trainers))
	for d := range p.Trainers {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}
