package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Config wires a Node.
type Config struct {
	// Chain is the replicated state (chain.Local over the in-process
	// CometBFT node; chain.Manual in tests).
	Chain Chain
	// Blobs holds this node's payloads, weights, momentum and evidence.
	Blobs Blobs
	// Local is the node's own store for what is not replicated (sealed
	// Confidential dataset keys).
	Local  machine.KV
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
	// QuantCacheBytes bounds the memory of the stale rule's cache of
	// earlier inputs' quantized prefixes (quantcache.go): 0 is
	// DefaultQuantCacheBytes, negative turns it off. It changes only speed.
	QuantCacheBytes int64
	// InputCacheBytes bounds the memory of the cache of what a commit
	// needs of each input this node accepted, computed at ingest
	// (inputcache.go): 0 is DefaultInputCacheBytes, negative turns it off.
	// It changes only speed.
	InputCacheBytes int64
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
func DatasetKeyRecord(ctx context.Context, kv machine.KV, taskID string) ([]byte, error) {
	return kv.Get(ctx, machine.KSMeta, datasetKeyKey(taskID))
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
	// corpora caches the parsed corpora of scored runs (score.go).
	corpora corpusCache
	// quants keeps the prefixes of inputs' quantized forms for later
	// rounds' stale rule (quantcache.go); nil: off.
	quants *quantCache
	// inputs keeps what commits need of accepted inputs (inputcache.go);
	// nil: off.
	inputs *inputCache

	// finiteHash is the engine's built-in Finite module (builtinFinite).
	finiteOnce sync.Once
	finiteHash wire.Hash
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
	switch {
	case cfg.QuantCacheBytes == 0:
		n.quants = newQuantCache(DefaultQuantCacheBytes)
	case cfg.QuantCacheBytes > 0:
		n.quants = newQuantCache(cfg.QuantCacheBytes)
	}
	switch {
	case cfg.InputCacheBytes == 0:
		n.inputs = newInputCache(DefaultInputCacheBytes)
	case cfg.InputCacheBytes > 0:
		n.inputs = newInputCache(cfg.InputCacheBytes)
	}
	n.w.init()
	n.cw.init(cfg.WatchConcurrency)
	return n, nil
}

// view runs fn over the last committed state.
func (n *Node) view(ctx context.Context, fn func(v machine.View) error) error {
	return n.chain.View(ctx, fn)
}

// load reads a run from the last committed state, with that state's block.
func (n *Node) load(ctx context.Context, task string) (*machine.Run, machine.Block, error) {
	var r *machine.Run
	var blk machine.Block
	err := n.view(ctx, func(v machine.View) error {
		var err error
		r, err = machine.LoadRun(ctx, v.KV, task)
		blk = v.Block
		return err
	})
	return r, blk, err
}

// Info implements Service.
func (n *Node) Info(ctx context.Context) wire.NodeInfo {
	p := n.eng.Profile()
	id, err := n.ChainID(ctx)
	if err != nil {
		n.log.Warn("node info: chain id unreadable", "err", err)
	}
	return wire.NodeInfo{Version: machine.Version, NodeDID: n.cfg.Signer.DID(), Dev: n.cfg.Dev, Role: n.cfg.Role, ChainID: id,
		Engine: wire.EngineSummary{Engine: p.Engine, Hash: p.Hash}}
}

// Balance implements Service.
func (n *Node) Balance(ctx context.Context, d string) (*wire.Balance, error) {
	var b *wire.Balance
	err := n.view(ctx, func(v machine.View) error {
		var err error
		if b, err = machine.Balance(ctx, v.KV, d); err == nil {
			b.Height = v.Block.Height
		}
		return err
	})
	return b, err
}

// ListSyncers implements Service.
func (n *Node) ListSyncers(ctx context.Context) ([]wire.SyncerCandidate, error) {
	var out []wire.SyncerCandidate
	err := n.view(ctx, func(v machine.View) error {
		return v.KV.Scan(ctx, machine.KSMeta, []byte("cand/"), func(_, raw []byte) error {
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
	err := n.view(ctx, func(v machine.View) error {
		tasks, err := machine.RunTasks(ctx, v.KV)
		if err != nil {
			return err
		}
		for _, task := range tasks {
			r, err := machine.LoadRun(ctx, v.KV, task)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// One unreadable run must not hide every other run.
				n.log.Error("listRuns: skipping a run whose stored state does not decode", "task", task, "err", err)
				continue
			}
			if p.Status != "" && p.Status != r.Status {
				continue
			}
			out = append(out, wire.RunSummary{TaskID: r.TaskSpec().TaskID, Status: r.Status, Round: r.Round, Tier: r.TaskSpec().Tier,
				Trainers: r.CountActive(), M: r.TaskSpec().TrainerCount, K: r.TaskSpec().Quorum, Rounds: r.TaskSpec().MaxRounds})
		}
		return nil
	})
	return out, err
}

// GetRun implements Service.
func (n *Node) GetRun(ctx context.Context, task string) (*wire.RunView, error) {
	var out *wire.RunView
	err := n.view(ctx, func(v machine.View) error {
		r, err := machine.LoadRun(ctx, v.KV, task)
		if err != nil {
			return err
		}
		esc, err := machine.AccountBalance(ctx, v.KV, machine.AcctEscrow(task))
		if err != nil {
			return err
		}
		out = r.WireView(esc, v.Block)
		return nil
	})
	return out, err
}

// GetTranscript implements Service: every committed round, in order.
func (n *Node) GetTranscript(ctx context.Context, task string) ([]wire.RoundCommit, error) {
	out := []wire.RoundCommit{}
	err := n.view(ctx, func(v machine.View) error {
		if _, err := machine.LoadRun(ctx, v.KV, task); err != nil {
			return err
		}
		return v.KV.Scan(ctx, machine.KSTranscript, []byte("c/"+task+"/"), func(_, raw []byte) error {
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
	err := n.view(ctx, func(v machine.View) error {
		if _, err := machine.LoadRun(ctx, v.KV, task); err != nil {
			return err
		}
		return v.KV.Scan(ctx, machine.KSTranscript, []byte("s/"+task+"/"), func(_, raw []byte) error {
			var rec machine.Record
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
	v, err := n.blob(ctx, h, uint64(machine.MaxInitWeights), "")
	var fe *fetchError
	switch {
	case errors.Is(err, machine.ErrNotFound):
		return nil, machine.Errf(machine.KindNotFound, "no blob %s", h)
	case errors.As(err, &fe):
		return nil, machine.Errf(machine.KindNotFound, "no blob %s on this node, and no peer gave it: %v", h, err)
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
		var r *machine.Run
		var blk machine.Block
		err := n.view(ctx, func(v machine.View) error {
			var err error
			if r, err = machine.LoadRun(ctx, v.KV, task); err != nil {
				return err
			}
			blk = v.Block
			raw, err := v.KV.Get(ctx, machine.KSReceipts, machine.RunKey(task))
			if errors.Is(err, machine.ErrNotFound) {
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
			return nil, machine.Errf(machine.KindNotFound, "run %s has no receipt yet (status %s, round %d of %d)", task, r.Status, r.Round, r.TaskSpec().MaxRounds)
		}
		select {
		case <-changed:
			continue
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, machine.Errf(machine.KindNotFound, "run %s is sealed (run root %s), awaiting the syncer's signature: %s may sign its receipt at block time %d ms",
				task, r.Seal.RunRoot, r.ReceiptSignerAt(blk.TimeMs), blk.TimeMs)
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
		return nil, machine.Errf(machine.KindNotFound, "run %s has no weights yet: the sponsor has not supplied initial weights", p.TaskID)
	}
	if p.FragmentIndex >= uint64(len(r.Fragments)) {
		return nil, machine.Errf(machine.KindInvalid, "wrong fragment: fragment_index %d, the model has %d fragments", p.FragmentIndex, len(r.Fragments))
	}
	fs := r.Fragments[p.FragmentIndex]
	enc, err := n.blob(ctx, fs.WeightsHash, uint64(machine.MaxInitWeights), "")
	var fe *fetchError
	if errors.As(err, &fe) {
		return nil, machine.Errf(machine.KindNotFound, "weights of fragment %d (%s) are not on this node and no peer gave them: %v", p.FragmentIndex, fs.WeightsHash, err)
	} else if err != nil {
		return nil, fmt.Errorf("weights of fragment %d (%s): %w", p.FragmentIndex, fs.WeightsHash, err)
	}
	return &wire.Weights{TaskID: p.TaskID, Round: r.Round, FragmentIndex: p.FragmentIndex, WeightsHash: fs.WeightsHash, Payload: enc}, nil
}

// blob returns a blob from the local store, or from the network through
// the fetcher (then kept locally), checked against its hash.
func (n *Node) blob(ctx context.Context, h wire.Hash, maxSize uint64, provider string) ([]byte, error) {
	b, err := n.blobs.Get(ctx, h)
	if err == nil || !errors.Is(err, machine.ErrNotFound) || n.cfg.Fetcher == nil {
		return b, err
	}
	b, err = n.cfg.Fetcher.Fetch(ctx, h, maxSize, provider)
	if err != nil {
		return nil, &fetchError{fmt.Errorf("fetch %s: %w", h, err)}
	}
	if got := wire.ContentHash(b); got != h {
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
		return nil, machine.Errf(machine.KindInvalid, "did: %v", err)
	}
	r, _, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	res := &wire.NonceResult{Round: r.Round, ModelHash: r.RoundModel, Nonce: machine.AttestNonce(p.TaskID, p.DID, r.Round, r.RoundAnchor)}
	if r.Status == wire.StatusRunning {
		if t := r.Trainer(p.DID); t != nil && len(t.Shards) > 0 {
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
