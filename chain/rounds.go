package chain

import (
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
)

// TxCommitRound is a round commit sent by the run's syncer.
const TxCommitRound = "tenzro_training_commitRound"

// CommitRound carries one round's commit (wire.RoundCommit, the transcript
// entry the receipt will hold). Signed by SyncerDID with PROTOCOL §3's
// request preimage, method fields Str(task_id) ‖ U64(round) ‖
// Hash(round commit hash).
type CommitRound struct {
	TaskID    string           `json:"task_id"`
	SyncerDID string           `json:"syncer_did"`
	Commit    wire.RoundCommit `json:"commit"`
	wire.Signed
}

// Preimage is the signing preimage given the commit's hash.
func (p *CommitRound) Preimage(commitHash wire.Hash) []byte {
	return wire.RequestPreimage(TxCommitRound, p.SyncerDID, p.Nonce, func(c *wire.Canon) {
		c.Str(p.TaskID).U64(p.Commit.Round).Hash(commitHash)
	})
}

func keyCommit(task string, round uint64) string { return fmt.Sprintf("commit/%s/%020d", task, round) }

// syncerOrder is the run's candidates in ticket order (the winner first):
// the succession when a syncer misses its round deadline.
func syncerOrder(r *runRecord) ([]string, error) {
	es := make([]election.Entrant, len(r.Election.Candidates))
	for i, c := range r.Election.Candidates {
		stake, err := election.ParseStake(c.Stake)
		if err != nil {
			return nil, fmt.Errorf("stored election of %s: %w", r.TaskID, err)
		}
		es[i] = election.Entrant{DID: c.DID, Stake: stake, Proof: c.Proof}
	}
	_, ts, err := election.Elect(r.Election.Alpha, es)
	if err != nil {
		return nil, fmt.Errorf("stored election of %s: %w", r.TaskID, err)
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Less(ts[j]) })
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.DID
	}
	return out, nil
}

// currentSyncer is who may commit the run's current round at block time
// nowMs: the k-th ticket, k = the number of whole round deadlines elapsed
// since the round started (block time), capped at the last candidate.
func currentSyncer(r *runRecord, nowMs int64) (string, int, error) {
	if r.Election == nil {
		return "", 0, errf(CodeConflict, "run %s has no elected syncer on chain (no candidate sent an election proof before it started)", r.TaskID)
	}
	order, err := syncerOrder(r)
	if err != nil {
		return "", 0, err
	}
	k := 0
	if el := nowMs - r.RoundStartMs; el > 0 {
		q := el / r.spec.RoundDeadline()
		if q >= int64(len(order)) {
			q = int64(len(order)) - 1
		}
		k = int(q)
	}
	return order[k], k, nil
}

func (x *exec) applyCommitRound(p *CommitRound) (any, error) {
	if err := parseDID("syncer_did", p.SyncerDID); err != nil {
		return nil, err
	}
	r, err := x.loadRun(p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusRunning {
		return nil, errf(CodeConflict, "run %s is %s, not running", r.TaskID, r.Status)
	}
	c := &p.Commit
	if c.TaskID != r.TaskID {
		return nil, errf(CodeInvalid, "commit.task_id %q is not %q", c.TaskID, r.TaskID)
	}
	if c.Round != r.Round {
		return nil, errf(CodeConflict, "commit is for round %d, the run's current round is %d", c.Round, r.Round)
	}
	if r.Round >= uint64(r.spec.MaxRounds) {
		return nil, errf(CodeConflict, "run %s has committed all its %d rounds: seal it", r.TaskID, r.spec.MaxRounds)
	}
	want, k, err := currentSyncer(r, x.timeMs)
	if err != nil {
		return nil, err
	}
	if p.SyncerDID != want {
		return nil, errf(CodeUnauthorized, "round %d of %s may be committed only by %s (ticket %d at block time %d ms), not %s",
			r.Round, r.TaskID, want, k, x.timeMs, p.SyncerDID)
	}
	if f := r.spec.Architecture.FragmentCount; len(c.Fragments) != f {
		return nil, errf(CodeInvalid, "commit has %d fragments, the run has %d", len(c.Fragments), f)
	}
	for i, fc := range c.Fragments {
		if fc.Fragment != i {
			return nil, errf(CodeInvalid, "commit fragment %d is numbered %d", i, fc.Fragment)
		}
		for j, in := range fc.Inputs {
			if j > 0 && fc.Inputs[j-1].TrainerDID >= in.TrainerDID {
				return nil, errf(CodeInvalid, "fragment %d: inputs are not in strictly increasing DID order", i)
			}
			var rec SubmissionRecord
			ok, err := x.getJSON(keySub(r.TaskID, c.Round, uint64(i), in.TrainerDID), &rec)
			if err != nil {
				return nil, err
			}
			if !ok || rec.PayloadHash != in.PayloadHash {
				return nil, errf(CodeInvalid, "fragment %d: input %s %s has no submission record on chain", i, in.TrainerDID, in.PayloadHash)
			}
		}
	}
	h, err := syncer.RoundCommitHash(c)
	if err != nil {
		return nil, errf(CodeInvalid, "commit: %v", err)
	}
	if err := x.checkSigned(p.SyncerDID, p.Nonce, p.Signature, p.Preimage(h)); err != nil {
		return nil, err
	}
	missed, evicted, err := x.closeRound(r, c.Round)
	if err != nil {
		return nil, err
	}
	if !equalStrs(c.Missed, missed) || !equalStrs(c.Evicted, evicted) {
		return nil, errf(CodeInvalid, "commit lists missed %v and evicted %v; the chain's submission records give missed %v and evicted %v",
			c.Missed, c.Evicted, missed, evicted)
	}
	if !equalStrs(c.Joined, r.Joined) || !equalStrs(c.Left, r.Left) {
		return nil, errf(CodeInvalid, "commit lists joined %v and left %v; the chain recorded joined %v and left %v this round", c.Joined, c.Left, r.Joined, r.Left)
	}
	if len(c.Equivocations) != len(r.EquivDigests) {
		return nil, errf(CodeInvalid, "commit lists %d equivocations; the chain recorded %d this round", len(c.Equivocations), len(r.EquivDigests))
	}
	for i := range c.Equivocations {
		if c.Equivocations[i] != r.EquivDigests[i] {
			return nil, errf(CodeInvalid, "commit equivocation %d is %s; the chain recorded %s", i, c.Equivocations[i], r.EquivDigests[i])
		}
	}
	// Next round: joiners become active and are recorded in its commit.
	r.Joined, r.Left, r.EquivDigests = []string{}, []string{}, []wire.Hash{}
	for i := range r.Trainers {
		if r.Trainers[i].Status == wire.TrainerJoining {
			r.Trainers[i].Status = trainerActive
			r.Joined = append(r.Joined, r.Trainers[i].DID)
		}
	}
	if err := x.putJSON(keyCommit(r.TaskID, c.Round), c); err != nil {
		return nil, err
	}
	r.RoundRoots = append(r.RoundRoots, h)
	r.RoundSyncers = append(r.RoundSyncers, p.SyncerDID)
	r.Round++
	r.RoundStartMs = x.timeMs
	if err := x.putJSON(keyRun(r.TaskID), r); err != nil {
		return nil, err
	}
	return CommitResult{TaskID: r.TaskID, Round: c.Round, CommitHash: h, SyncerDID: p.SyncerDID, Height: x.height}, nil
}

// CommitResult answers a round commit.
type CommitResult struct {
	TaskID     string    `json:"task_id"`
	Round      uint64    `json:"round"`
	CommitHash wire.Hash `json:"commit_hash"`
	SyncerDID  string    `json:"syncer_did"`
	Height     int64     `json:"height"`
}

// settle pays the receipt's reward lines from the run's escrow (bounded by
// it: the chain cannot recompute the weights without the payloads, so it
// takes the sealing syncer's lines, each for an enrolled trainer), refunds
// every stake account to its trainer, and returns the rest of the escrow to
// the sponsor.
func (x *exec) settle(r *runRecord, rc *wire.Receipt) error {
	escrow, err := x.balance(acctEscrow(r.TaskID))
	if err != nil {
		return err
	}
	total := new(big.Int)
	for _, p := range rc.Rewards {
		if r.trainer(p.DID) == nil {
			return errf(CodeInvalid, "reward_distribution pays %s, who is not a trainer of %s", p.DID, r.TaskID)
		}
		v, _ := wire.ParseAmount(p.Reward)
		total.Add(total, v)
	}
	if total.Cmp(escrow) > 0 {
		return errf(CodeInvalid, "reward_distribution pays %s attoTNZO, the escrow holds %s", total, escrow)
	}
	for _, p := range rc.Rewards {
		v, _ := wire.ParseAmount(p.Reward)
		if err := x.transfer(acctEscrow(r.TaskID), acctDID(p.DID), v, "reward"); err != nil {
			return err
		}
	}
	for _, t := range r.Trainers {
		left, err := x.balance(acctStake(r.TaskID, t.DID))
		if err != nil {
			return err
		}
		if err := x.transfer(acctStake(r.TaskID, t.DID), acctDID(t.DID), left, "stake refund"); err != nil {
			return err
		}
	}
	rest, err := x.balance(acctEscrow(r.TaskID))
	if err != nil {
		return err
	}
	return x.transfer(acctEscrow(r.TaskID), acctDID(r.Sponsor), rest, "sponsor refund")
}

func equalStrs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// closeRound applies PROTOCOL §6's missed-round rule from the chain's own
// submission records, in DID order (the syncer's rule): an active trainer
// with no record in the round misses it and is slashed missed_round_bps of
// its stake; after max_missed_rounds consecutive misses it is evicted,
// slashed eviction_bps, and the rest of its stake is refunded. Slashes go to
// the run's escrow. It returns the missed and evicted DIDs.
func (x *exec) closeRound(r *runRecord, round uint64) ([]string, []string, error) {
	prefix := fmt.Sprintf("sub/%s/%020d/", r.TaskID, round)
	submitted := map[string]bool{}
	err := x.o.scan(x.ctx, prefix, func(k string, _ []byte) error {
		if _, d, ok := strings.Cut(k[len(prefix):], "/"); ok {
			submitted[d] = true
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	sl := r.spec.Slash()
	missed, evicted := []string{}, []string{}
	for i := range r.Trainers {
		t := &r.Trainers[i]
		if t.Status != trainerActive {
			continue
		}
		if submitted[t.DID] {
			t.ConsecMissed = 0
			continue
		}
		t.MissedRounds++
		t.ConsecMissed++
		missed = append(missed, t.DID)
		if err := x.slash(r, t, sl.MissedRoundBps, "missed round"); err != nil {
			return nil, nil, err
		}
		if t.ConsecMissed >= uint64(sl.MaxMissedRounds) {
			if err := x.slash(r, t, sl.EvictionBps, "eviction"); err != nil {
				return nil, nil, err
			}
			left, err := x.balance(acctStake(r.TaskID, t.DID))
			if err != nil {
				return nil, nil, err
			}
			if err := x.transfer(acctStake(r.TaskID, t.DID), acctDID(t.DID), left, "stake refund at eviction"); err != nil {
				return nil, nil, err
			}
			t.Status = wire.TrainerEvicted
			evicted = append(evicted, t.DID)
		}
	}
	return missed, evicted, nil
}

// slash moves bps of t's enrolled stake, capped at what is left, from its
// stake account into the run's escrow.
func (x *exec) slash(r *runRecord, t *trainerRecord, bps int, why string) error {
	if bps <= 0 {
		return nil
	}
	stake, _ := wire.ParseAmount(t.Stake)
	amt := new(big.Int).Div(new(big.Int).Mul(stake, big.NewInt(int64(bps))), big.NewInt(10000))
	left, err := x.balance(acctStake(r.TaskID, t.DID))
	if err != nil {
		return err
	}
	if amt.Cmp(left) > 0 {
		amt = left
	}
	if err := x.transfer(acctStake(r.TaskID, t.DID), acctEscrow(r.TaskID), amt, "slash: "+why); err != nil {
		return err
	}
	slashed, _ := wire.ParseAmount(t.Slashed)
	t.Slashed = new(big.Int).Add(slashed, amt).String()
	return nil
}
