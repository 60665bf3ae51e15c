package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Version of the node software.
const Version = "0.2.0"

// Limits on external inputs handled by the node.
const (
	MaxPayloadBytes = 1 << 30 // one submission's safetensors payload
	MaxInitWeights  = 4 << 30
)

// Cancellation reasons recorded in the run.
const (
	CancelBySponsor = "cancelled by the sponsor before the run started"
	CancelExpired   = "expired: the enrolment window passed before the run could start"
)

// DefaultUnbondingDelay is how long a withdrawn syncer stake stays locked
// when the genesis sets no delay: long enough that a syncer cannot
// misbehave in a round and take its stake out before a challenge could
// reach it.
const DefaultUnbondingDelay = 7 * 24 * time.Hour

// Config wires a Node.
type Config struct {
	// Chain is the replicated state (chain.Local over the in-process
	// CometBFT node; chain.Manual in tests).
	Chain Chain
	// Blobs holds this node's payloads, weights, momentum and evidence.
	Blobs Blobs
	// Local is the node's own store for what is not replicated (sealed
	// Confidential dataset keys).
	Local  KV
	Engine Engine
	Signer Signer
	// Attestor checks Verified/Confidential evidence (nil: such runs are
	// refused by this node).
	Attestor Attestor
	// DatasetKeys is the Confidential tier's key broker (enclave.Broker).
	DatasetKeys DatasetKeys
	// Fetcher gets payloads and weights this node does not hold (nil:
	// local blobs only).
	Fetcher PayloadFetcher
	// Provider is this node's provider hint (its libp2p multiaddrs with
	// /p2p/<peer id>, or its peer id), recorded with the
	// submissions it receives as a hint of where their bytes are.
	Provider string
	// Dev marks a --dev node (reported in node info).
	Dev    bool
	Role   string
	Logger *slog.Logger
	// Clock is the node's wall clock, for its local rate limits and
	// backoffs only: no rule of the chain reads it.
	Clock func() time.Time
	// Fees sets the per-DID rate limits (the fees themselves are the
	// chain's genesis parameters).
	Fees FeeConfig
	// Announce, when set, is called after round transitions this node made (gossip).
	Announce func(ctx context.Context, ev Event)
	// Observer, when set, receives round and fragment measurements (metrics).
	Observer Observer
	// Validator, when set, is this node's CometBFT validator key: the node
	// re-executes every challenged commit whose committee it is on and
	// votes (reexec.go).
	Validator VoteSigner
	// Watch: re-execute every commit that can still be challenged and
	// challenge (with Signer's key and the run's bond) those whose result
	// differs; WatchConcurrency bounds the re-executions in flight (default 2).
	Watch            bool
	WatchConcurrency int
	// Fault, in test builds only (faultinject), alters this node's own
	// commits (fault.go).
	Fault *Fault
}

// Event is a run transition worth telling peers about.
type Event struct {
	TaskID    string
	Kind      string // round_committed, sealed
	Round     uint64
	ModelHash wire.Hash
	Detail    any
}

// DatasetKeys creates a Confidential run's dataset key (enclave.Broker): the
// key for the sponsor and a record sealed to the broker's enclave, which the
// node keeps in its local store (DatasetKeyRecord reads it back). A non-nil
// key is the sponsor's own (32 bytes) and is sealed instead of a fresh one.
type DatasetKeys interface {
	NewDatasetKey(taskID, tier string, policy, key []byte) (k, sealed []byte, err error)
}

func datasetKeyKey(task string) []byte { return []byte("dskey/" + task) }

// DatasetKeyRecord returns the sealed dataset-key record of a Confidential
// run from the broker node's local store (the key broker's
// enclave.KeyRecords).
func DatasetKeyRecord(ctx context.Context, kv KV, taskID string) ([]byte, error) {
	return kv.Get(ctx, KSMeta, datasetKeyKey(taskID))
}

// Node is the node's Service over the chain: reads from the last
// committed state, writes as transactions after the payload-dependent
// checks only a node holding the bytes can run, and (Run) the syncer
// worker and the candidate daemon driven by new blocks.
type Node struct {
	cfg   Config
	chain Chain
	blobs Blobs
	eng   Engine
	log   *slog.Logger
	now   func() time.Time

	postLimit, publishLimit *rateLimiter

	// tx serializes this node's own transactions (nonces in order).
	txMu      sync.Mutex
	lastNonce uint64

	w  worker
	cw watchState
}

var _ Service = (*Node)(nil)

// NewNode starts the service over cfg.Chain.
func NewNode(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Chain == nil || cfg.Blobs == nil || cfg.Local == nil || cfg.Engine == nil || cfg.Signer == nil {
		return nil, errors.New("syncer: Config needs Chain, Blobs, Local, Engine and Signer")
	}
	n := &Node{cfg: cfg, chain: cfg.Chain, blobs: cfg.Blobs, eng: cfg.Engine, log: cfg.Logger, now: cfg.Clock,
		postLimit:    newRateLimiter(cfg.Fees.RateBurst, cfg.Fees.RateWindow),
		publishLimit: newRateLimiter(cfg.Fees.RateBurst, cfg.Fees.RateWindow)}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.now == nil {
		n.now = time.Now
	}
	n.w.init()
	n.cw.init(cfg.WatchConcurrency)
	return n, nil
}

func candKey(did string) []byte { return []byte("cand/" + did) }
func runKey(task string) []byte { return []byte(task) }
func commitKey(task string, round uint64) []byte {
	return append([]byte("c/"+task+"/"), u64Bytes(round)...)
}
func proofKey(task, did string) []byte { return []byte("proof/" + task + "/" + did) }

// view runs fn over the last committed state.
func (n *Node) view(ctx context.Context, fn func(v View) error) error { return n.chain.View(ctx, fn) }

// load reads a run from the last committed state, with that state's block.
func (n *Node) load(ctx context.Context, task string) (*runState, Block, error) {
	var r *runState
	var blk Block
	err := n.view(ctx, func(v View) error {
		var err error
		r, err = loadRun(ctx, v.KV, task)
		blk = v.Block
		return err
	})
	return r, blk, err
}

// Info implements Service.
func (n *Node) Info(context.Context) wire.NodeInfo {
	p := n.eng.Profile()
	return wire.NodeInfo{Version: Version, NodeDID: n.cfg.Signer.DID(), Dev: n.cfg.Dev, Role: n.cfg.Role,
		Engine: wire.EngineSummary{Engine: p.Engine, Hash: p.Hash}}
}

// Balance implements Service.
func (n *Node) Balance(ctx context.Context, d string) (*wire.Balance, error) {
	var b *wire.Balance
	err := n.view(ctx, func(v View) error {
		var err error
		if b, err = Balance(ctx, v.KV, d); err == nil {
			b.Height = v.Block.Height
		}
		return err
	})
	return b, err
}

// ListSyncers implements Service.
func (n *Node) ListSyncers(ctx context.Context) ([]wire.SyncerCandidate, error) {
	var out []wire.SyncerCandidate
	err := n.view(ctx, func(v View) error {
		return v.KV.Scan(ctx, KSMeta, []byte("cand/"), func(_, raw []byte) error {
			var c wire.SyncerCandidate
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// ListRuns implements Service.
func (n *Node) ListRuns(ctx context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error) {
	out := []wire.RunSummary{}
	err := n.view(ctx, func(v View) error {
		return v.KV.Scan(ctx, KSRuns, nil, func(k, raw []byte) error {
			r, err := decodeRun(string(k), raw)
			if err != nil {
				// One unreadable run must not hide every other run.
				n.log.Error("listRuns: skipping a run whose stored state does not decode", "task", string(k), "err", err)
				return nil
			}
			if p.Status != "" && p.Status != r.Status {
				return nil
			}
			out = append(out, wire.RunSummary{TaskID: r.spec.TaskID, Status: r.Status, Round: r.Round, Tier: r.spec.Tier,
				Trainers: r.countActive(), M: r.spec.TrainerCount, K: r.spec.Quorum, Rounds: r.spec.MaxRounds})
			return nil
		})
	})
	return out, err
}

// GetRun implements Service.
func (n *Node) GetRun(ctx context.Context, task string) (*wire.RunView, error) {
	var out *wire.RunView
	err := n.view(ctx, func(v View) error {
		r, err := loadRun(ctx, v.KV, task)
		if err != nil {
			return err
		}
		esc, err := AccountBalance(ctx, v.KV, acctEscrow(task))
		if err != nil {
			return err
		}
		out = r.view(esc, v.Block)
		return nil
	})
	return out, err
}

// view renders a run for getRun.
func (r *runState) view(esc *big.Int, blk Block) *wire.RunView {
	v := &wire.RunView{TaskID: r.spec.TaskID, TaskSpec: r.Spec, SpecHash: r.SpecHash, Status: r.Status, Round: r.Round,
		RoundStartedMs: r.RoundMs, Syncer: r.Syncer, Election: r.Election, TrainerMetrics: map[string]wire.TrainerMetrics{},
		RoundRoots: r.Roots, HasWeights: r.HasInit, CancelReason: r.CancelReason, Escrow: esc.String()}
	if r.Status == wire.StatusRunning {
		v.Syncer, _ = r.syncerAt(blk.TimeMs)
	}
	if r.Status == wire.StatusAwaiting {
		v.EnrollDeadlineMs = r.PostedMs + r.spec.EnrollWindow()
	}
	v.ChallengeWindowBlocks, v.FinalRounds, v.OpenChallenges = r.Window, r.FinalRounds, len(r.Open)
	if v.RoundRoots == nil {
		v.RoundRoots = []wire.Hash{}
	}
	accrued := r.accruedRewards(esc)
	for i, t := range r.Trainers {
		shards := orEmpty(t.Shards)
		v.Trainers = append(v.Trainers, wire.TrainerView{DID: t.DID, Status: t.Status, Stake: t.Stake, Slashed: orDefault(t.Slashed, "0"),
			Shards: shards, ShardAssignments: shards, ShardsFromRound: r.shardsFrom(t), JoinedAt: t.JoinedRound, MissedRun: t.ConsecMissed})
		v.TrainerMetrics[t.DID] = wire.TrainerMetrics{Submitted: t.Submitted, Accepted: t.Accepted, MissedRounds: t.MissedRounds,
			CurrentReward: accrued[i]}
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
func (r *runState) accruedRewards(pool *big.Int) []string {
	out := make([]string, len(r.Trainers))
	if r.Status == wire.StatusRunning || r.Status == wire.StatusAwaiting {
		ws := make([]*big.Int, len(r.Trainers))
		for i, t := range r.Trainers {
			ws[i] = bigOf(t.Weight)
		}
		for i, s := range payoutShares(pool, ws) {
			out[i] = s.String()
		}
		return out
	}
	for i, t := range r.Trainers {
		out[i] = orDefault(t.Reward, "0")
	}
	return out
}

// ModelHash is wire.ModelHash: BLAKE3-256(Str(DomainModel) ‖ Hash(fragment_0) ‖ …).
func ModelHash(frags []wire.Hash) wire.Hash { return wire.ModelHash(frags) }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orEmpty(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}

func orStrs(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

func orHashes(v []wire.Hash) []wire.Hash {
	if v == nil {
		return []wire.Hash{}
	}
	return v
}

// RoundCommitHash is SHA-256(Str(DomainRoundCommit) ‖ Bytes(JCS(commit JSON)))
// (CanonicalRoundCommit gives the JCS bytes).
func RoundCommitHash(rc *wire.RoundCommit) (wire.Hash, error) {
	canon, err := CanonicalRoundCommit(rc)
	if err != nil {
		return wire.Hash{}, err
	}
	return wire.NewCanon(wire.DomainRoundCommit).Bytes(canon).Sum(), nil
}

// GetTranscript implements Service: every committed round, in order.
func (n *Node) GetTranscript(ctx context.Context, task string) ([]wire.RoundCommit, error) {
	out := []wire.RoundCommit{}
	err := n.view(ctx, func(v View) error {
		if _, err := loadRun(ctx, v.KV, task); err != nil {
			return err
		}
		return v.KV.Scan(ctx, KSTranscript, []byte("c/"+task+"/"), func(_, raw []byte) error {
			var c wire.RoundCommit
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			out = append(out, c)
			return nil
		})
	})
	return out, err
}

// ReportedMetrics returns what the run's trainers reported with their
// submission records, in round then trainer order (a trainer's later record
// in the same round replaces its earlier report). They are information, not
// state: no commit, receipt or reward depends on them.
func (n *Node) ReportedMetrics(ctx context.Context, task string) ([]wire.MetricsReport, error) {
	type key struct {
		round uint64
		did   string
	}
	got := map[key]wire.SubmissionMetrics{}
	var keys []key
	err := n.view(ctx, func(v View) error {
		if _, err := loadRun(ctx, v.KV, task); err != nil {
			return err
		}
		return v.KV.Scan(ctx, KSTranscript, []byte("s/"+task+"/"), func(_, raw []byte) error {
			var rec Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("record of %s: %w", task, err)
			}
			if len(rec.Metrics) == 0 {
				return nil
			}
			k := key{rec.Round, rec.TrainerDID}
			if _, ok := got[k]; !ok {
				keys = append(keys, k)
			}
			got[k] = rec.Metrics
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].round != keys[j].round {
			return keys[i].round < keys[j].round
		}
		return keys[i].did < keys[j].did
	})
	out := []wire.MetricsReport{}
	for _, k := range keys {
		out = append(out, wire.MetricsReport{Round: k.round, TrainerDID: k.did, Metrics: got[k]})
	}
	return out, nil
}

// GetPayload implements Service: a blob this node holds (payload, initial
// weights, fragment weights, momentum, evidence) by its content hash.
func (n *Node) GetPayload(ctx context.Context, h wire.Hash) ([]byte, error) {
	v, err := n.blob(ctx, h, uint64(MaxInitWeights), "")
	var fe *fetchError
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, Errf(KindNotFound, "no blob %s", h)
	case errors.As(err, &fe):
		return nil, Errf(KindNotFound, "no blob %s on this node, and no peer gave it: %v", h, err)
	}
	return v, err
}

// receiptWait is how long getReceipt waits for the signature of a run that
// has just sealed (a block or two on a live chain).
const receiptWait = 20 * time.Second

// GetReceipt implements Service. A sealed run's receipt is complete once its
// syncer's signature is on chain; right after the seal getReceipt waits a
// little for it, then says what it is waiting for.
func (n *Node) GetReceipt(ctx context.Context, task string) (*wire.Receipt, error) {
	deadline := time.NewTimer(receiptWait)
	defer deadline.Stop()
	for {
		changed := n.chain.Changed()
		var rc *wire.Receipt
		var r *runState
		var blk Block
		err := n.view(ctx, func(v View) error {
			var err error
			if r, err = loadRun(ctx, v.KV, task); err != nil {
				return err
			}
			blk = v.Block
			raw, err := v.KV.Get(ctx, KSReceipts, runKey(task))
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			rc = new(wire.Receipt)
			return json.Unmarshal(raw, rc)
		})
		if err != nil {
			return nil, err
		}
		if rc != nil {
			return rc, nil
		}
		if r.Seal == nil {
			return nil, Errf(KindNotFound, "run %s has no receipt yet (status %s, round %d of %d)", task, r.Status, r.Round, r.spec.MaxRounds)
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, Errf(KindNotFound, "run %s is sealed (run root %s), awaiting the syncer's signature: %s may sign its receipt at block time %d ms",
				task, r.Seal.RunRoot, r.receiptSignerAt(blk.TimeMs), blk.TimeMs)
		}
	}
}

// GetWeights implements Service: a fragment's committed weights as
// canonical safetensors, by the chain's current weights hash (fetched
// from the network when this node does not hold them and has a fetcher).
func (n *Node) GetWeights(ctx context.Context, p wire.GetWeightsParams) (*wire.Weights, error) {
	r, _, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if !r.HasInit {
		return nil, Errf(KindNotFound, "run %s has no weights yet: the sponsor has not supplied initial weights", p.TaskID)
	}
	if p.FragmentIndex >= uint64(len(r.Fragments)) {
		return nil, Errf(KindInvalid, "wrong fragment: fragment_index %d, the model has %d fragments", p.FragmentIndex, len(r.Fragments))
	}
	fs := r.Fragments[p.FragmentIndex]
	enc, err := n.blob(ctx, fs.WeightsHash, uint64(MaxInitWeights), "")
	var fe *fetchError
	if errors.As(err, &fe) {
		return nil, Errf(KindNotFound, "weights of fragment %d (%s) are not on this node and no peer gave them: %v", p.FragmentIndex, fs.WeightsHash, err)
	} else if err != nil {
		return nil, fmt.Errorf("weights of fragment %d (%s): %w", p.FragmentIndex, fs.WeightsHash, err)
	}
	return &wire.Weights{TaskID: p.TaskID, Round: r.Round, FragmentIndex: p.FragmentIndex, WeightsHash: fs.WeightsHash, Payload: enc}, nil
}

// blob returns a blob from the local store, or from the network through
// the fetcher (then kept locally), checked against its hash.
func (n *Node) blob(ctx context.Context, h wire.Hash, maxSize uint64, provider string) ([]byte, error) {
	b, err := n.blobs.Get(ctx, h)
	if err == nil || !errors.Is(err, ErrNotFound) || n.cfg.Fetcher == nil {
		return b, err
	}
	b, err = n.cfg.Fetcher.Fetch(ctx, h, maxSize, provider)
	if err != nil {
		return nil, &fetchError{fmt.Errorf("fetch %s: %w", h, err)}
	}
	if got := contentHash(b); got != h {
		return nil, &fetchError{fmt.Errorf("fetched blob hashes to %s, want %s", got, h)}
	}
	if err := n.blobs.Put(ctx, h, b); err != nil {
		return nil, err
	}
	return b, nil
}

// fetchError is a blob the network did not give (as opposed to a failure of
// this node's own store).
type fetchError struct{ error }

func (e *fetchError) Unwrap() error { return e.error }

// AttestNonce implements Service: the deterministic nonce of the trainer's
// next evidence (PROTOCOL §8), from chain state; any node gives the same.
func (n *Node) AttestNonce(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
	if _, err := did.Parse(p.DID); err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	r, _, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	res := &wire.NonceResult{Round: r.Round, ModelHash: r.RoundModel, Nonce: AttestNonce(p.TaskID, p.DID, r.Round, r.RoundAnchor)}
	if r.Status == wire.StatusRunning {
		if t := r.trainer(p.DID); t != nil && len(t.Shards) > 0 {
			res.Shard = uint64(t.Shards[0])
		}
	} else {
		res.ModelHash = r.InitModel
	}
	return res, nil
}

// Close releases nothing; the stores are the caller's.
func (n *Node) Close() error { return nil }

// trimDID shortens a DID for logs.
func trimDID(d string) string {
	if i := strings.LastIndexByte(d, ':'); i >= 0 && len(d)-i > 12 {
		return d[:i+9] + "…"
	}
	return d
}
