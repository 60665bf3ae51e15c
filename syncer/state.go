package syncer

import (
	"encoding/json"
	"sort"

	"github.com/tenzro/train/wire"
)

// runState is the persistent state of one run (key space runs/). Everything
// that changes in a state transition is written with the batch that makes
// the transition, so the stored state is always consistent.
type runState struct {
	Spec      json.RawMessage `json:"spec"` // canonical JSON as posted
	SpecHash  wire.Hash       `json:"spec_hash"`
	Status    string          `json:"status"`
	Round     uint64          `json:"round"`
	RoundMs   int64           `json:"round_started_ms"`
	Syncer    string          `json:"syncer"`
	Election  *wire.Election  `json:"election,omitempty"`
	Trainers  []*trainerState `json:"trainers"` // sorted by DID
	Fragments []*fragState    `json:"fragments"`
	HasInit   bool            `json:"has_init"`
	InitModel wire.Hash       `json:"init_model"`
	InitFile  wire.Hash       `json:"init_file"`
	// RoundModel is the model hash at the start of the current round (what
	// Verified-tier evidence binds).
	RoundModel wire.Hash   `json:"round_model"`
	Rule       RuleRef     `json:"rule"`
	Verifiers  []RuleRef   `json:"verifiers"`
	Outer      RuleRef     `json:"outer"`
	Roots      []wire.Hash `json:"round_roots"` // round commit hashes
	// Membership and evidence changes of the current round, recorded in its commit.
	Joined        []string    `json:"joined"`
	Left          []string    `json:"left"`
	Equivocations []wire.Hash `json:"equivocations"`
	Attestations  []wire.Hash `json:"attestations"`
	Plugins       []wire.Hash `json:"plugins"`
	// PostedMs is when the run was posted (node clock); the enrolment
	// window counts from it. 0 for runs stored before it existed: those
	// never expire.
	PostedMs     int64  `json:"posted_ms,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`

	// Codec decodes compressed payloads (nil: uncompressed).
	Codec *RuleRef `json:"codec,omitempty"`

	spec *wire.TaskSpec
	// pre holds fragment results computed outside the lock (finalize.go).
	pre map[wire.Hash]*fragResult
}

type trainerState struct {
	DID          string `json:"did"`
	Status       string `json:"status"`
	Stake        string `json:"stake"`
	Slashed      string `json:"slashed"`
	Shards       []int  `json:"shards"`
	JoinedRound  uint64 `json:"joined_round"`
	ConsecMissed uint64 `json:"consecutive_missed"`
	Submitted    uint64 `json:"submitted"`
	Accepted     uint64 `json:"accepted"`
	MissedRounds uint64 `json:"missed_rounds"`
	// Weight is Σ fragment sizes of accepted submissions (payout weight).
	Weight string `json:"weight"`
	Reward string `json:"reward"`
	// RoundAccepted counts accepted submissions in the current round.
	RoundAccepted int `json:"round_accepted"`
}

type fragState struct {
	Tensors     []wire.TensorInfo `json:"tensors"`
	Dtype       Dtype             `json:"dtype"`
	N           int64             `json:"n"`
	WeightsHash wire.Hash         `json:"weights_hash"`
	HasMomentum bool              `json:"has_momentum"`
	// Current round.
	Subs      []subRef             `json:"subs"` // accepted, in arrival order
	KthMs     int64                `json:"kth_ms"`
	Committed bool                 `json:"committed"`
	Commit    *wire.FragmentCommit `json:"commit,omitempty"`
}

type subRef struct {
	DID         string    `json:"did"`
	PayloadHash wire.Hash `json:"payload_hash"`
}

func (r *runState) trainer(did string) *trainerState {
	i := sort.Search(len(r.Trainers), func(i int) bool { return r.Trainers[i].DID >= did })
	if i < len(r.Trainers) && r.Trainers[i].DID == did {
		return r.Trainers[i]
	}
	return nil
}

func (r *runState) addTrainer(t *trainerState) {
	r.Trainers = append(r.Trainers, t)
	sort.Slice(r.Trainers, func(i, j int) bool { return r.Trainers[i].DID < r.Trainers[j].DID })
}

// count returns the number of trainers in the given statuses.
func (r *runState) count(statuses ...string) int {
	n := 0
	for _, t := range r.Trainers {
		for _, s := range statuses {
			if t.Status == s {
				n++
			}
		}
	}
	return n
}

// assignShards deals data shards to active trainers in DID order:
// shard s goes to active trainer s mod n. Deterministic and documented in
// docs/PROTOCOL.md.
func (r *runState) assignShards() {
	var active []*trainerState
	for _, t := range r.Trainers {
		t.Shards = nil
		if t.Status == wire.TrainerActive {
			active = append(active, t)
		}
	}
	if len(active) == 0 {
		return
	}
	for s := 0; s < r.spec.Shards(); s++ {
		t := active[s%len(active)]
		t.Shards = append(t.Shards, s)
	}
}
