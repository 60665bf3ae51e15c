package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/tenzro/train/wire"
)

// WireView renders a run for getRun: esc is the run's escrow balance and
// blk the block of the state read.
func (r *Run) WireView(esc *big.Int, blk Block) *wire.RunView {
	v := &wire.RunView{TaskID: r.spec.TaskID, TaskSpec: r.Spec, SpecHash: r.SpecHash, Status: r.Status, Round: r.Round,
		RoundStartedMs: r.RoundMs, Syncer: r.Syncer, Election: r.Election, TrainerMetrics: map[string]wire.TrainerMetrics{},
		RoundRoots: r.Roots, HasWeights: r.HasInit, CancelReason: r.CancelReason, Escrow: esc.String()}
	if r.HasInit {
		v.InitWeightsHash = r.InitFile
	}
	if r.Status == wire.StatusRunning {
		v.Syncer, _ = r.SyncerAt(blk.TimeMs)
	}
	if r.Status == wire.StatusAwaiting {
		v.EnrollDeadlineMs = r.PostedMs + r.spec.EnrollWindow()
	}
	v.ChallengeWindowBlocks, v.FinalRounds, v.OpenChallenges = r.Window, r.FinalRounds, len(r.Open)
	for _, p := range r.Pending {
		v.PendingFinal = append(v.PendingFinal, wire.RoundFinality{Round: p.Round, FinalAt: p.FinalAt})
	}
	if v.RoundRoots == nil {
		v.RoundRoots = []wire.Hash{}
	}
	accrued := r.accruedRewards(esc)
	for i, t := range r.Trainers {
		shards := orEmpty(t.Shards)
		v.Trainers = append(v.Trainers, wire.TrainerView{DID: t.DID, Status: t.Status, Stake: t.Stake, Slashed: orDefault(t.Slashed, "0"),
			Shards: shards, ShardAssignments: shards, ShardsFromRound: r.shardsFrom(t), JoinedAt: t.JoinedRound, MissedRun: t.ConsecMissed})
		v.TrainerMetrics[t.DID] = wire.TrainerMetrics{Submitted: t.Submitted, Accepted: t.Accepted, MissedRounds: t.MissedRounds,
			CurrentReward: accrued[i], ScoreFails: t.ScoreFails,
			GainChecks: t.GainChecks, GainSumPPM: t.GainSumPPM}
	}
	if v.Trainers == nil {
		v.Trainers = []wire.TrainerView{}
	}
	hashes := make([]wire.Hash, 0, len(r.Fragments))
	v.Fragments = []wire.FragmentView{}
	for i, f := range r.Fragments {
		v.Fragments = append(v.Fragments, wire.FragmentView{Index: i, Tensors: f.Tensors, Dtype: string(f.Dtype), N: f.N,
			WeightsHash: f.WeightsHash, Accepted: len(f.Records), Committed: f.Closed})
		hashes = append(hashes, f.WeightsHash)
	}
	if r.HasInit {
		v.ModelHash = ModelHash(hashes)
	}
	rule, _ := json.Marshal(r.Rule)
	v.Aggregation = rule
	return v
}

// accruedRewards is each trainer's current_reward: while the run trains,
// the share the seal would pay from the escrowed pool if it sealed now;
// once settled, what was paid. Both use payoutShares, so they never
// disagree.
func (r *Run) accruedRewards(pool *big.Int) []string {
	out := make([]string, len(r.Trainers))
	if r.Status == wire.StatusRunning || r.Status == wire.StatusAwaiting {
		ws := make([]*big.Int, len(r.Trainers))
		for i, t := range r.Trainers {
			ws[i] = r.PaidWeight(t) // less what failed score checks forfeited; 0 below run_mean_gain's threshold
		}
		for i, s := range PayoutShares(pool, ws) {
			out[i] = s.String()
		}
		return out
	}
	for i, t := range r.Trainers {
		out[i] = orDefault(t.Reward, "0")
	}
	return out
}

// TaskSpec is the run's parsed spec (Spec is its canonical JSON).
func (r *Run) TaskSpec() *wire.TaskSpec { return r.spec }

// RoundStart reads the run's state at the start of round (the snapshot a
// closed round keeps until it is final), with the run's spec: what a
// re-executor starts a fragment's commit from.
func RoundStart(ctx context.Context, kv KV, task string, round uint64) (*Run, error) {
	r, err := LoadRun(ctx, kv, task)
	if err != nil {
		return nil, err
	}
	raw, err := kv.Get(ctx, KSTranscript, SnapKey(task, round))
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "run %s has no state of round %d's start (the round is final)", task, round)
	}
	if err != nil {
		return nil, err
	}
	var sr Run
	if err := json.Unmarshal(raw, &sr); err != nil {
		return nil, fmt.Errorf("round %d start of %s: %w", round, task, err)
	}
	sr.spec = r.spec
	return &sr, nil
}
