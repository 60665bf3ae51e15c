package machine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tenzro/train/wire"
)

// The machine's replicated state (docs/protocol/chain.md §2). Everything
// here is written by Machine transitions only; node-local data (payloads,
// weights, evidence bytes, plugin modules, dataset keys) lives elsewhere.

// Run is one run on chain (KSRuns: a header under the task id and each
// enrolment, fragment and record under its own key, runstore.go). JSON
// with fixed field order; no floats.
//
// Outside this package a *Run is a read-only view: LoadRun, DecodeRun and
// RoundStart decode a fresh copy from a committed state's bytes, and no
// exported function writes one back. The node reads runs through it (and
// its exported methods: SyncerAt, Due, PrecheckRecord, …) instead of
// restating the machine's rules.
type Run struct {
	Spec     json.RawMessage `json:"spec"` // canonical JSON as posted
	SpecHash wire.Hash       `json:"spec_hash"`
	Status   string          `json:"status"`
	Round    uint64          `json:"round"`
	// RoundMs is the block time at which the current round started (before
	// the start: the posting's block time).
	RoundMs int64 `json:"round_started_ms"`
	// RoundAnchor is the hash of the block in which the current round
	// started (before the start: the posting's block); attestation nonces
	// of the round derive from it (PROTOCOL §8).
	RoundAnchor  wire.HexBytes `json:"round_anchor"`
	PostedMs     int64         `json:"posted_ms"`
	PostedHeight int64         `json:"posted_height"`
	// Syncer is the elected syncer (ticket 0); Succession every entrant in
	// ticket order (the winner first).
	Syncer     string         `json:"syncer"`
	Election   *wire.Election `json:"election,omitempty"`
	Succession []string       `json:"succession,omitempty"`
	Trainers   []*RunTrainer  `json:"trainers"` // sorted by DID
	Fragments  []*RunFragment `json:"fragments"`
	HasInit    bool           `json:"has_init"`
	InitModel  wire.Hash      `json:"init_model"`
	InitFile   wire.Hash      `json:"init_file"`
	// RoundModel is the model hash at the start of the current round (what
	// Verified-tier evidence binds).
	RoundModel wire.Hash `json:"round_model"`
	Rule       RuleRef   `json:"rule"`
	Verifiers  []RuleRef `json:"verifiers"`
	Outer      RuleRef   `json:"outer"`
	Codec      *RuleRef  `json:"codec,omitempty"`
	// Scorer is the run's evaluator when its spec scores submissions.
	Scorer  *RuleRef    `json:"scorer,omitempty"`
	Plugins []wire.Hash `json:"plugins"`
	Roots   []wire.Hash `json:"round_roots"` // round commit hashes
	// Membership and evidence changes of the current round, recorded in its commit.
	Joined        []string    `json:"joined"`
	Left          []string    `json:"left"`
	Equivocations []wire.Hash `json:"equivocations"`
	Attestations  []wire.Hash `json:"attestations"`
	CancelReason  string      `json:"cancel_reason,omitempty"`
	// LastSyncer committed the run's latest fragment commit.
	LastSyncer string `json:"last_syncer,omitempty"`
	// CommitTickets are the tickets (indices in Succession) named by the
	// run's fragment commits, the chain's own no-quorum closures included,
	// in increasing order, each once: who may sign the receipt follows
	// from them (receiptSigners).
	CommitTickets []uint64 `json:"commit_tickets,omitempty"`
	// Skipped are tickets that missed their turn in an earlier round (a
	// later ticket committed in their place) and have committed nothing
	// since: they take their turn only after every other live entrant
	// (TurnOrder), so a dead syncer does not cost every later round a
	// deadline. RoundMissed and RoundCommitted are the current round's
	// misses and committers, folded into Skipped when the round closes (a
	// turn never moves within a round).
	Skipped        []uint64 `json:"skipped,omitempty"`
	RoundMissed    []uint64 `json:"round_missed,omitempty"`
	RoundCommitted []uint64 `json:"round_committed,omitempty"`
	// Seal: settled, run root in the run log; Signed once signReceipt landed.
	Seal *sealState `json:"seal,omitempty"`

	// Challenges (mchallenge.go). Window is the run's challenge window in
	// blocks (0: every round final in the transaction that closes it).
	// FinalRounds rounds are final (their payout weight, counters and
	// slashes applied; not stored when Window is 0); Pending lists
	// the closed rounds that are not, in order, each with the height from
	// which it may be. AwaitingFinal: the last round closed and the run
	// seals once every round is final. Open lists the run's undecided
	// challenges, Excluded the syncers an upheld challenge slashed (never
	// this run's syncer again), Challenges how many challenges it took.
	Window        int64          `json:"challenge_window,omitempty"`
	FinalRounds   uint64         `json:"final_rounds,omitempty"`
	Pending       []pendingRound `json:"pending_rounds,omitempty"`
	AwaitingFinal bool           `json:"awaiting_final,omitempty"`
	Open          []openRef      `json:"open_challenges,omitempty"`
	Excluded      []string       `json:"excluded_syncers,omitempty"`
	Challenges    uint64         `json:"challenges,omitempty"`

	spec *wire.TaskSpec
	// raw holds the stored bytes of each key the run was loaded from or
	// last wrote (runstore.go), so putRun writes only what changed; part:
	// loaded by loadRunFor (one trainer, one fragment); nActive: the
	// header's count of active trainers.
	raw     map[string][]byte
	part    bool
	nActive int
	// attBase counts the attestations a partial load did not read into
	// Attestations (0 for a whole run).
	attBase int
}

// sealState is what sealing decided.
type sealState struct {
	FinalModel    wire.Hash     `json:"final_model"`
	RunRoot       wire.Hash     `json:"run_root"`
	TimeMs        int64         `json:"time_ms"`
	Height        int64         `json:"height"`
	RunLogIndex   uint64        `json:"run_log_index"`
	Payouts       []wire.Payout `json:"payouts"`
	SponsorRefund string        `json:"sponsor_refund"`
	Signed        bool          `json:"signed"`
	SignedBy      string        `json:"signed_by,omitempty"`
}

// RunTrainer is a trainer's state in a run.
type RunTrainer struct {
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
	// Weight is Σ fragment sizes of accepted inputs (payout weight).
	Weight string `json:"weight"`
	Reward string `json:"reward"`
	// RoundAccepted counts this round's accepted inputs.
	RoundAccepted int `json:"round_accepted"`
	// Forfeit is the payout weight a scored run takes back for failed
	// score checks: N × 10000 / rate_bps per failed check (mpay.go); the
	// trainer is paid on max(0, Weight − Forfeit). ScoreFails counts the
	// failed checks.
	Forfeit    string `json:"forfeit,omitempty"`
	ScoreFails uint64 `json:"score_fails,omitempty"`
	// GainChecks counts the trainer's scored checks (not failed) in a run
	// whose test is run_mean_gain, and GainSumPPM sums their
	// wire.GainPPM; the seal pays weight 0 when wire.RunGainPasses says
	// the mean is below the spec's min_gain_ppm (Run.PaidWeight). Both
	// are absent otherwise, so other runs' state keeps its bytes.
	GainChecks uint64 `json:"gain_checks,omitempty"`
	GainSumPPM int64  `json:"gain_sum_ppm,omitempty"`
}

// FragLayout is a fragment's tensors (in the fragment's order), element
// type and value count.
type FragLayout struct {
	Tensors []wire.TensorInfo `json:"tensors"`
	Dtype   Dtype             `json:"dtype"`
	N       int64             `json:"n"`
}

// RunFragment is a fragment's state in a run: its layout, current weights
// and momentum, and the current round's records and commit.
type RunFragment struct {
	FragLayout
	WeightsHash  wire.Hash `json:"weights_hash"`
	MomentumHash wire.Hash `json:"momentum_hash"` // zero before the first outer step
	// Current round: the records in arrival order, when the K-th arrived
	// (block time), whether the fragment is closed and its commit.
	Records []RecRef             `json:"records"`
	KthMs   int64                `json:"kth_ms"`
	Closed  bool                 `json:"closed"`
	Commit  *wire.FragmentCommit `json:"commit,omitempty"`
	// ScoreSeed is a scored run's scoring randomness for this fragment and
	// round (wire.ScoreSeed), recorded by BeginBlock at the first block at
	// which the fragment is due; a commit is refused before it exists.
	ScoreSeed *wire.Hash `json:"score_seed,omitempty"`

	// base counts the current round's records that a partial load
	// (loadRunFor) did not read into Records.
	base int
}

// RecRef names one accepted submission record of a fragment's round.
type RecRef struct {
	DID         string    `json:"did"`
	PayloadHash wire.Hash `json:"payload_hash"`
}

// Record is the chain's record of one submission (KSTranscript,
// recordKey): the signed submission without its payload, where it landed
// and where the bytes are.
type Record struct {
	wire.SubmissionTx
	Height int64 `json:"height"`
	TimeMs int64 `json:"time_ms"`
}

// Claim is an equivocation claim: a second record from one trainer for one
// round and fragment with another payload hash (KSEvidence, claimKey). The
// fragment's syncer gives the verdict in its commit.
type Claim struct {
	Digest wire.Hash `json:"digest"`
	First  Record    `json:"first"`
	Second Record    `json:"second"`
}

// PluginRecord is a published plugin on chain (KSMeta, pluginKey).
type PluginRecord struct {
	Hash      wire.Hash `json:"hash"`
	Publisher string    `json:"publisher"`
	Size      uint64    `json:"size"`
	Height    int64     `json:"height"`
}

// RecordPrefix is the KSTranscript prefix of a fragment's records in a round.
func RecordPrefix(task string, round uint64, f int) []byte {
	k := binary.BigEndian.AppendUint64([]byte("s/"+task+"/"), round)
	return binary.BigEndian.AppendUint32(k, uint32(f))
}

// RecordKey is the KSTranscript key of a trainer's record for a fragment
// in a round.
func RecordKey(task string, round uint64, f int, d string) []byte {
	return append(RecordPrefix(task, round, f), d...)
}
func claimPrefix(task string, round uint64, f int) []byte {
	k := binary.BigEndian.AppendUint64([]byte("claim/"+task+"/"), round)
	return binary.BigEndian.AppendUint32(k, uint32(f))
}
func claimKey(task string, round uint64, f int, d string) []byte {
	return append(claimPrefix(task, round, f), d...)
}

const activePrefix = "active/"

func activeKey(task string) []byte { return []byte(activePrefix + task) }

// ActiveTasks lists the runs that are not yet sealed, cancelled or expired,
// in key order.
func ActiveTasks(ctx context.Context, kv KV) ([]string, error) {
	var tasks []string
	err := kv.Scan(ctx, KSMeta, []byte(activePrefix), func(k, _ []byte) error {
		tasks = append(tasks, strings.TrimPrefix(string(k), activePrefix))
		return nil
	})
	return tasks, err
}

// unsignedKey indexes sealed runs whose receipt awaits its signature.
func unsignedKey(task string) []byte { return []byte("unsigned/" + task) }
func unbondKey(releaseMs int64, d string) []byte {
	return []byte(fmt.Sprintf("unbond/%020d/%s", releaseMs, d))
}
func pluginKey(h wire.Hash) []byte { return []byte("plugin/" + h.String()) }

var (
	keyParams    = []byte("params")
	keyRunLogN   = []byte("runlog/size")
	runLogPrefix = []byte("runlog/leaf/")
)

func runLogKey(i uint64) []byte { return []byte(fmt.Sprintf("runlog/leaf/%020d", i)) }

// DecodeRun decodes a whole run as one JSON value (RunJSON's answer, the
// chain's run query) for task.
func DecodeRun(task string, raw []byte) (*Run, error) {
	var r Run
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode run %s: %w", task, err)
	}
	spec, _, err := wire.ParseSpec(r.Spec)
	if err != nil {
		return nil, fmt.Errorf("decode run %s: %w", task, err)
	}
	r.spec = spec
	return &r, nil
}

// Trainer is the run's trainer with did (nil when it has none).
func (r *Run) Trainer(did string) *RunTrainer {
	i := sort.Search(len(r.Trainers), func(i int) bool { return r.Trainers[i].DID >= did })
	if i < len(r.Trainers) && r.Trainers[i].DID == did {
		return r.Trainers[i]
	}
	return nil
}

func (r *Run) addTrainer(t *RunTrainer) {
	r.Trainers = append(r.Trainers, t)
	sort.Slice(r.Trainers, func(i, j int) bool { return r.Trainers[i].DID < r.Trainers[j].DID })
}

// Count is the number of the run's trainers in one of statuses.
func (r *Run) Count(statuses ...string) int {
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

// CountActive is the number of active and joining trainers.
func (r *Run) CountActive() int { return r.Count(wire.TrainerActive, wire.TrainerJoining) }

// assignShards deals the data shards to the active trainers for the round
// that starts (DealShards over the round's anchor).
func (r *Run) assignShards() {
	var active []*RunTrainer
	for _, t := range r.Trainers {
		t.Shards = nil
		if t.Status == wire.TrainerActive {
			active = append(active, t)
		}
	}
	dids := make([]string, len(active))
	for i, t := range active {
		dids[i] = t.DID
	}
	for i, sh := range DealShards(r.spec.TaskID, r.Round, r.RoundAnchor, dids, r.spec.Shards(), r.spec.Holders()) {
		active[i].Shards = sh
	}
}

// DealShards returns the shards each of the active trainers (DIDs in
// ascending order) holds in a round, each list ascending (PROTOCOL §5,
// scoring.md §3.1). One holder (the default): shard s to active[s mod n],
// as always. Two holders: the trainers are put in a ring π ordered by
// SHA-256(Str(DomainShardDeal) ‖ Str(task) ‖ U64(round) ‖ Bytes(anchor) ‖
// Str(DID)) (ties, impossible for distinct DIDs, by DID), and shard s goes
// to π[s mod n] and π[(s+1) mod n]: two distinct trainers when n ≥ 2, the
// one trainer when n = 1. The anchor is the hash of the block that started
// the round, so no trainer knows its ring neighbours when it enrols and
// the pairing is drawn again every round.
func DealShards(task string, round uint64, anchor []byte, active []string, shards, holders int) [][]int {
	n := len(active)
	out := make([][]int, n)
	if n == 0 {
		return out
	}
	ring := make([]int, n) // ring position → index into active
	for i := range ring {
		ring[i] = i
	}
	if holders >= 2 {
		keys := make([]wire.Hash, n)
		for i, did := range active {
			keys[i] = wire.NewCanon(wire.DomainShardDeal).Str(task).U64(round).Bytes(anchor).Str(did).Sum()
		}
		sort.Slice(ring, func(a, b int) bool {
			if c := bytes.Compare(keys[ring[a]][:], keys[ring[b]][:]); c != 0 {
				return c < 0
			}
			return active[ring[a]] < active[ring[b]]
		})
	}
	for s := 0; s < shards; s++ {
		first := ring[s%n]
		out[first] = append(out[first], s)
		if holders >= 2 && n >= 2 {
			second := ring[(s+1)%n]
			out[second] = append(out[second], s)
		}
	}
	return out
}

// allIn: at least K records and one from every active trainer.
func (r *Run) allIn(fs *RunFragment) bool {
	return fs.accepted() >= r.spec.Quorum && fs.accepted() >= r.activeTrainers()
}

// Due says whether fragment fs may be committed at block time t: K records
// and every active trainer in, or the grace window after the K-th record
// passed (PROTOCOL §6).
func (r *Run) Due(fs *RunFragment, t int64) bool {
	if fs.Closed || fs.accepted() < r.spec.Quorum {
		return false
	}
	return r.allIn(fs) || t > fs.KthMs+r.spec.GraceWindowMs
}

// ticketAt is the index in the succession of who may commit the current
// round at block time t: one more for every whole round deadline since the
// round started, capped at the last entrant.
func (r *Run) ticketAt(t int64) int {
	if len(r.Succession) == 0 {
		return 0
	}
	k := int64(0)
	if el := t - r.RoundMs; el > 0 {
		k = el / r.spec.RoundDeadline()
	}
	if k >= int64(len(r.Succession)) {
		k = int64(len(r.Succession)) - 1
	}
	return int(k)
}

// SyncerAt is the DID that may commit the current round at block time t
// and its ticket, its index in the election's succession ("" when the run
// has no election): after ⌊(t − round start)/D⌋ deadlines, the entrant at
// that position of TurnOrder (capped at the last).
func (r *Run) SyncerAt(t int64) (string, int) {
	live := r.TurnOrder()
	if len(live) == 0 {
		return "", 0
	}
	k := r.ticketAt(t)
	if k >= len(live) {
		k = len(live) - 1
	}
	return r.Succession[live[k]], live[k]
}

// TurnOrder is the order in which the succession's tickets get the current
// round's turns, one round deadline each: the entrants no upheld challenge
// excluded and not Skipped, in ticket order, then the Skipped ones, in
// ticket order (a skipped ticket still serves when every other one fails,
// and a commit restores it). It is the one turn rule: the chain's
// commitFragment and the nodes' workers both go through SyncerAt and
// SlotOf, which read it.
func (r *Run) TurnOrder() []int {
	live := r.liveSuccession()
	if len(r.Skipped) == 0 {
		return live
	}
	out := make([]int, 0, len(live))
	for _, i := range live {
		if !hasTicket(r.Skipped, uint64(i)) {
			out = append(out, i)
		}
	}
	for _, i := range live {
		if hasTicket(r.Skipped, uint64(i)) {
			out = append(out, i)
		}
	}
	return out
}

func hasTicket(s []uint64, k uint64) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i] >= k })
	return i < len(s) && s[i] == k
}

func addTicket(s []uint64, k uint64) []uint64 {
	i := sort.Search(len(s), func(i int) bool { return s[i] >= k })
	if i < len(s) && s[i] == k {
		return s
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = k
	return s
}

// noteTurn records a fragment commit by ticket k in the current round:
// every ticket before k in TurnOrder had its whole deadline and committed
// nothing this round, so it missed its turn (RoundMissed); k's commit shows
// it alive, which matters (RoundCommitted) only for a ticket that is
// skipped or missed. A run where no one misses writes nothing here.
func (r *Run) noteTurn(k int) {
	for _, i := range r.TurnOrder() {
		if i == k {
			break
		}
		if !r.committedThisRound(uint64(i)) {
			r.RoundMissed = addTicket(r.RoundMissed, uint64(i))
		}
	}
	if hasTicket(r.Skipped, uint64(k)) || hasTicket(r.RoundMissed, uint64(k)) {
		r.RoundCommitted = addTicket(r.RoundCommitted, uint64(k))
	}
}

// committedThisRound: a fragment of the current round is closed by a
// commit naming ticket k.
func (r *Run) committedThisRound(k uint64) bool {
	for _, fs := range r.Fragments {
		if fs.Closed && fs.Commit != nil && fs.Commit.Ticket == k {
			return true
		}
	}
	return false
}

// foldTurns applies the closing round's turns: its misses join Skipped,
// its committers leave it (a commit shows liveness).
func (r *Run) foldTurns() {
	for _, k := range r.RoundMissed {
		r.Skipped = addTicket(r.Skipped, k)
	}
	var keep []uint64
	for _, k := range r.Skipped {
		if !hasTicket(r.RoundCommitted, k) {
			keep = append(keep, k)
		}
	}
	r.Skipped, r.RoundMissed, r.RoundCommitted = keep, nil, nil
}

// liveSuccession is the indices of the succession's entrants that no upheld
// challenge excluded, in ticket order.
func (r *Run) liveSuccession() []int {
	out := make([]int, 0, len(r.Succession))
	for i, d := range r.Succession {
		if !r.excluded(d) {
			out = append(out, i)
		}
	}
	return out
}

// SlotOf is the slot of succession ticket k in the current round: its
// position in TurnOrder (ticket k itself when no challenge excluded and no
// miss skipped anyone before it).
func (r *Run) SlotOf(k int) int {
	for pos, i := range r.TurnOrder() {
		if i == k {
			return pos
		}
	}
	return k
}

func (r *Run) excluded(d string) bool {
	for _, e := range r.Excluded {
		if e == d {
			return true
		}
	}
	return false
}

// receiptSigners is who may sign the sealed run's receipt, in turn: the
// syncer of the last fragment commit, then every other syncer that
// committed a fragment, in ticket order, then the entrants whose tickets
// are above every committer's, in ticket order; the k-th may sign once k
// round deadlines have passed since the seal. An entrant that committed
// nothing signs only from above every committer: that is what a verifier
// of the transcript can check offline (CheckTranscript), since an entrant
// below a committer would have been that round's syncer before it.
func (r *Run) receiptSigners() []string {
	out := []string{}
	if r.LastSyncer != "" && !r.excluded(r.LastSyncer) {
		out = append(out, r.LastSyncer)
	}
	next := 0
	for _, k := range r.CommitTickets {
		if k < uint64(len(r.Succession)) && r.Succession[k] != r.LastSyncer && !r.excluded(r.Succession[k]) {
			out = append(out, r.Succession[k])
		}
		next = int(k) + 1
	}
	for k := next; k < len(r.Succession); k++ {
		if r.Succession[k] != r.LastSyncer && !r.excluded(r.Succession[k]) {
			out = append(out, r.Succession[k])
		}
	}
	return out
}

// noteCommitTicket adds a fragment commit's ticket to CommitTickets.
func (r *Run) noteCommitTicket(k uint64) {
	i := sort.Search(len(r.CommitTickets), func(i int) bool { return r.CommitTickets[i] >= k })
	if i < len(r.CommitTickets) && r.CommitTickets[i] == k {
		return
	}
	r.CommitTickets = append(r.CommitTickets, 0)
	copy(r.CommitTickets[i+1:], r.CommitTickets[i:])
	r.CommitTickets[i] = k
}

// ReceiptSignerAt is who may sign the receipt at block time t.
func (r *Run) ReceiptSignerAt(t int64) string {
	ss := r.receiptSigners()
	if len(ss) == 0 || r.Seal == nil {
		return ""
	}
	k := int64(0)
	if el := t - r.Seal.TimeMs; el > 0 {
		k = el / r.spec.RoundDeadline()
	}
	if k >= int64(len(ss)) {
		k = int64(len(ss)) - 1
	}
	return ss[k]
}

// AttestNonce is the attestation nonce of a trainer for a run's round
// (PROTOCOL §8): SHA-256(Str("tenzro/train/attest-nonce/v1") ‖ Str(task) ‖
// Str(DID) ‖ U64(round) ‖ Bytes(anchor)), anchor the hash of the block in
// which the round started (before the start: the posting's block). Anyone
// can recompute it from chain state; it is fresh per round.
func AttestNonce(task, trainer string, round uint64, anchor []byte) []byte {
	h := wire.NewCanon(DomainAttestNonce).Str(task).Str(trainer).U64(round).Bytes(anchor).Sum()
	return h[:]
}

// DomainAttestNonce tags attestation nonces.
const DomainAttestNonce = "tenzro/train/attest-nonce/v1"

// DomainRunLog tags run-log leaves.
const DomainRunLog = "tenzro/train/run-log/v1"

// RunLogLeaf is a sealed run's leaf in the run log:
// Str(DomainRunLog) ‖ Str(task_id) ‖ Hash(run_root).
func RunLogLeaf(taskID string, runRoot wire.Hash) []byte {
	return wire.NewCanon(DomainRunLog).Str(taskID).Hash(runRoot).Out()
}

// RunLogLeaves returns the run log's leaves in order (the chain's app hash
// commits to their RFC 6962 root).
func RunLogLeaves(ctx context.Context, kv KV) ([][]byte, error) {
	var out [][]byte
	err := kv.Scan(ctx, KSMeta, runLogPrefix, func(_, v []byte) error {
		out = append(out, append([]byte(nil), v...))
		return nil
	})
	return out, err
}

// RunLogSize is the number of sealed runs in the run log.
func RunLogSize(ctx context.Context, kv KV) (uint64, error) {
	return getU64(ctx, kv, KSMeta, keyRunLogN)
}

func getU64(ctx context.Context, kv KV, ks Keyspace, key []byte) (uint64, error) {
	raw, err := kv.Get(ctx, ks, key)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(raw) != 8 {
		return 0, fmt.Errorf("state %q: %d bytes, want 8", key, len(raw))
	}
	return binary.BigEndian.Uint64(raw), nil
}

func u64Bytes(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
