package syncer

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"sort"
	"sync"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Version of the node software.
const Version = "0.1.0"

// Limits on external inputs handled by the syncer.
const (
	MaxPayloadBytes = 1 << 30 // one submission's safetensors payload
	MaxInitWeights  = 4 << 30
)

// Node is the syncer state machine: post → elect → enrol → rounds → seal.
// It implements Service. All mutations go through one mutex and end in one
// synced batch.
type Node struct {
	cfg   Config
	kv    KV
	blobs Blobs
	eng   Engine
	log   *slog.Logger
	now   func() time.Time

	mu sync.Mutex

	postLimit, publishLimit *rateLimiter

	// abstain holds runs whose finalization failed locally (finalize.go).
	abstainMu sync.Mutex
	abstain   map[string]abstention
	ticking   map[string]bool // runs whose tickRun is in flight (Run)
	// wake makes Run tick now (a submission completed a fragment).
	wake chan struct{}
	// lastTickErr throttles the log of a repeating timer failure (an
	// unreadable run, say) to once a minute per run.
	lastTickErr map[string]time.Time
}

var _ Service = (*Node)(nil)

// NewNode opens the state machine over cfg.KV.
func NewNode(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.KV == nil || cfg.Engine == nil || cfg.Signer == nil {
		return nil, errors.New("syncer: Config needs KV, Engine and Signer")
	}
	n := &Node{cfg: cfg, kv: cfg.KV, eng: cfg.Engine, log: cfg.Logger, now: cfg.Clock, wake: make(chan struct{}, 1),
		postLimit:    newRateLimiter(cfg.Fees.RateBurst, cfg.Fees.RateWindow),
		publishLimit: newRateLimiter(cfg.Fees.RateBurst, cfg.Fees.RateWindow)}
	if n.blobs = cfg.Blobs; n.blobs == nil {
		n.blobs = KVBlobs(cfg.KV)
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	if n.now == nil {
		n.now = time.Now
	}
	if cfg.Dev {
		if err := n.devRegisterSelf(ctx); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// devStake is what a --dev node mints and stakes for its own candidacy.
var devStake = big.NewInt(1_000_000_000_000_000_000)

func (n *Node) devRegisterSelf(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	me := n.cfg.Signer.DID()
	if _, err := n.kv.Get(ctx, KSMeta, candKey(me)); err == nil {
		return nil
	}
	lt := newLedgerTx(ctx, n.kv)
	if err := lt.transfer(acctIssuer, acctSyncerStake(me), devStake, "dev self-candidacy"); err != nil {
		return err
	}
	var b Batch
	c, _ := json.Marshal(wire.SyncerCandidate{DID: me, Stake: devStake.String()})
	b.Set(KSMeta, candKey(me), c)
	if err := lt.flush(&b); err != nil {
		return err
	}
	n.log.Info("dev: registered this node as the only syncer candidate", "did", me)
	return n.kv.Commit(ctx, &b)
}

func candKey(did string) []byte { return []byte("cand/" + did) }
func runKey(task string) []byte { return []byte(task) }
func weightsKey(task string, f int) []byte {
	return binary.BigEndian.AppendUint32([]byte("w/"+task+"/"), uint32(f))
}
func momentumKey(task string, f int) []byte {
	return binary.BigEndian.AppendUint32([]byte("m/"+task+"/"), uint32(f))
}
func commitKey(task string, round uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte("c/"+task+"/"), round)
}
func subKey(task string, round uint64, f int, trainer string) []byte {
	k := binary.BigEndian.AppendUint64([]byte("s/"+task+"/"), round)
	k = binary.BigEndian.AppendUint32(k, uint32(f))
	return append(k, trainer...)
}

// load reads a run's state.
func (n *Node) load(ctx context.Context, task string) (*runState, error) {
	if task == "" {
		return nil, Errf(KindInvalid, "task_id is empty")
	}
	if len(task) > wire.MaxTaskIDLen {
		return nil, Errf(KindInvalid, "task_id longer than %d bytes", wire.MaxTaskIDLen)
	}
	raw, err := n.kv.Get(ctx, KSRuns, runKey(task))
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "no run with task_id %q", task)
	}
	if err != nil {
		return nil, fmt.Errorf("load run %s: %w", task, err)
	}
	var r runState
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("load run %s: corrupt state: %w", task, err)
	}
	spec, _, err := wire.ParseSpec(r.Spec)
	if err != nil {
		return nil, fmt.Errorf("load run %s: %w", task, err)
	}
	r.spec = spec
	return &r, nil
}

func (n *Node) putRun(b *Batch, r *runState) {
	raw, _ := json.Marshal(r)
	b.Set(KSRuns, runKey(r.spec.TaskID), raw)
}

// checkSigned verifies a signed request's signature and nonce and stages the
// new nonce in b.
func (n *Node) checkSigned(ctx context.Context, b *Batch, signer string, nonce uint64, sig []byte, pre []byte) error {
	if err := did.Verify(signer, pre, sig); err != nil {
		if errors.Is(err, did.ErrBadSignature) {
			return Errf(KindUnauthorized, "bad signature: does not verify against %s", signer)
		}
		return Errf(KindUnauthorized, "signer: %v", err)
	}
	raw, err := n.kv.Get(ctx, KSLedger, nonceKey(signer))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if err == nil && len(raw) == 8 {
		if last := binary.BigEndian.Uint64(raw); nonce <= last {
			return Errf(KindUnauthorized, "nonce %d is not above the last one used by %s (%d): replayed or reordered request", nonce, signer, last)
		}
	}
	b.Set(KSLedger, nonceKey(signer), binary.BigEndian.AppendUint64(nil, nonce))
	return nil
}

// Info implements Service.
func (n *Node) Info(context.Context) wire.NodeInfo {
	p := n.eng.Profile()
	return wire.NodeInfo{Version: Version, NodeDID: n.cfg.Signer.DID(), Dev: n.cfg.Dev, Role: n.cfg.Role,
		Engine: wire.EngineSummary{Engine: p.Engine, Hash: p.Hash}}
}

// Balance implements Service.
func (n *Node) Balance(ctx context.Context, d string) (*wire.Balance, error) {
	if _, err := did.Parse(d); err != nil {
		return nil, Errf(KindInvalid, "%v", err)
	}
	lt := newLedgerTx(ctx, n.kv)
	v, err := lt.balance(acctDID(d))
	if err != nil {
		return nil, err
	}
	return &wire.Balance{DID: d, Balance: v.String()}, nil
}

// Faucet implements Service; it exists only with --dev.
func (n *Node) Faucet(ctx context.Context, p wire.FaucetParams) (*wire.Balance, error) {
	if !n.cfg.Dev {
		return nil, Errf(KindDisabled, "the faucet exists only on a node started with --dev")
	}
	if _, err := did.Parse(p.DID); err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	amt, err := wire.ParseAmount(p.Amount)
	if err != nil {
		return nil, Errf(KindInvalid, "amount: %v", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	lt := newLedgerTx(ctx, n.kv)
	if err := lt.transfer(acctIssuer, acctDID(p.DID), amt, "faucet"); err != nil {
		return nil, err
	}
	var b Batch
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	v, _ := lt.balance(acctDID(p.DID))
	return &wire.Balance{DID: p.DID, Balance: v.String()}, nil
}

// RegisterSyncer implements Service: a candidate locks stake for elections.
func (n *Node) RegisterSyncer(ctx context.Context, p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error) {
	amt, err := wire.ParseAmount(p.Stake)
	if err != nil {
		return nil, Errf(KindInvalid, "stake: %v", err)
	}
	if amt.Sign() == 0 {
		return nil, Errf(KindInvalid, "stake must be positive: the election weights candidates by stake")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var b Batch
	if err := n.checkSigned(ctx, &b, p.DID, p.Nonce, p.Signature, p.Preimage()); err != nil {
		return nil, err
	}
	lt := newLedgerTx(ctx, n.kv)
	if err := lt.transfer(acctDID(p.DID), acctSyncerStake(p.DID), amt, "syncer candidacy"); err != nil {
		return nil, err
	}
	total, _ := lt.balance(acctSyncerStake(p.DID))
	c := wire.SyncerCandidate{DID: p.DID, Stake: total.String()}
	raw, _ := json.Marshal(c)
	b.Set(KSMeta, candKey(p.DID), raw)
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, err
	}
	return &c, nil
}

// ListSyncers implements Service.
func (n *Node) ListSyncers(ctx context.Context) ([]wire.SyncerCandidate, error) {
	var out []wire.SyncerCandidate
	err := n.kv.Scan(ctx, KSMeta, []byte("cand/"), func(_, v []byte) error {
		var c wire.SyncerCandidate
		if err := json.Unmarshal(v, &c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// ListRuns implements Service.
func (n *Node) ListRuns(ctx context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error) {
	out := []wire.RunSummary{}
	err := n.kv.Scan(ctx, KSRuns, nil, func(k, v []byte) error {
		var r runState
		if err := json.Unmarshal(v, &r); err != nil {
			n.log.Error("listRuns: skipping a run whose stored state does not decode", "task", string(k), "err", err)
			return nil
		}
		spec, _, err := wire.ParseSpec(r.Spec)
		if err != nil {
			// One unreadable run must not hide every other run.
			n.log.Error("listRuns: skipping a run whose stored spec does not parse", "task", string(k), "err", err)
			return nil
		}
		if p.Status != "" && p.Status != r.Status {
			return nil
		}
		out = append(out, wire.RunSummary{TaskID: spec.TaskID, Status: r.Status, Round: r.Round, Tier: spec.Tier,
			Trainers: r.countActive(), M: spec.TrainerCount, K: spec.Quorum, Rounds: spec.MaxRounds})
		return nil
	})
	return out, err
}

func (r *runState) countActive() int { return r.count(wire.TrainerActive, wire.TrainerJoining) }

// GetRun implements Service.
func (n *Node) GetRun(ctx context.Context, task string) (*wire.RunView, error) {
	r, err := n.load(ctx, task)
	if err != nil {
		return nil, err
	}
	v := &wire.RunView{TaskID: r.spec.TaskID, TaskSpec: r.Spec, SpecHash: r.SpecHash, Status: r.Status, Round: r.Round,
		RoundStartedMs: r.RoundMs, Syncer: r.Syncer, Election: r.Election, TrainerMetrics: map[string]wire.TrainerMetrics{},
		RoundRoots: r.Roots, HasWeights: r.HasInit, CancelReason: r.CancelReason}
	if r.Status == wire.StatusAwaiting && r.PostedMs > 0 {
		v.EnrollDeadlineMs = r.PostedMs + r.spec.EnrollWindow()
	}
	if v.RoundRoots == nil {
		v.RoundRoots = []wire.Hash{}
	}
	lt := newLedgerTx(ctx, n.kv)
	esc, err := lt.balance(acctEscrow(r.spec.TaskID))
	if err != nil {
		return nil, err
	}
	v.Escrow = esc.String()
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
	for i, f := range r.Fragments {
		v.Fragments = append(v.Fragments, wire.FragmentView{Index: i, Tensors: f.Tensors, Dtype: string(f.Dtype), N: f.N,
			WeightsHash: f.WeightsHash, Accepted: len(f.Subs), Committed: f.Committed})
		hashes = append(hashes, f.WeightsHash)
	}
	if r.HasInit {
		v.ModelHash = ModelHash(hashes)
	}
	rule, _ := json.Marshal(r.Rule)
	v.Aggregation = rule
	return v, nil
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

// GetTranscript implements Service: every committed round, in order.
func (n *Node) GetTranscript(ctx context.Context, task string) ([]wire.RoundCommit, error) {
	if _, err := n.load(ctx, task); err != nil {
		return nil, err
	}
	out := []wire.RoundCommit{}
	err := n.kv.Scan(ctx, KSTranscript, []byte("c/"+task+"/"), func(_, v []byte) error {
		var c wire.RoundCommit
		if err := json.Unmarshal(v, &c); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// GetPayload implements Service: a stored payload, initial weights file or
// fragment weights blob by hash.
func (n *Node) GetPayload(ctx context.Context, h wire.Hash) ([]byte, error) {
	v, err := n.blobs.Get(ctx, h)
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "no blob %s", h)
	}
	return v, err
}

// Blobs is the node's blob store.
func (n *Node) Blobs() Blobs { return n.blobs }

// GetReceipt implements Service.
func (n *Node) GetReceipt(ctx context.Context, task string) (*wire.Receipt, error) {
	r, err := n.load(ctx, task)
	if err != nil {
		return nil, err
	}
	raw, err := n.kv.Get(ctx, KSReceipts, runKey(task))
	if errors.Is(err, ErrNotFound) {
		return nil, Errf(KindNotFound, "run %s has no receipt yet (status %s, round %d of %d)", task, r.Status, r.Round, r.spec.MaxRounds)
	}
	if err != nil {
		return nil, err
	}
	var rc wire.Receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		return nil, fmt.Errorf("receipt %s: %w", task, err)
	}
	return &rc, nil
}

// Run drives timers (grace windows, round deadlines) until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait() // runs whose tick is computing stop with ctx
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.wake:
		case <-t.C:
		}
		n.tickEach(ctx, &wg)
		if err := n.releaseUnbonded(ctx); err != nil && ctx.Err() == nil {
			n.logTickErr("unbonding", err)
		}
	}
}

// Tick closes every fragment whose grace window has passed and every round
// whose deadline has passed.
func (n *Node) Tick(ctx context.Context) error {
	var tasks []string
	err := n.kv.Scan(ctx, KSRuns, nil, func(k, v []byte) error {
		var st struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(v, &st) == nil && (st.Status == wire.StatusRunning || st.Status == wire.StatusAwaiting) {
			tasks = append(tasks, string(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(tasks)
	// A run that fails to load or tick must not stop the timers of the runs
	// after it: each is tried, the errors are returned together.
	var errs []error
	for _, task := range tasks {
		if err := n.tickRun(ctx, task); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", task, err))
		}
	}
	if err := n.releaseUnbonded(ctx); err != nil {
		errs = append(errs, fmt.Errorf("unbonding: %w", err))
	}
	return errors.Join(errs...)
}

// Close releases nothing today; the KV is owned by the caller.
func (n *Node) Close() error { return nil }

// GetWeights implements Service: a fragment's committed weights as
// canonical safetensors; weights_hash is the ContentHash (BLAKE3-256) of
// exactly those bytes.
func (n *Node) GetWeights(ctx context.Context, p wire.GetWeightsParams) (*wire.Weights, error) {
	r, err := n.load(ctx, p.TaskID)
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
	data, err := n.kv.Get(ctx, KSWeights, weightsKey(p.TaskID, int(p.FragmentIndex)))
	if err != nil {
		return nil, fmt.Errorf("weights of fragment %d: %w", p.FragmentIndex, err)
	}
	enc, err := encodeFragment(fs, data)
	if err != nil {
		return nil, err
	}
	return &wire.Weights{TaskID: p.TaskID, Round: r.Round, FragmentIndex: p.FragmentIndex, WeightsHash: wire.ContentHash(enc), Payload: enc}, nil
}

// logTickErr logs a timer failure, the same key at most once a minute.
func (n *Node) logTickErr(key string, err error) {
	n.abstainMu.Lock()
	if n.lastTickErr == nil {
		n.lastTickErr = map[string]time.Time{}
	}
	last, seen := n.lastTickErr[key]
	doLog := !seen || time.Since(last) > time.Minute
	if doLog {
		n.lastTickErr[key] = time.Now()
	}
	n.abstainMu.Unlock()
	if doLog {
		n.log.Error("round timer", "run", key, "err", err)
	}
}
