package syncer

import (
	"fmt"
	"math/big"

	"github.com/tenzro/train/wire"
)

// rewardShares is the settlement rule of the reward pool, in one place: each
// trainer gets pool × weight / Σweight (integer division, remainder back to
// the sponsor), where weight is the summed fragment size of its accepted
// outer gradients. seal pays exactly these amounts; GetRun reports them
// before the seal as current_reward (what the trainer would get if the run
// sealed now), so the two can never disagree. Shares are in r.Trainers order.
func rewardShares(pool *big.Int, trainers []*trainerState) []*big.Int {
	total := new(big.Int)
	for _, t := range trainers {
		total.Add(total, bigOf(t.Weight))
	}
	out := make([]*big.Int, len(trainers))
	for i, t := range trainers {
		share := new(big.Int)
		if total.Sign() > 0 {
			share.Mul(pool, bigOf(t.Weight)).Div(share, total)
		}
		out[i] = share
	}
	return out
}

// accruedRewards is each trainer's current_reward: while the run trains, the
// share rewardShares would pay from the escrowed pool if the run sealed now
// (it grows with every accepted submission and committed round); once the
// run is settled, what was paid.
func (r *runState) accruedRewards(pool *big.Int) []string {
	out := make([]string, len(r.Trainers))
	if r.Status == wire.StatusRunning || r.Status == wire.StatusAwaiting {
		for i, s := range rewardShares(pool, r.Trainers) {
			out[i] = s.String()
		}
		return out
	}
	for i, t := range r.Trainers {
		out[i] = orDefault(t.Reward, "0")
	}
	return out
}

// shardsFrom is the round from which t's shard assignment applies: shards
// are dealt when the run starts (round 0) and re-dealt at each round
// boundary, so an active trainer's current shards apply from the current
// round, and a joining trainer (or one enrolled before the start, which has
// none yet) gets shards from the round it becomes active.
func (r *runState) shardsFrom(t *trainerState) uint64 {
	switch {
	case r.Status == wire.StatusAwaiting:
		return 0
	case t.Status == wire.TrainerJoining:
		return t.JoinedRound
	default:
		return r.Round
	}
}

// enrollResult is the enrol answer: status, shards (under the seed's name and
// the old alias) and the round from which they apply, with a hint when the
// trainer has none yet.
func enrollResult(r *runState, t *trainerState) *wire.EnrollResult {
	shards := orEmpty(t.Shards)
	res := &wire.EnrollResult{TaskID: r.spec.TaskID, TrainerDID: t.DID, Status: t.Status, Shards: shards, FromRound: t.JoinedRound,
		RunStatus: r.Status, ShardAssignments: shards, ShardsFromRound: r.shardsFrom(t)}
	if len(shards) == 0 {
		switch {
		case r.Status == wire.StatusAwaiting:
			res.ShardsNote = fmt.Sprintf("shards are dealt when the run starts (%d of M=%d trainers enrolled); poll get-run", r.countActive(), r.spec.TrainerCount)
		case t.Status == wire.TrainerJoining:
			res.ShardsNote = fmt.Sprintf("shards are dealt when you become active at round %d; poll get-run", t.JoinedRound)
		}
	}
	return res
}
