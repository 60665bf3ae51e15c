package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// The syncer worker and the candidate daemon, driven by new blocks. For
// every run whose current syncer (by the last block's time) is this node's
// key, the worker computes each due fragment exactly as the protocol says
// (verifiers, aggregation, outer step through the Engine), stores the new
// weights and momentum as blobs and sends the fragment commit; a local
// failure (a killed worker process, a missing blob, a store error) is never
// recorded: the node abstains from that run and retries after a backoff.
// After the seal, the receipt's designated signer signs it. The candidate
// daemon sends this node's election proof for every run awaiting
// enrolment while its key is a registered candidate.

// Abstention backoff after a local failure: first retry after
// abstainFirst, doubling up to abstainMax (wall clock: local, not a rule).
const (
	abstainFirst = time.Second
	abstainMax   = 5 * time.Minute
)

// durableWait bounds how long a read of a blob whose deferred write is
// running waits for its file before it reads the bytes from memory
// (storedBlob): a healthy write ends in well under a second.
var durableWait = 5 * time.Second // a variable for tests (export_test.go)

type abstention struct {
	until time.Time
	delay time.Duration
}

type worker struct {
	mu      sync.Mutex
	runs    map[string]*sync.Mutex // one syncRun per run at a time
	busy    map[string]bool        // runs whose background syncRun is in flight
	abstain map[string]abstention
	proving map[string]bool
	signing map[string]bool
	// replicating: runs whose replication is in flight; held: per run,
	// the weights and momentum blobs this node is known to hold.
	replicating map[string]bool
	held        map[string]map[wire.Hash]bool
	replicaWait map[string]time.Time // retry after a failed fetch
	wake        chan struct{}
	lastLogs    map[string]time.Time
}

func (w *worker) init() {
	w.runs, w.busy, w.abstain = map[string]*sync.Mutex{}, map[string]bool{}, map[string]abstention{}
	w.proving, w.signing, w.lastLogs = map[string]bool{}, map[string]bool{}, map[string]time.Time{}
	w.replicating, w.held, w.replicaWait = map[string]bool{}, map[string]map[wire.Hash]bool{}, map[string]time.Time{}
	w.wake = make(chan struct{}, 1)
}

// poke makes Run look at the chain now.
func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) runLock(task string) *sync.Mutex {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.runs[task]
	if m == nil {
		m = &sync.Mutex{}
		w.runs[task] = m
	}
	return m
}

// plan is what the last committed state asks of this node.
type plan struct {
	commit []string // running runs with a due fragment whose syncer is this node
	prove  []string // awaiting runs this candidate has no proof for
	sign   []string // sealed runs whose receipt this node is to sign
	errs   []error  // runs that cannot be read (skipped)
	// replicate: running runs whose succession names this node, with their
	// fragments' current weights and momentum hashes (replicate.go).
	replicate map[string][]wire.Hash
}

// plan reads the committed state.
func (n *Node) plan(ctx context.Context) (*plan, error) {
	me := n.cfg.Signer.DID()
	out := &plan{}
	err := n.view(ctx, func(v machine.View) error {
		var cand wire.SyncerCandidate
		isCand := false
		if raw, err := v.KV.Get(ctx, machine.KSMeta, machine.CandKey(me)); err == nil {
			isCand = json.Unmarshal(raw, &cand) == nil && !cand.Unbonding
		} else if !errors.Is(err, machine.ErrNotFound) {
			return err
		}
		tasks, err := machine.ActiveTasks(ctx, v.KV)
		if err != nil {
			return err
		}
		for _, task := range tasks {
			// The header first: most blocks ask nothing of most runs, and
			// reading one whole per block would cost more as its round fills.
			r, err := machine.LoadRunHeader(ctx, v.KV, task, false)
			if err != nil {
				out.errs = append(out.errs, fmt.Errorf("run %s cannot be read, skipped: %w", task, err))
				continue
			}
			switch r.Status {
			case wire.StatusAwaiting:
				if !isCand {
					continue
				}
				if _, err := v.KV.Get(ctx, machine.KSMeta, machine.ProofKey(task, me)); errors.Is(err, machine.ErrNotFound) {
					out.prove = append(out.prove, task)
				}
			case wire.StatusRunning:
				if !slices.Contains(r.Succession, me) {
					continue // neither its replicas nor its commits are this node's
				}
				if r, err = machine.LoadRunHeader(ctx, v.KV, task, true); err != nil {
					out.errs = append(out.errs, fmt.Errorf("run %s cannot be read, skipped: %w", task, err))
					continue
				}
				if hs := replicaHashes(r, me); len(hs) > 0 {
					if out.replicate == nil {
						out.replicate = map[string][]wire.Hash{}
					}
					out.replicate[task] = hs
				}
				if s, _ := r.SyncerAt(v.Block.TimeMs); s != me {
					continue
				}
				for _, fs := range r.Fragments {
					if r.Due(fs, v.Block.TimeMs) {
						out.commit = append(out.commit, task)
						break
					}
				}
			}
		}
		return v.KV.Scan(ctx, machine.KSMeta, []byte("unsigned/"), func(k, _ []byte) error {
			task := strings.TrimPrefix(string(k), "unsigned/")
			r, err := machine.LoadRunHeader(ctx, v.KV, task, false)
			if err == nil && r.ReceiptSignerAt(v.Block.TimeMs) == me {
				out.sign = append(out.sign, task)
			}
			return nil
		})
	})
	return out, err
}

// Run drives the worker and the daemon from new blocks until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	// The state this node committed but had not written when it stopped
	// (restore.go), before the worker may need it.
	if _, err := n.RestoreState(ctx); err != nil && ctx.Err() == nil {
		n.log.Error("restore state: the committed state this node lacks could not be re-derived or fetched; commits that need it abstain", "err", err)
	}
	t := time.NewTicker(time.Second) // a fallback: blocks wake it sooner
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait() // runs whose commit is computing stop with ctx
	for {
		changed := n.chain.Changed()
		n.step(ctx, &wg)
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-n.w.wake:
		case <-t.C:
		}
	}
}

// step starts what the last committed state asks for: each in its own
// goroutine, at most one per run and kind at a time, so a slow plugin call
// never holds back another run.
func (n *Node) step(ctx context.Context, wg *sync.WaitGroup) {
	p, err := n.plan(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.logOnce("plan", "syncer worker: reading the chain failed", "err", err)
		}
		return
	}
	start := func(kind string, set map[string]bool, task string, f func(context.Context, string) error) {
		n.w.mu.Lock()
		if set[task] {
			n.w.mu.Unlock()
			return
		}
		set[task] = true
		n.w.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx, task); err != nil && ctx.Err() == nil {
				n.logOnce(kind+" "+task, "syncer worker: "+kind, "task", task, "err", err)
			}
			n.w.mu.Lock()
			delete(set, task)
			n.w.mu.Unlock()
		}()
	}
	for _, task := range p.prove {
		start("election proof", n.w.proving, task, n.sendProof)
	}
	for _, task := range p.commit {
		start("fragment commit", n.w.busy, task, func(ctx context.Context, task string) error {
			_, err := n.syncRun(ctx, task, false)
			return err
		})
	}
	for _, task := range p.sign {
		start("receipt signature", n.w.signing, task, n.signReceipt)
	}
	n.forgetReplicas(p.replicate)
	for task, hs := range p.replicate {
		start("replicate weights", n.w.replicating, task, func(ctx context.Context, task string) error { return n.replicate(ctx, task, hs) })
	}
	n.challengeStep(ctx, wg, false)
}

// Tick does, synchronously, what Run does at a block: election proofs,
// the due fragments' commits and receipt signatures. It returns every
// failure, joined.
func (n *Node) Tick(ctx context.Context) error {
	p, err := n.plan(ctx)
	if err != nil {
		return err
	}
	errs := append([]error(nil), p.errs...)
	for _, task := range p.prove {
		if err := n.sendProof(ctx, task); err != nil {
			errs = append(errs, fmt.Errorf("election proof for %s: %w", task, err))
		}
	}
	for _, task := range p.commit {
		if _, err := n.syncRun(ctx, task, false); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", task, err))
		}
	}
	errs = append(errs, n.challengeStep(ctx, nil, true)...)
	// A commit may have sealed a run: its receipt is signed at once.
	if p, err = n.plan(ctx); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, task := range p.sign {
		if err := n.signReceipt(ctx, task); err != nil {
			errs = append(errs, fmt.Errorf("receipt of %s: %w", task, err))
		}
	}
	return errors.Join(errs...)
}

// logOnce logs a repeating failure at most once a minute per key.
func (n *Node) logOnce(key, msg string, args ...any) {
	n.w.mu.Lock()
	last, seen := n.w.lastLogs[key]
	doLog := !seen || n.now().Sub(last) > time.Minute
	if doLog {
		n.w.lastLogs[key] = n.now()
	}
	n.w.mu.Unlock()
	if doLog {
		n.log.Warn(msg, args...)
	}
}

// sendProof enters this node's candidate into an awaiting run's election.
func (n *Node) sendProof(ctx context.Context, task string) error {
	r, _, err := n.load(ctx, task)
	if err != nil {
		return err
	}
	if r.Status != wire.StatusAwaiting {
		return nil
	}
	me := n.cfg.Signer.DID()
	proof, err := n.cfg.Signer.Prove(ctx, election.Alpha(task, r.SpecHash))
	if err != nil {
		return fmt.Errorf("election proof: %w", err)
	}
	p, err := n.submitSigned(ctx, wire.TxElectionProof, func(nonce uint64) (any, error) {
		sd, err := n.signedFor(ctx, nonce)
		if err != nil {
			return nil, err
		}
		q := wire.ElectionProofParams{TaskID: task, DID: me, Proof: proof, Signed: sd}
		sig, err := n.cfg.Signer.Sign(ctx, q.Preimage())
		q.Signature = sig
		return q, err
	})
	if err != nil {
		return err
	}
	if _, err := p.Wait(ctx); err != nil {
		if machine.KindOf(err) == machine.KindConflict { // the run started or ended meanwhile
			return nil
		}
		return err
	}
	n.log.Info("entered a run's syncer election", "task", task, "candidate", me)
	return nil
}

// signReceipt signs a sealed run's receipt as the chain builds it.
func (n *Node) signReceipt(ctx context.Context, task string) error {
	me := n.cfg.Signer.DID()
	engine, err := json.Marshal(n.eng.Profile())
	if err != nil {
		return err
	}
	var ev *wire.Hash
	if e := n.cfg.Signer.Evidence(); len(e) > 0 {
		h := wire.SHA256(e)
		ev = &h
	}
	var rc *wire.Receipt
	var blob, list, challenges []byte
	if err := n.view(ctx, func(v machine.View) error {
		var err error
		if rc, blob, list, err = machine.ChainReceipt(ctx, v.KV, task, me, engine, ev); err != nil || rc.ChallengeCount == 0 {
			return err
		}
		challenges, err = machine.ChainChallengeList(ctx, v.KV, task)
		return err
	}); err != nil {
		return err
	}
	if rc.ChallengesHash != nil {
		if err := n.blobs.Put(ctx, *rc.ChallengesHash, challenges); err != nil {
			return fmt.Errorf("store the challenge list: %w", err)
		}
	}
	// The receipt commits to its transcript and attestation list by hash:
	// this node keeps both as blobs (getPayload serves them).
	if err := n.blobs.Put(ctx, rc.TranscriptHash, blob); err != nil {
		return fmt.Errorf("store the transcript blob: %w", err)
	}
	if err := n.blobs.Put(ctx, rc.AttestationsHash, list); err != nil {
		return fmt.Errorf("store the attestation list: %w", err)
	}
	pre, err := audit.ReceiptPreimage(rc)
	if err != nil {
		return err
	}
	sig, err := n.cfg.Signer.Sign(ctx, pre)
	if err != nil {
		return fmt.Errorf("sign receipt: %w", err)
	}
	tx := wire.SignReceiptTx{TaskID: task, SyncerDID: me, Engine: engine, EvidenceDigest: ev, Signature: sig}
	if _, err := n.broadcast(ctx, wire.TxSignReceipt, tx, nil); err != nil {
		if machine.KindOf(err) == machine.KindConflict { // signed meanwhile
			return nil
		}
		return err
	}
	n.log.Info("receipt signed", "task", task, "run_root", rc.RunRoot)
	n.announce(ctx, Event{TaskID: task, Kind: "sealed", Round: rc.Rounds, ModelHash: rc.FinalModelHash, Detail: rc.RunRoot})
	return nil
}

func (n *Node) announce(ctx context.Context, ev Event) {
	if n.cfg.Announce != nil {
		n.cfg.Announce(ctx, ev)
	}
}

// computed is one fragment's commit as this node decided it.
type computed struct {
	fragment int
	commit   wire.FragmentCommit
	verdicts []wire.Verdict
}

// snapshot is what computing a run's commits reads from one committed state.
type snapshot struct {
	r       *machine.Run
	blk     machine.Block
	ticket  int
	records map[int]map[string]machine.Record // fragment → DID → record
	// earlier: fragment → earlier round → DID → record, the rounds the
	// stale rule compares with (stale.go).
	earlier map[int]map[uint64]map[string]machine.Record
	// sketches: fragment → older round → DID → sketch, the rounds before
	// those the stale rule compares payloads with (copies.md §7; only with
	// copies.sketch_dim set).
	sketches map[int]map[uint64]map[string][]byte
	claims   map[int][]machine.Claim
	due      []int
	// patient: a payload that cannot be fetched now is a local failure
	// (abstain and retry) rather than a rejected input, because the first
	// half of this syncer's slot has not passed (fetchPatient).
	patient bool
	// store: the new weights and momentum go to the blob store as they
	// are hashed (the syncer's commits; a re-execution only hashes them).
	store bool
	// shards are the trainers' data shards as the round started (a
	// trainer who left since has none in the run): what scoring draws
	// own and control batches from. Nil: the run's current shards.
	shards map[string][]int
}

// shardsOf is a trainer's shards as the round started.
func (s *snapshot) shardsOf(did string) []int {
	if sh, ok := s.shards[did]; ok {
		return sh
	}
	if t := s.r.Trainer(did); t != nil {
		return t.Shards
	}
	return nil
}

// roundShards maps each trainer of run r as round started to its shards.
func roundShards(r *machine.Run) map[string][]int {
	m := make(map[string][]int, len(r.Trainers))
	for _, t := range r.Trainers {
		m[t.DID] = t.Shards
	}
	return m
}

// fetchPatient says whether, at block time t, the syncer in slot k (its
// position among the live entrants, Run.slotOf) still treats a payload it could not fetch as a transient failure: until
// half of its slot of the round (RoundMs + k·D … + (k+1)·D, D the round
// deadline) has passed. A receiving node that restarts or a connection
// that drops then costs a retry, not a trainer's input; a payload that
// nobody gives for half a slot is rejected as unavailable, and the commit
// still lands within the slot.
func fetchPatient(r *machine.Run, k int, t int64) bool {
	d := r.TaskSpec().RoundDeadline()
	return t < r.RoundMs+int64(k)*d+d/2
}

// syncRun commits every fragment of task that is due at the last block,
// when this node's key is the run's current syncer. It returns how many
// commits the chain accepted. One call per run at a time: with wait false
// it returns at once when another is in flight.
func (n *Node) syncRun(ctx context.Context, task string, wait bool) (int, error) {
	lock := n.w.runLock(task)
	if wait {
		lock.Lock()
	} else if !lock.TryLock() {
		return 0, nil
	}
	defer lock.Unlock()
	n.w.mu.Lock()
	a, abstaining := n.w.abstain[task]
	n.w.mu.Unlock()
	if abstaining && n.now().Before(a.until) {
		return 0, nil
	}
	s, err := n.snapshot(ctx, task)
	if err != nil || s == nil || len(s.due) == 0 {
		return 0, err
	}
	var out []*computed
	for _, i := range s.due {
		c, err := n.computeCommit(ctx, s, i)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			n.abstainFrom(task, a, fmt.Errorf("fragment %d: %w", i, err))
			return 0, nil
		}
		n.applyFault(s.r.Round, c, s.r.TaskSpec().Quorum)
		n.withholdFault(s.r.Round, c)
		out = append(out, c)
	}
	if abstaining {
		n.w.mu.Lock()
		delete(n.w.abstain, task)
		n.w.mu.Unlock()
	}
	// The new weights and momentum were hashed as computeCommit copied
	// them into the blob store's memory: any node may fetch them by hash
	// now, from memory until their durable write (started then, not
	// awaited) ends. A crash before it ends is RestoreState's.
	me := n.cfg.Signer.DID()
	pend := make([]machine.Pending, len(out))
	for k, c := range out {
		p, err := n.submitSigned(ctx, wire.TxCommitFragment, func(nonce uint64) (any, error) {
			sd, err := n.signedFor(ctx, nonce)
			if err != nil {
				return nil, err
			}
			tx := wire.CommitFragmentTx{TaskID: task, Round: s.r.Round, Fragment: uint64(c.fragment), Commit: c.commit, Verdicts: c.verdicts,
				SyncerDID: me, Signed: sd}
			canon, err := machine.CommitJCS(&tx.Commit)
			if err != nil {
				return nil, err
			}
			tx.Signature, err = n.cfg.Signer.Sign(ctx, tx.Preimage(canon))
			return tx, err
		})
		if err != nil {
			return k, fmt.Errorf("commit of fragment %d: %w", c.fragment, err)
		}
		pend[k] = p
	}
	ok := 0
	var errs []error
	for k, p := range pend {
		c := out[k]
		res, err := p.Wait(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("commit of fragment %d refused: %w", c.fragment, err))
			continue
		}
		ok++
		var cr wire.CommitFragmentResult
		_ = json.Unmarshal(res.Data, &cr)
		n.log.Info("fragment committed", "task", task, "round", s.r.Round, "fragment", c.fragment, "status", c.commit.Status,
			"inputs", len(c.commit.Inputs), "weights", c.commit.WeightsAfter.String()[:12], "height", res.Height)
		if o := n.cfg.Observer; o != nil {
			o.FragmentCommitted(task, s.r.Round, c.fragment, c.commit.Status, time.Duration(s.blk.TimeMs-s.r.RoundMs)*time.Millisecond)
			if cr.RoundClosed {
				o.RoundCommitted(task, s.r.Round)
			}
		}
		if cr.RoundClosed {
			n.announce(ctx, Event{TaskID: task, Kind: "round_committed", Round: s.r.Round})
		}
	}
	return ok, errors.Join(errs...)
}

// snapshot reads what syncRun needs (nil when this node has nothing to do).
func (n *Node) snapshot(ctx context.Context, task string) (*snapshot, error) {
	me := n.cfg.Signer.DID()
	var s *snapshot
	err := n.view(ctx, func(v machine.View) error {
		r, err := machine.LoadRun(ctx, v.KV, task)
		if err != nil {
			return err
		}
		if r.Status != wire.StatusRunning {
			return nil
		}
		who, k := r.SyncerAt(v.Block.TimeMs)
		if who != me {
			return nil
		}
		s = &snapshot{r: r, blk: v.Block, ticket: k, records: map[int]map[string]machine.Record{}, claims: map[int][]machine.Claim{},
			earlier: map[int]map[uint64]map[string]machine.Record{}, sketches: map[int]map[uint64]map[string][]byte{},
			patient: fetchPatient(r, r.SlotOf(k), v.Block.TimeMs), store: true}
		if r.Scorer != nil {
			// Score batches come from the shards as the round started
			// (re-execution reads the run as it started).
			if sr, err := machine.RoundStart(ctx, v.KV, task, r.Round); err == nil {
				s.shards = roundShards(sr)
			}
		}
		for i, fs := range r.Fragments {
			if !r.Due(fs, v.Block.TimeMs) {
				continue
			}
			if r.Scorer != nil && fs.ScoreSeed == nil {
				continue // the chain draws the scoring seed at the next block
			}
			s.due = append(s.due, i)
			recs := map[string]machine.Record{}
			err := v.KV.Scan(ctx, machine.KSTranscript, machine.RecordPrefix(task, r.Round, i), func(_, raw []byte) error {
				var rec machine.Record
				if err := json.Unmarshal(raw, &rec); err != nil {
					return fmt.Errorf("record of %s fragment %d: %w", task, i, err)
				}
				recs[rec.TrainerDID] = rec
				return nil
			})
			if err != nil {
				return err
			}
			s.records[i] = recs
			if s.earlier[i], err = earlierRecords(ctx, v.KV, task, r.Round, i); err != nil {
				return err
			}
			if r.TaskSpec().SketchDim() > 0 {
				if s.sketches[i], err = machine.EarlierSketches(ctx, v.KV, task, r.Round, i); err != nil {
					return err
				}
			}
			if s.claims[i], err = machine.FragmentClaims(ctx, v.KV, task, r.Round, i); err != nil {
				return err
			}
		}
		return nil
	})
	return s, err
}

// errLocal marks a failure of this node (a blob it cannot read, a plugin
// host that died): the node abstains, the chain records nothing.
type errLocal struct{ error }

// computeCommit decides fragment i's commit. Every payload-dependent fact
// is re-checked here (the receiving node's checks are not trusted): a
// payload that cannot be had, does not hash, parse or decode, fails a
// verifier, or whose evidence fails the run's policy is an input with
// "rejected" set to why. The kept inputs, the weights and the momentum go
// to the engine's one Finalize (syncer.RunFinalize's rules), read in place
// from the blob store; the new weights and momentum are hashed once, as
// they are written: into the blob store when s.store is set (the syncer),
// else only hashed (re-execution). Rules' deterministic failures are
// recorded; any other failure is local and returned.
func (n *Node) computeCommit(ctx context.Context, s *snapshot, i int) (*computed, error) {
	r := s.r
	fs := r.Fragments[i]
	fc := machine.BaseCommit(r, i)
	fc.Syncer, fc.Ticket = n.cfg.Signer.DID(), uint64(s.ticket)
	fc.Inputs = machine.RecordInputs(fs.Records)
	var releases []func()
	defer func() {
		for _, rel := range releases {
			rel()
		}
	}()
	var values []Values
	var idx []int // fc.Inputs index of each of values
	phases := commitPhases{on: s.store}
	if o, ok := n.cfg.Observer.(ComputeObserver); ok && s.store {
		defer phases.report(o)
	}
	phases.start(PhaseVerify)
	// What this node computed of each input when it accepted it
	// (inputcache.go) spares the checks it answers; a re-execution runs
	// cold (lk zero: no lookup).
	var lk, vk wire.Hash
	if s.store && n.inputs != nil {
		lk, vk = layoutKey(r, fs), verifiersKey(r)
	}
	qs := newCommitQuant(fs, len(fc.Inputs))
	for j := range fc.Inputs {
		in := &fc.Inputs[j]
		rec, ok := s.records[i][in.TrainerDID]
		if !ok {
			return nil, fmt.Errorf("record of %s missing from the state", in.TrainerDID)
		}
		known := n.inputs.get(rec.PayloadHash, lk)
		v, release, fuel, why, err := n.checkInput(ctx, r, fs, &rec, s.patient, known.skips(&rec, vk), qs, j)
		if err != nil {
			return nil, err
		}
		if release != nil {
			releases = append(releases, release)
		}
		fc.Fuel += fuel
		if why != "" {
			in.Rejected = why
			continue
		}
		if known != nil && known.quantDone {
			qs.seed[j] = known
		}
		values = append(values, v)
		idx = append(idx, j)
	}
	// The copy rule (copies.go): a later input pointing the way of an
	// earlier one is rejected as its copy, before round-level verifiers
	// (inside Finalize) see the inputs kept.
	// Each input is quantized once (commitQuant), for both rules and the
	// sketch; the quantCache keeps what a later round's stale rule needs.
	phases.start(PhaseCopyStale)
	if s.store {
		defer n.quants.keep(r, fs, s.records[i], fc, qs)
	}
	values, idx, err := n.applyCopyRule(s, i, fc, values, idx, qs)
	if err != nil {
		return nil, err
	}
	// The stale rule (stale.go): a kept input replaying the same trainer's
	// input of one of the rounds before is rejected too.
	if values, idx, err = n.applyStaleRule(ctx, s, i, fc, values, idx, qs); err != nil {
		return nil, err
	}
	phases.start(PhaseFinalize)
	c := &computed{fragment: i}
	if c.verdicts, err = n.verdicts(ctx, r, fs, s.claims[i]); err != nil {
		return nil, err
	}
	o := r.TaskSpec().Outer()
	fin := FinalizeInput{Rule: r.Rule, Outer: r.Outer, Verifiers: r.Verifiers, Dtype: fs.Dtype, N: int(fs.N), Quorum: r.TaskSpec().Quorum,
		Inputs: values, LR: o.LR, Beta: o.Momentum, Nesterov: o.Nesterov}
	if len(values) < r.TaskSpec().Quorum && (len(values) == 0 || !hasRoundVerifiers(r)) {
		// No quorum, and no verifier to run: the weights are not needed
		// (nor fetched), and no step runs.
		out, err := RunFinalize(ctx, fin, nil)
		if err != nil {
			return nil, err
		}
		fc.Status, fc.Reason = out.Status, out.Reason
		c.commit = *fc
		return c, nil
	}
	w, release, err := n.storedValues(ctx, fs.WeightsHash, fs.Tensors)
	if err != nil {
		return nil, fmt.Errorf("weights %s: %w", fs.WeightsHash, err)
	}
	releases = append(releases, release)
	fin.Weights = w
	if !fs.MomentumHash.IsZero() {
		m, release, err := n.storedValues(ctx, fs.MomentumHash, nil)
		if err != nil {
			return nil, fmt.Errorf("momentum %s: %w", fs.MomentumHash, err)
		}
		releases = append(releases, release)
		fin.Momentum = &m
	}
	// The new weights' file is their header and the values (when the
	// layout is in the file's order): the engine may hash both new blobs
	// as it computes them, and writeState need not read them to hash.
	// (A layout FragmentHeader refuses is left to writeState, which fails
	// on it as before.)
	header, whole, err := FragmentHeader(fs.Tensors, int64(fs.N)*int64(fs.Dtype.Size()))
	whole = whole && err == nil
	if whole {
		fin.WeightsHeader = header
	}
	fin.Write = func(weights, momentum []byte, known *StateHashes) error {
		phases.start(PhaseWrite)
		defer phases.start(PhaseFinalize)
		if known != nil && !whole {
			known = nil // not asked for: not trusted
		}
		return n.writeState(ctx, s.store, &fs.FragLayout, header, weights, momentum, known, fc)
	}
	if bh, ok := n.blobs.(blobHolder); ok && whole && s.store {
		// A store that takes the bytes as they are: an engine that can
		// give its new state away (a worker's arena) hands it over.
		fin.Hold = func(weightsBlob, momentum []byte, known StateHashes, release func()) error {
			phases.start(PhaseWrite)
			defer phases.start(PhaseFinalize)
			return holdState(ctx, bh, weightsBlob, momentum, known, release, fc)
		}
	}
	out, err := n.eng.Finalize(ctx, fin)
	if err != nil {
		return nil, err
	}
	fc.Fuel += out.Fuel
	for j, k := range idx {
		if out.Rejected[j] != "" {
			fc.Inputs[k].Rejected = out.Rejected[j]
		}
		fc.Inputs[k].Selected = out.Selected[j]
	}
	fc.Status, fc.Reason, fc.AggregateHash = out.Status, out.Reason, out.AggregateHash
	// Scores (score.go): after the copy rule, the verifiers and the
	// aggregation, of the kept inputs the chain's draw picked.
	if r.Scorer != nil {
		phases.start(PhaseScore)
	}
	if err := n.scoreInputs(ctx, s, i, fc, values, idx); err != nil {
		return nil, err
	}
	c.commit = *fc
	return c, nil
}

// commitPhases times a commit's compute phases (ComputeObserver): start
// ends the running phase and starts the next.
type commitPhases struct {
	on    bool
	cur   string
	since time.Time
	d     map[string]time.Duration
}

func (p *commitPhases) start(phase string) {
	if !p.on {
		return
	}
	now := time.Now()
	if p.cur != "" {
		if p.d == nil {
			p.d = map[string]time.Duration{}
		}
		p.d[p.cur] += now.Sub(p.since)
	}
	p.cur, p.since = phase, now
}

// report ends the running phase and reports each phase that ran.
func (p *commitPhases) report(o ComputeObserver) {
	p.start("")
	for _, ph := range ComputePhases {
		if d, ok := p.d[ph]; ok {
			o.CommitCompute(ph, d)
		}
	}
}

// commitQuant holds one commit's quantized inputs (copies.md §2), by
// fc.Inputs index, each computed at most once: the copy rule, the stale
// rule and the sketch share them.
type commitQuant struct {
	fs   *machine.RunFragment
	done []bool
	q    []*quantized // nil when done: not finite
	// seed: the read pass made when the input was accepted (inputcache.go),
	// continued over the values instead of read again.
	seed []*inputFacts
}

func newCommitQuant(fs *machine.RunFragment, inputs int) *commitQuant {
	return &commitQuant{fs: fs, done: make([]bool, inputs), q: make([]*quantized, inputs), seed: make([]*inputFacts, inputs)}
}

// set makes q input j's quantized values (a read pass made while checking
// it).
func (c *commitQuant) set(j int, q *quantized) {
	c.q[j], c.done[j] = q, true
}

// of returns input j's quantized values v (nil: a value is not finite).
func (c *commitQuant) of(j int, v Values, rule string) (*quantized, error) {
	if f := c.seed[j]; !c.done[j] && f != nil && (f.q == nil || f.q.complete()) {
		if f.q != nil {
			c.q[j] = f.q.resume(nil)
		}
		c.done[j] = true
	}
	if !c.done[j] {
		size := c.fs.N * int64(c.fs.Dtype.Size())
		b, ok := v.inPlace(size)
		if !ok {
			var err error
			if b, err = v.Bytes(size); err != nil {
				return nil, errLocal{fmt.Errorf("%s: input %d: %w", rule, j, err)}
			}
		}
		if f := c.seed[j]; f != nil {
			c.q[j] = f.q.resume(b)
		} else if q, ok := quantizeLazy(b, c.fs.Dtype, int(c.fs.N)); ok {
			c.q[j] = &q
		}
		c.done[j] = true
	}
	return c.q[j], nil
}

// applyCopyRule runs the copy rule (markCopies) over fragment i's kept
// inputs, values[k] being fc.Inputs[idx[k]]'s, and returns the values and
// indices of the inputs it left kept.
func (n *Node) applyCopyRule(s *snapshot, i int, fc *wire.FragmentCommit, values []Values, idx []int, qs *commitQuant) ([]Values, []int, error) {
	ppm := s.r.TaskSpec().CopyThresholdPpm()
	if ppm >= wire.CopyRuleOff || len(values) < 2 {
		return values, idx, nil
	}
	all := make([]*quantized, len(fc.Inputs))
	for k, v := range values {
		q, err := qs.of(idx[k], v, "copy rule")
		if err != nil {
			return nil, nil, err
		}
		all[idx[k]] = q
	}
	heights := make([]int64, len(fc.Inputs))
	for j, in := range fc.Inputs {
		heights[j] = s.records[i][in.TrainerDID].Height
	}
	markCopiesQ(fc.Inputs, all, heights, ppm)
	var keptV []Values
	var keptIdx []int
	for k, j := range idx {
		if fc.Inputs[j].Rejected == "" {
			keptV, keptIdx = append(keptV, values[k]), append(keptIdx, j)
		}
	}
	return keptV, keptIdx, nil
}

// writeState hashes a fragment's new weights (their canonical safetensors
// file) and momentum as they are written — to the blob store when store is
// set — each once, the two at the same time, and sets fc's hashes. A file
// store takes them as deferred writes (blobWriterAfter): they are copied
// into memory as they are hashed and readable at once, and their durable
// write ends after this returns, off the commit's critical path
// (restore.go says what a crash in between costs). When the engine hashed
// them already (known: the weights' file being header and the values),
// they are not hashed again: a store that takes bytes of a known hash
// (blobWriterHashed) only copies them.
func (n *Node) writeState(ctx context.Context, store bool, fl *machine.FragLayout, header, weights, momentum []byte, known *StateHashes, fc *wire.FragmentCommit) error {
	// write stores one blob: parts are its bytes, put writes them; known,
	// when set, is their hash, which is then not computed again.
	write := func(known *wire.Hash, size func() (int64, error), put func(io.Writer) error, parts ...[]byte) (wire.Hash, error) {
		if known != nil {
			if !store {
				return *known, nil
			}
			if hw, ok := n.blobs.(blobWriterHashed); ok {
				if err := hw.WriteBlobHashed(ctx, *known, parts...); err != nil {
					return wire.Hash{}, err
				}
				return *known, nil
			}
		}
		if !store {
			h := wire.NewContentHasher()
			if err := put(h); err != nil {
				return wire.Hash{}, err
			}
			return h.Sum(), nil
		}
		if bw, ok := n.blobs.(blobWriterAfter); ok {
			sz, err := size()
			if err != nil {
				return wire.Hash{}, err
			}
			return bw.WriteBlobAfter(ctx, sz, put)
		}
		if bw, ok := n.blobs.(blobWriter); ok {
			return bw.WriteBlob(ctx, int64(machine.MaxInitWeights), put)
		}
		var buf bytes.Buffer
		if err := put(&buf); err != nil {
			return wire.Hash{}, err
		}
		h := wire.ContentHash(buf.Bytes())
		return h, n.blobs.Put(ctx, h, buf.Bytes())
	}
	var wKnown, mKnown *wire.Hash
	if known != nil {
		wKnown, mKnown = &known.Weights, &known.Momentum
	}
	var wg sync.WaitGroup
	var mErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		fc.MomentumAfter, mErr = write(mKnown, func() (int64, error) { return int64(len(momentum)), nil },
			func(w io.Writer) error { _, err := w.Write(momentum); return err }, momentum)
	}()
	// The weights file's size: its header and the values (counted by
	// io.Discard, not read).
	weightsSize := func() (int64, error) { return WriteFragment(io.Discard, fl.Tensors, weights) }
	var wErr error
	fc.WeightsAfter, wErr = write(wKnown, weightsSize,
		func(w io.Writer) error { _, err := WriteFragment(w, fl.Tensors, weights); return err }, header, weights)
	wg.Wait()
	if wErr != nil {
		return fmt.Errorf("store new weights: %w", wErr)
	}
	if mErr != nil {
		return fmt.Errorf("store new momentum: %w", mErr)
	}
	return nil
}

// holdState stores a fragment's new state that the engine hashed and
// hands over (FinalizeInput.Hold): the weights blob and the momentum
// become pending blobs as they are, not copied, and release is called
// once the store no longer needs either. It sets fc's hashes as
// writeState does.
func holdState(ctx context.Context, bh blobHolder, weightsBlob, momentum []byte, known StateHashes, release func(), fc *wire.FragmentCommit) error {
	var left atomic.Int32
	left.Store(2)
	part := func() {
		if left.Add(-1) == 0 {
			release()
		}
	}
	// One after the other: each is a map entry and a started write
	// (unless the store must write before returning: then the second
	// waits for the first, a path taken only past the store's memory cap
	// or on a failing disk).
	var err error
	if fc.WeightsAfter, err = hold(ctx, bh, known.Weights, weightsBlob, part); err != nil {
		part() // the momentum is not handed over
		return fmt.Errorf("store new weights: %w", err)
	}
	if fc.MomentumAfter, err = hold(ctx, bh, known.Momentum, momentum, part); err != nil {
		return fmt.Errorf("store new momentum: %w", err)
	}
	return nil
}

// hold hands b, of hash h, to the store (release: see HoldBlobHashed).
func hold(ctx context.Context, bh blobHolder, h wire.Hash, b []byte, release func()) (wire.Hash, error) {
	if err := bh.HoldBlobHashed(ctx, h, b, release); err != nil {
		return wire.Hash{}, err
	}
	return h, nil
}

// blobFiles is a blob store of files that checks every blob's hash as it
// is written and never changes a stored file (store.Blobs): its blobs are
// read mapped and in place, not hashed again, and the engine's worker opens
// them by path.
type blobFiles interface {
	BlobMapper
	Path(h wire.Hash) string
}

// blobWriter stores a blob whose hash is known only once it is written
// (store.Blobs.WriteBlob).
type blobWriter interface {
	WriteBlob(ctx context.Context, limit int64, write func(io.Writer) error) (wire.Hash, error)
}

// blobWriterAfter stores a blob as a deferred write: hashed as it is
// copied into memory, readable at once, durable later
// (store.Blobs.WriteBlobAfter).
type blobWriterAfter interface {
	WriteBlobAfter(ctx context.Context, size int64, write func(io.Writer) error) (wire.Hash, error)
}

// blobWriterHashed stores a blob of a hash the caller computed as it
// produced the bytes, as a deferred write (store.Blobs.WriteBlobHashed).
type blobWriterHashed interface {
	WriteBlobHashed(ctx context.Context, h wire.Hash, parts ...[]byte) error
}

// blobHolder stores a blob of a hash the caller computed from bytes it
// hands over, as a deferred write, and calls release once it no longer
// needs them (store.Blobs.HoldBlobHashed).
type blobHolder interface {
	HoldBlobHashed(ctx context.Context, h wire.Hash, b []byte, release func()) error
}

// blobDurability says whether a blob's deferred write is running and
// waits for it (store.Blobs.Pending, Durable).
type blobDurability interface {
	Pending(h wire.Hash) bool
	Durable(ctx context.Context, h wire.Hash) error
}

// storedBlob returns the blob h (fetched when this node lacks it) and the
// function that releases it; checked says its hash was checked already
// (this node's file store checked it as it was written, or it was fetched
// and checked now); path is its file when the store has files.
// A blob whose deferred write is still running (the state this node
// committed last) is waited for, so that its file can be opened by path (the engine's worker
// maps it): the next commit that reads it comes a round later, long after
// the write ended. When that write keeps failing, the bytes in memory are
// returned without a path (the engine copies them).
func (n *Node) storedBlob(ctx context.Context, h wire.Hash, maxSize uint64, provider string) (b []byte, release func(), checked bool, path string, err error) {
	bf, files := n.blobs.(blobFiles)
	if files {
		onDisk := true
		if d, ok := n.blobs.(blobDurability); ok && d.Pending(h) {
			wait, cancel := context.WithTimeout(ctx, durableWait)
			err := d.Durable(wait, h)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil, nil, false, "", ctx.Err()
				}
				n.log.Warn("blob write not durable yet; reading it from memory", "hash", h, "err", err)
				onDisk = false
			}
		}
		b, release, err := loadBlob(ctx, n.blobs, h)
		if err == nil {
			if !onDisk {
				return b, release, true, "", nil
			}
			return b, release, true, bf.Path(h), nil
		}
		if !errors.Is(err, machine.ErrNotFound) {
			return nil, nil, false, "", err
		}
	} else if b, err = n.blobs.Get(ctx, h); err == nil {
		return b, func() {}, false, "", nil
	} else if !errors.Is(err, machine.ErrNotFound) {
		return nil, nil, false, "", err
	}
	// Not stored here: fetched, checked and stored by n.blob.
	if b, err = n.blob(ctx, h, maxSize, provider); err != nil {
		return nil, nil, false, "", err
	}
	if files {
		path = bf.Path(h)
	}
	return b, func() {}, true, path, nil
}

// inputValues is a payload's values of fragment fs as the run reads them:
// the fragment's tensors read in place from a safetensors payload (path:
// its file, for the engine's worker), or what the run's codec decodes.
// flat is the values in one slice when they are one (one range in place,
// or decoded; else nil), fuel the decode's. computeCommit's checkInput and
// RestoreState's re-execution read kept inputs through it.
func inputValues(ctx context.Context, eng Engine, r *machine.Run, fs *machine.RunFragment, payload []byte, path string) (v Values, flat []byte, fuel uint64, err error) {
	if r.Codec == nil {
		v, err = TensorValues(memReader(payload), int64(len(payload)), path, fs.Tensors)
		if err == nil && len(v.Ranges) == 1 {
			flat = payload[v.Ranges[0].Off : v.Ranges[0].Off+v.Ranges[0].Len]
		}
		return v, flat, 0, err
	}
	flat, fuel, err = payloadValues(ctx, eng, r.Codec, &fs.FragLayout, payload)
	return BytesValues(flat), flat, fuel, err
}

// storedValues is a stored blob's values read in place: the fragment's
// tensors of a safetensors file (the weights), or the whole blob (tensors
// nil: the momentum, raw f32).
func (n *Node) storedValues(ctx context.Context, h wire.Hash, tensors []wire.TensorInfo) (Values, func(), error) {
	b, release, _, path, err := n.storedBlob(ctx, h, uint64(machine.MaxInitWeights), "")
	if err != nil {
		return Values{}, nil, err
	}
	if tensors == nil {
		return Values{R: memReader(b), Path: path, Ranges: []ByteRange{{Off: 0, Len: int64(len(b))}}}, release, nil
	}
	v, err := TensorValues(memReader(b), int64(len(b)), path, tensors)
	if err != nil {
		release()
		return Values{}, nil, err
	}
	return v, release, nil
}

// checkInput re-checks one record's payload: it returns the payload's
// values (read in place, valid until release), the decode fuel, or why the
// input is rejected; err is local. With patient set, a payload the network
// did not give is a local failure too (fetchPatient).
// skip names the checks already known to pass (the input cache); a read
// pass over an accepted input's values made here is kept as qs's input j.
func (n *Node) checkInput(ctx context.Context, r *machine.Run, fs *machine.RunFragment, rec *machine.Record, patient bool, skip inputSkips, qs *commitQuant, j int) (Values, func(), uint64, string, error) {
	payload, release, checked, path, err := n.storedBlob(ctx, rec.PayloadHash, rec.PayloadSize, rec.Provider)
	if err != nil {
		var fe *fetchError
		if ctx.Err() == nil && (errors.Is(err, machine.ErrNotFound) || errors.As(err, &fe)) {
			if patient {
				return Values{}, nil, 0, "", fmt.Errorf("payload %s of %s not fetched yet (retrying until half the slot has passed): %w", rec.PayloadHash, rec.TrainerDID, err)
			}
			return Values{}, nil, 0, fmt.Sprintf("payload unavailable: %v", err), nil
		}
		return Values{}, nil, 0, "", err // this node's store: a local failure
	}
	reject := func(fuel uint64, why string) (Values, func(), uint64, string, error) {
		release()
		return Values{}, nil, fuel, why, nil
	}
	fail := func(err error) (Values, func(), uint64, string, error) {
		release()
		return Values{}, nil, 0, "", err
	}
	if uint64(len(payload)) != rec.PayloadSize {
		return reject(0, fmt.Sprintf("payload is %d bytes, the record says %d", len(payload), rec.PayloadSize))
	}
	if !checked {
		if got := wire.ContentHash(payload); got != rec.PayloadHash {
			return reject(0, fmt.Sprintf("payload hashes to %s, the record says %s", got, rec.PayloadHash))
		}
	}
	// flat: the values in one slice, for per-submission verifiers
	v, flat, fuel, err := inputValues(ctx, n.eng, r, fs, payload, path)
	if err != nil {
		var rf *RuleFailure
		if ctx.Err() != nil || (!errors.As(err, &rf) && isHostFailure(err)) {
			return fail(err)
		}
		return reject(fuel, fmt.Sprintf("gradient_payload: %v", err))
	}
	if !skip.binding {
		if err := checkPayloadBinding(payload, rec.TaskID, rec.TrainerDID, rec.Round, rec.FragmentIndex); err != nil {
			return reject(fuel, err.Error())
		}
	}
	var read *quantized
	if hasSubmissionVerifiers(r) && !skip.verifiers {
		if flat == nil {
			if flat, err = v.Bytes(fs.N * int64(fs.Dtype.Size())); err != nil {
				return fail(err)
			}
		}
		// The copy rule's read pass, made now, is also the Finite scan
		// (one read of the values instead of two); it goes to qs below.
		var finite bool
		read, finite = readPass(r, fs, flat)
		if err := n.verifyPayload(ctx, r, fs, flat, finite); err != nil {
			if machine.KindOf(err) == machine.KindInvalid {
				return reject(fuel, err.Error())
			}
			return fail(err)
		}
	}
	if r.TaskSpec().Tier != wire.TierOpen {
		why, err := n.recheckEvidence(ctx, r, rec)
		if err != nil {
			return fail(err)
		}
		if why != "" {
			return reject(fuel, why)
		}
	}
	if read != nil {
		qs.set(j, read)
	}
	return v, release, fuel, "", nil
}

// hasRoundVerifiers says whether the run has round-level verifiers.
func hasRoundVerifiers(r *machine.Run) bool {
	for _, v := range r.Verifiers {
		if v.RoundLevel {
			return true
		}
	}
	return false
}

// hasSubmissionVerifiers says whether the run has verifiers that judge
// each submission alone.
func hasSubmissionVerifiers(r *machine.Run) bool {
	for _, v := range r.Verifiers {
		if !v.RoundLevel {
			return true
		}
	}
	return false
}

// isHostFailure tells a failure of the plugin host (local) from a payload
// that does not parse or decode (the payload's fault).
func isHostFailure(err error) bool { return errors.Is(err, ErrLocal) }

// recheckEvidence checks a record's evidence as the receiving node did.
func (n *Node) recheckEvidence(ctx context.Context, r *machine.Run, rec *machine.Record) (string, error) {
	if rec.Evidence == nil {
		return "evidence missing", nil
	}
	if n.cfg.Attestor == nil {
		return "", fmt.Errorf("this node has no attestor to check %s's evidence", rec.TrainerDID)
	}
	raw := rec.Evidence.Claim
	if len(raw) == 0 {
		return "evidence missing: the record carries no claim", nil
	}
	shard := uint64(0)
	if t := r.Trainer(rec.TrainerDID); t != nil && len(t.Shards) > 0 {
		shard = uint64(t.Shards[0])
	}
	ref, err := n.checkEvidence(ctx, r, raw, rec.TrainerDID, shard, r.RoundModel, rec.PayloadHash)
	if err != nil {
		if machine.KindOf(err) == machine.KindInternal {
			return "", err
		}
		return fmt.Sprintf("evidence: %v", err), nil
	}
	if ref.Digest != rec.Evidence.Digest {
		return fmt.Sprintf("evidence digest %s, the record says %s", ref.Digest, rec.Evidence.Digest), nil
	}
	return "", nil
}

// verdicts judges a fragment's equivocation claims (in DID order): both
// payloads decoding to the same values is a duplicate, different values
// an equivocation; a payload that cannot be had leaves it unavailable.
func (n *Node) verdicts(ctx context.Context, r *machine.Run, fs *machine.RunFragment, claims []machine.Claim) ([]wire.Verdict, error) {
	out := []wire.Verdict{}
	for _, c := range claims {
		v := wire.Verdict{TrainerDID: c.First.TrainerDID, Verdict: wire.VerdictUnavailable}
		var vals [2][]byte
		okBoth := true
		for k, rec := range []machine.Record{c.First, c.Second} {
			p, err := n.blob(ctx, rec.PayloadHash, rec.PayloadSize, rec.Provider)
			if err != nil || wire.ContentHash(p) != rec.PayloadHash {
				okBoth = false
				break
			}
			if vals[k], _, err = payloadValues(ctx, n.eng, r.Codec, &fs.FragLayout, p); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				vals[k] = append([]byte("undecodable:"), p...)
			}
		}
		if okBoth {
			v.Verdict = wire.VerdictEquivocation
			if bytes.Equal(vals[0], vals[1]) {
				v.Verdict = wire.VerdictDuplicate
			}
		}
		out = append(out, v)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].TrainerDID < out[b].TrainerDID })
	return out, nil
}

// abstainFrom records a local failure: the run is not finalized now, and
// the node retries after a backoff. Nothing is recorded on chain.
func (n *Node) abstainFrom(task string, prev abstention, err error) {
	d := abstainFirst
	if prev.delay > 0 {
		d = min(2*prev.delay, abstainMax)
	}
	n.w.mu.Lock()
	n.w.abstain[task] = abstention{until: n.now().Add(d), delay: d}
	n.w.mu.Unlock()
	n.log.Warn("abstaining from finalizing after a local failure; nothing recorded, retrying later", "task", task, "retry_in", d, "err", err)
}

// FinalizeRound implements Service: signed by the run's current syncer and
// sent to the node that holds its key, it commits now what is due now (the
// worker would at the next block) and says, per fragment, why the rest is
// not: a fragment with K records waits for every active trainer or the end
// of its grace window, which it cannot shorten.
func (n *Node) FinalizeRound(ctx context.Context, p *wire.FinalizeParams) (*wire.FinalizeResult, error) {
	if p.TaskID == "" {
		return nil, machine.Errf(machine.KindInvalid, "task_id is empty")
	}
	if _, err := did.Parse(p.SyncerDID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "syncer_did: %v", err)
	}
	r, blk, err := n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusRunning {
		return nil, machine.Errf(machine.KindConflict, "run %s is %s, not running", p.TaskID, r.Status)
	}
	if want, _ := r.SyncerAt(blk.TimeMs); p.SyncerDID != want {
		return nil, machine.Errf(machine.KindUnauthorized, "finalizeRound must be signed by run %s's elected syncer %s, not %s", p.TaskID, want, p.SyncerDID)
	}
	if err := did.Verify(p.SyncerDID, p.Preimage(), p.Signature); err != nil {
		return nil, machine.Errf(machine.KindUnauthorized, "bad signature: does not verify against %s", p.SyncerDID)
	}
	if p.Round != r.Round {
		return nil, machine.Errf(machine.KindConflict, "wrong round: finalizeRound is for round %d, the current round of %s is %d", p.Round, p.TaskID, r.Round)
	}
	if me := n.cfg.Signer.DID(); p.SyncerDID != me {
		return nil, machine.Errf(machine.KindConflict, "run %s's syncer %s does not run on this node (this node's key is %s): send finalizeRound to that syncer's node", p.TaskID, p.SyncerDID, me)
	}
	round := r.Round
	_, syncErr := n.syncRun(ctx, p.TaskID, true)
	r, blk, err = n.load(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	res := &wire.FinalizeResult{TaskID: p.TaskID, Round: round, Status: r.Status, Height: blk.Height, Fragments: []wire.FragmentStatus{}}
	res.Advanced = r.Round != round || r.Status != wire.StatusRunning
	if r.Seal != nil && !r.Seal.Signed && r.ReceiptSignerAt(blk.TimeMs) == p.SyncerDID {
		// The last round sealed the run: its receipt is signed now, so the
		// caller can fetch it as soon as this answers.
		if err := n.signReceipt(ctx, p.TaskID); err != nil {
			n.log.Warn("receipt signature after finalizeRound", "task", p.TaskID, "err", err)
		}
	}
	if res.Advanced {
		for i := range r.Fragments {
			res.Fragments = append(res.Fragments, wire.FragmentStatus{Index: i, Committed: true})
		}
		return res, nil
	}
	active := r.Count(wire.TrainerActive)
	for i, fs := range r.Fragments {
		st := wire.FragmentStatus{Index: i, Accepted: len(fs.Records), Committed: fs.Closed}
		switch {
		case fs.Closed:
		case r.Due(fs, blk.TimeMs):
			st.Reason = "is due, but this node could not commit it"
			if syncErr != nil {
				st.Reason += ": " + syncErr.Error()
			}
		case len(fs.Records) >= r.TaskSpec().Quorum:
			st.WindowClosesMs = fs.KthMs + r.TaskSpec().GraceWindowMs
			st.Reason = fmt.Sprintf("%d of K=%d accepted, %d active trainers have not submitted; its grace window closes in %d ms",
				len(fs.Records), r.TaskSpec().Quorum, active-len(fs.Records), st.WindowClosesMs-blk.TimeMs)
		default:
			st.Reason = fmt.Sprintf("%d of K=%d submissions accepted", len(fs.Records), r.TaskSpec().Quorum)
		}
		res.Fragments = append(res.Fragments, st)
	}
	return res, machine.Errf(machine.KindConflict, "round %d of %s cannot be finalized yet: %s", round, p.TaskID, whyNot(res.Fragments))
}

func whyNot(fs []wire.FragmentStatus) string {
	var parts []string
	for _, f := range fs {
		if !f.Committed {
			parts = append(parts, fmt.Sprintf("fragment %d has %s", f.Index, f.Reason))
		}
	}
	if len(parts) == 0 {
		return "all fragments committed"
	}
	return fmt.Sprint(parts)
}
