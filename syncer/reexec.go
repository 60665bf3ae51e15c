package syncer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Re-execution of fragment commits outside the chain (docs/protocol/
// challenges.md): a validator's node recomputes a challenged commit and
// votes its FragmentResultHash with its consensus key; a watcher node
// recomputes every commit it can fetch and challenges those that differ.
// Both run computeCommit — the code the syncer ran — over the commit's
// inputs, weights_before and momentum_before, fetched by hash. Nothing here
// runs inside FinalizeBlock: only the votes and challenges enter the chain.

// VoteSigner signs challenge votes with this node's CometBFT validator key.
type VoteSigner interface {
	// Address is the validator's 20-byte consensus address.
	Address() []byte
	Sign(msg []byte) ([]byte, error)
}

// ChallengeObserver receives the re-execution measurements (metrics); a
// Config.Observer that implements it gets them.
type ChallengeObserver interface {
	// Reexecuted: a commit was recomputed (why: "watch" or "vote") in d;
	// agree tells whether the result was the committed one.
	Reexecuted(why string, agree, unavailable bool, d time.Duration)
	// ChallengeSent: this node challenged a commit.
	ChallengeSent(task string, round uint64, fragment int)
	// ChallengeDecided: a challenge this node sent was decided (outcome).
	ChallengeDecided(outcome string)
	// VoteSent: this node voted on a challenge.
	VoteSent(unavailable bool)
}

// Reexecution is a fragment commit recomputed by this node.
type Reexecution struct {
	TaskID   string `json:"task_id"`
	Round    uint64 `json:"round"`
	Fragment int    `json:"fragment"`
	// Committed is the commit's FragmentResultHash on chain, Result this
	// node's (zero when Unavailable: an input the commit kept, its weights
	// before or momentum before could not be fetched; Why says which).
	Committed   wire.Hash `json:"committed"`
	Result      wire.Hash `json:"result"`
	Unavailable bool      `json:"unavailable,omitempty"`
	Why         string    `json:"why,omitempty"`
	// Commit is the recomputed commit (nil when Unavailable).
	Commit  *wire.FragmentCommit `json:"commit,omitempty"`
	Elapsed time.Duration        `json:"elapsed_ns"`
	// CommitHeight and FinalAt are the disputed commit's block and the
	// height at which it is final.
	CommitHeight int64 `json:"commit_height"`
	FinalAt      int64 `json:"final_at"`
}

// Agrees says whether this node's result is the committed one.
func (r *Reexecution) Agrees() bool { return !r.Unavailable && r.Result == r.Committed }

// reexecJob is what recomputing one commit reads from a committed state.
type reexecJob struct {
	rec  *machine.CommitRecord
	snap *snapshot
}

// loadReexecJob reads the commit of (task, round, f) while it can be
// challenged, the run as its round started, and the fragment's records.
func loadReexecJob(ctx context.Context, v machine.View, task string, round uint64, f int) (*reexecJob, error) {
	if _, err := machine.LoadRun(ctx, v.KV, task); err != nil {
		return nil, err
	}
	rec, err := machine.FragmentCommitRecord(ctx, v.KV, task, round, f)
	if err != nil {
		return nil, err
	}
	sr, err := machine.RoundStart(ctx, v.KV, task, round)
	if err != nil {
		return nil, err
	}
	if f < 0 || f >= len(sr.Fragments) {
		return nil, machine.Errf(machine.KindInvalid, "wrong fragment: %d", f)
	}
	fs := sr.Fragments[f]
	// Exactly what the commit started from (the chain checked
	// weights_before; the momentum is the chain's at the commit).
	fs.WeightsHash, fs.MomentumHash = rec.Commit.WeightsBefore, rec.MomentumBefore
	fs.Records, fs.Closed, fs.Commit = nil, false, nil
	if sc := rec.Commit.Scoring; sc != nil { // the seed the chain had drawn for the commit
		seed := sc.Seed
		fs.ScoreSeed = &seed
	}
	recs := map[string]machine.Record{}
	err = v.KV.Scan(ctx, machine.KSTranscript, machine.RecordPrefix(task, round, f), func(_, raw []byte) error {
		var x machine.Record
		if err := json.Unmarshal(raw, &x); err != nil {
			return fmt.Errorf("record of %s round %d fragment %d: %w", task, round, f, err)
		}
		recs[x.TrainerDID] = x
		fs.Records = append(fs.Records, machine.RecRef{DID: x.TrainerDID, PayloadHash: x.PayloadHash})
		return nil
	})
	if err != nil {
		return nil, err
	}
	earlier, err := earlierRecords(ctx, v.KV, task, round, f)
	if err != nil {
		return nil, err
	}
	sketches := map[int]map[uint64]map[string][]byte{}
	if sr.TaskSpec().SketchDim() > 0 {
		if sketches[f], err = machine.EarlierSketches(ctx, v.KV, task, round, f); err != nil {
			return nil, err
		}
	}
	return &reexecJob{rec: rec, snap: &snapshot{r: sr, blk: v.Block, ticket: int(rec.Commit.Ticket), sketches: sketches,
		records: map[int]map[string]machine.Record{f: recs}, earlier: map[int]map[uint64]map[string]machine.Record{f: earlier},
		claims: map[int][]machine.Claim{}, due: []int{f}}}, nil
}

// Reexecute recomputes the commit of (task, round, fragment), which must
// still be challengeable, from its inputs fetched by hash, with the code
// the syncer runs. A failure of this node (its store, its plugin host) is
// an error; inputs the network does not give make an Unavailable result.
func (n *Node) Reexecute(ctx context.Context, task string, round uint64, f int) (*Reexecution, error) {
	var job *reexecJob
	if err := n.view(ctx, func(v machine.View) error {
		var err error
		job, err = loadReexecJob(ctx, v, task, round, f)
		return err
	}); err != nil {
		return nil, err
	}
	return n.reexecute(ctx, task, round, f, job)
}

func (n *Node) reexecute(ctx context.Context, task string, round uint64, f int, job *reexecJob) (*Reexecution, error) {
	start := time.Now()
	out := &Reexecution{TaskID: task, Round: round, Fragment: f, Committed: job.rec.Result, CommitHeight: job.rec.Height, FinalAt: job.rec.FinalAt}
	c, err := n.computeCommit(ctx, job.snap, f)
	out.Elapsed = time.Since(start)
	var fe *fetchError
	switch {
	case errors.As(err, &fe):
		out.Unavailable, out.Why = true, err.Error()
		return out, nil
	case err != nil:
		return nil, err
	}
	committed := job.rec.Commit.Inputs
	if len(c.commit.Inputs) != len(committed) {
		return nil, fmt.Errorf("recomputed %d inputs, the commit has %d", len(c.commit.Inputs), len(committed))
	}
	for j, in := range c.commit.Inputs {
		if in.TrainerDID != committed[j].TrainerDID {
			return nil, fmt.Errorf("input %d is %s, the commit's is %s", j, in.TrainerDID, committed[j].TrainerDID)
		}
		if committed[j].Rejected == "" && (strings.HasPrefix(in.Rejected, "payload unavailable") || strings.HasPrefix(in.Rejected, "evidence unavailable")) {
			out.Unavailable, out.Why = true, fmt.Sprintf("input of %s, which the commit kept: %s", in.TrainerDID, in.Rejected)
			return out, nil
		}
	}
	out.Commit = &c.commit
	out.Result = wire.FragmentResultHash(&c.commit)
	return out, nil
}

// ReplayFragment answers tenzro_training_replayFragment: this node
// recomputes a challengeable commit and returns its result hash.
func (n *Node) ReplayFragment(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.ReplayFragmentResult, error) {
	if p.TaskID == "" {
		return nil, machine.Errf(machine.KindInvalid, "task_id is empty")
	}
	re, err := n.Reexecute(ctx, p.TaskID, p.Round, int(p.Fragment))
	if err != nil {
		return nil, err
	}
	res := &wire.ReplayFragmentResult{TaskID: p.TaskID, Round: p.Round, Fragment: p.Fragment, Committed: re.Committed, Result: re.Result,
		Unavailable: re.Unavailable, Why: re.Why, Agrees: re.Agrees(), ElapsedMs: re.Elapsed.Milliseconds(), FinalAt: re.FinalAt}
	if re.Commit != nil {
		res.Commit = re.Commit
	}
	return res, nil
}

// Challenges answers tenzro_training_getChallenges.
func (n *Node) Challenges(ctx context.Context, task string) ([]wire.ChallengeRecord, error) {
	var out []wire.ChallengeRecord
	err := n.view(ctx, func(v machine.View) error {
		if _, err := machine.LoadRun(ctx, v.KV, task); err != nil {
			return err
		}
		var err error
		out, err = machine.RunChallenges(ctx, v.KV, task)
		return err
	})
	if out == nil {
		out = []wire.ChallengeRecord{}
	}
	return out, err
}

// Challenge sends a challenge signed by this node's key (the watcher's, or
// tenzro train challenge through a node that holds the challenger's key is
// not possible: clients sign their own; this is the node's).
func (n *Node) challengeCommit(ctx context.Context, task string, round uint64, f int, claim wire.Hash, bond string) (*wire.ChallengeResult, error) {
	me := n.cfg.Signer.DID()
	p, err := n.submitSigned(ctx, wire.TxChallenge, func(nonce uint64) (any, error) {
		sd, err := n.signedFor(ctx, nonce)
		if err != nil {
			return nil, err
		}
		q := wire.ChallengeTx{TaskID: task, Round: round, Fragment: uint64(f), ChallengerDID: me, ResultHash: claim, Bond: bond, Signed: sd}
		sig, err := n.cfg.Signer.Sign(ctx, q.Preimage())
		q.Signature = sig
		return q, err
	})
	if err != nil {
		return nil, err
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return nil, err
	}
	var cr wire.ChallengeResult
	if err := json.Unmarshal(res.Data, &cr); err != nil {
		return nil, err
	}
	cr.Height = res.Height
	return &cr, nil
}

// SubmitChallenge implements Service: a challenge signed by its challenger
// (tenzro train challenge) enters the chain.
func (n *Node) SubmitChallenge(ctx context.Context, p *wire.ChallengeTx) (*wire.ChallengeResult, error) {
	var out wire.ChallengeResult
	h, err := n.broadcast(ctx, wire.TxChallenge, p, &out)
	if err != nil {
		return nil, err
	}
	out.Height = h
	return &out, nil
}

// watchState is the watcher's and the voter's memory (local, not a rule).
type watchState struct {
	mu      sync.Mutex
	done    map[string]bool      // commit or challenge handled for good
	retry   map[string]time.Time // unavailable: look again after
	running map[string]bool
	sem     chan struct{}
	mine    map[wire.Hash]bool // challenges this node sent, undecided
}

func (w *watchState) init(concurrency int) {
	if concurrency <= 0 {
		concurrency = 2
	}
	w.done, w.retry, w.running, w.mine = map[string]bool{}, map[string]time.Time{}, map[string]bool{}, map[wire.Hash]bool{}
	w.sem = make(chan struct{}, concurrency)
}

// challengeWork is what the committed state asks of this node's voter and
// watcher.
type challengeWork struct {
	votes   []voteJob
	watch   []watchJob
	decided []wire.ChallengeRecord // challenges this node sent that are decided
}

type voteJob struct {
	ch  wire.ChallengeRecord
	blk machine.Block
}

type watchJob struct {
	task     string
	round    uint64
	fragment int
	rec      machine.CommitRecord
	bond     string
	window   int64
	blk      machine.Block
}

func commitKeyText(task string, round uint64, f int, result wire.Hash) string {
	return fmt.Sprintf("%s/%d/%d/%s", task, round, f, result)
}

// challengePlan reads what to vote on and what to watch.
func (n *Node) challengePlan(ctx context.Context) (*challengeWork, error) {
	var addr []byte
	if n.cfg.Validator != nil {
		addr = n.cfg.Validator.Address()
	}
	if addr == nil && !n.cfg.Watch {
		return &challengeWork{}, nil
	}
	out := &challengeWork{}
	n.cw.mu.Lock()
	mine := make([]wire.Hash, 0, len(n.cw.mine))
	for id := range n.cw.mine {
		mine = append(mine, id)
	}
	n.cw.mu.Unlock()
	err := n.view(ctx, func(v machine.View) error {
		for _, id := range mine {
			if ch, err := machine.LoadChallenge(ctx, v.KV, id); err == nil && ch.Outcome != wire.ChallengeOpen {
				out.decided = append(out.decided, *ch)
			}
		}
		tasks, err := machine.ActiveTasks(ctx, v.KV)
		if err != nil {
			return err
		}
		for _, task := range tasks {
			r, err := machine.LoadRunHeader(ctx, v.KV, task, false) // status, window, open challenges
			if err != nil || r.Status != wire.StatusRunning || !r.Challengeable() {
				continue
			}
			if addr != nil {
				for _, o := range r.Open {
					ch, err := machine.LoadChallenge(ctx, v.KV, o.ID)
					if err != nil || ch.Outcome != wire.ChallengeOpen || v.Block.Height > ch.VoteDeadline {
						continue
					}
					member, voted := false, false
					for _, a := range ch.Committee {
						member = member || bytes.Equal(a, addr)
					}
					for _, x := range ch.Votes {
						voted = voted || bytes.Equal(x.Validator, addr)
					}
					if member && !voted {
						out.votes = append(out.votes, voteJob{ch: *ch, blk: v.Block})
					}
				}
			}
			if !n.cfg.Watch {
				continue
			}
			prefix := []byte("fc/" + task + "/")
			err = v.KV.Scan(ctx, machine.KSTranscript, prefix, func(k, raw []byte) error {
				var c machine.CommitRecord
				if len(k) != len(prefix)+12 || json.Unmarshal(raw, &c) != nil {
					return nil
				}
				round := binary.BigEndian.Uint64(k[len(prefix):])
				if c.ByChain || c.Challenge != nil || v.Block.Height >= c.FinalAt {
					return nil
				}
				out.watch = append(out.watch, watchJob{task: task, round: round, fragment: c.Commit.Fragment, rec: c, bond: r.TaskSpec().Bond(),
					window: r.Window, blk: v.Block})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	// In commit order.
	sort.SliceStable(out.watch, func(a, b int) bool { return out.watch[a].rec.Height < out.watch[b].rec.Height })
	return out, err
}

// challengeStep starts the votes and watches the committed state asks for,
// at most Config.WatchConcurrency re-executions at a time; with sync it
// inline runs them in this goroutine (Tick).
func (n *Node) challengeStep(ctx context.Context, wg *sync.WaitGroup, inline bool) []error {
	work, err := n.challengePlan(ctx)
	if err != nil {
		return []error{err}
	}
	for _, ch := range work.decided {
		n.cw.mu.Lock()
		delete(n.cw.mine, ch.ID)
		n.cw.mu.Unlock()
		n.log.Info("a challenge this node sent was decided", "task", ch.TaskID, "round", ch.Round, "fragment", ch.Fragment, "outcome", ch.Outcome,
			"syncer_slashed", ch.SyncerSlashed, "reward", ch.ChallengerReward)
		if o, ok := n.cfg.Observer.(ChallengeObserver); ok {
			o.ChallengeDecided(ch.Outcome)
		}
	}
	// Forget what the chain no longer asks about (final, decided, voted):
	// the memory stays the size of the challengeable set.
	live := map[string]bool{}
	for _, j := range work.votes {
		live["vote/"+j.ch.ID.String()] = true
	}
	for _, j := range work.watch {
		live["watch/"+commitKeyText(j.task, j.round, j.fragment, j.rec.Result)] = true
	}
	n.cw.mu.Lock()
	for k := range n.cw.done {
		if !live[k] {
			delete(n.cw.done, k)
		}
	}
	for k := range n.cw.retry {
		if !live[k] {
			delete(n.cw.retry, k)
		}
	}
	n.cw.mu.Unlock()
	var errs []error
	var mu sync.Mutex
	run := func(key string, f func(context.Context) error) {
		now := n.now()
		n.cw.mu.Lock()
		if n.cw.done[key] || n.cw.running[key] || now.Before(n.cw.retry[key]) {
			n.cw.mu.Unlock()
			return
		}
		n.cw.running[key] = true
		n.cw.mu.Unlock()
		do := func() {
			if !inline {
				select {
				case n.cw.sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				defer func() { <-n.cw.sem }()
			}
			err := f(ctx)
			n.cw.mu.Lock()
			delete(n.cw.running, key)
			n.cw.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				n.logOnce("challenge "+key, "re-execution", "job", key, "err", err)
				n.cw.mu.Lock()
				n.cw.retry[key] = n.now().Add(abstainFirst)
				n.cw.mu.Unlock()
			}
		}
		if inline {
			do()
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); do() }()
	}
	for _, j := range work.votes {
		j := j
		run("vote/"+j.ch.ID.String(), func(ctx context.Context) error { return n.voteOn(ctx, j) })
	}
	for _, j := range work.watch {
		j := j
		run("watch/"+commitKeyText(j.task, j.round, j.fragment, j.rec.Result), func(ctx context.Context) error { return n.watchCommit(ctx, j) })
	}
	return errs
}

// unavailableRetry is how long this node waits before fetching again what
// it could not (local policy).
const unavailableRetry = 2 * time.Second

// voteOn re-executes a challenged commit and votes. A result it cannot
// fetch waits until half the vote window has passed before it is voted
// "unavailable" (the inputs may still arrive).
func (n *Node) voteOn(ctx context.Context, j voteJob) error {
	key := "vote/" + j.ch.ID.String()
	re, err := n.Reexecute(ctx, j.ch.TaskID, j.ch.Round, int(j.ch.Fragment))
	if err != nil {
		if machine.KindOf(err) == machine.KindNotFound { // discarded or decided meanwhile
			n.markDone(key)
			return nil
		}
		return err
	}
	n.observeReexec("vote", re)
	if re.Unavailable {
		if _, blk, err := n.load(ctx, j.ch.TaskID); err == nil && blk.Height < j.ch.Height+(j.ch.VoteDeadline-j.ch.Height)/2 {
			n.log.Info("challenged commit's inputs unavailable; fetching again before voting", "challenge", j.ch.ID, "why", re.Why)
			n.retryAfter(key, unavailableRetry)
			return nil
		}
	}
	v := wire.ChallengeVoteTx{Challenge: j.ch.ID, ResultHash: re.Result, Unavailable: re.Unavailable, Validator: append(wire.HexBytes{}, n.cfg.Validator.Address()...)}
	sig, err := n.cfg.Validator.Sign(v.Preimage())
	if err != nil {
		return fmt.Errorf("sign vote: %w", err)
	}
	v.Signature = sig
	var out wire.ChallengeVoteResult
	if _, err := n.broadcast(ctx, wire.TxChallengeVote, &v, &out); err != nil {
		if k := machine.KindOf(err); k == machine.KindConflict || k == machine.KindNotFound {
			n.markDone(key) // decided, past its window, or voted already
			return nil
		}
		return err
	}
	n.markDone(key)
	if o, ok := n.cfg.Observer.(ChallengeObserver); ok {
		o.VoteSent(re.Unavailable)
	}
	n.log.Info("voted on a challenge", "task", j.ch.TaskID, "round", j.ch.Round, "fragment", j.ch.Fragment, "challenge", j.ch.ID,
		"result", re.Result, "unavailable", re.Unavailable, "agrees_with_commit", re.Agrees(), "outcome", out.Outcome, "reexec", re.Elapsed)
	return nil
}

// watchCommit re-executes a commit and challenges it when this node's
// result differs (or, past half its window, its inputs stay unavailable).
func (n *Node) watchCommit(ctx context.Context, j watchJob) error {
	key := "watch/" + commitKeyText(j.task, j.round, j.fragment, j.rec.Result)
	re, err := n.Reexecute(ctx, j.task, j.round, j.fragment)
	if err != nil {
		if machine.KindOf(err) == machine.KindNotFound {
			n.markDone(key)
			return nil
		}
		return err
	}
	n.observeReexec("watch", re)
	if re.Agrees() {
		n.markDone(key)
		return nil
	}
	claim := re.Result
	if re.Unavailable {
		if _, blk, err := n.load(ctx, j.task); err == nil && blk.Height < j.rec.Height+j.window/2 {
			n.retryAfter(key, unavailableRetry)
			return nil
		}
		claim = wire.Hash{}
	}
	n.log.Warn("watcher: a commit differs from this node's re-execution; challenging", "task", j.task, "round", j.round, "fragment", j.fragment,
		"committed", re.Committed, "result", re.Result, "unavailable", re.Unavailable, "why", re.Why)
	cr, err := n.challengeCommit(ctx, j.task, j.round, j.fragment, claim, j.bond)
	if err != nil {
		if k := machine.KindOf(err); k == machine.KindConflict || k == machine.KindNotFound {
			n.markDone(key) // challenged by another, final, or discarded
			n.log.Info("watcher: challenge refused", "task", j.task, "round", j.round, "fragment", j.fragment, "err", err)
			return nil
		}
		return fmt.Errorf("challenge: %w", err)
	}
	n.markDone(key)
	n.cw.mu.Lock()
	n.cw.mine[cr.ID] = true
	n.cw.mu.Unlock()
	if o, ok := n.cfg.Observer.(ChallengeObserver); ok {
		o.ChallengeSent(j.task, j.round, j.fragment)
	}
	n.log.Info("watcher: challenge sent", "task", j.task, "round", j.round, "fragment", j.fragment, "id", cr.ID, "vote_deadline", cr.VoteDeadline, "height", cr.Height)
	return nil
}

func (n *Node) markDone(key string) {
	n.cw.mu.Lock()
	n.cw.done[key] = true
	delete(n.cw.retry, key)
	n.cw.mu.Unlock()
}

func (n *Node) retryAfter(key string, d time.Duration) {
	n.cw.mu.Lock()
	n.cw.retry[key] = n.now().Add(d)
	n.cw.mu.Unlock()
}

func (n *Node) observeReexec(why string, re *Reexecution) {
	if o, ok := n.cfg.Observer.(ChallengeObserver); ok {
		o.Reexecuted(why, re.Agrees(), re.Unavailable, re.Elapsed)
	}
}

// CommitOf names the commit a replay of (task, round, fragment) re-executes
// now: its result hash and commit height (rpc.CommitNamer; the node's replay
// cache keys on it, so a commit redone after an upheld challenge is replayed
// afresh). One read of the commit record.
func (n *Node) CommitOf(ctx context.Context, task string, round, fragment uint64) (wire.Hash, int64, error) {
	var res wire.Hash
	var height int64
	err := n.view(ctx, func(v machine.View) error {
		rec, err := machine.FragmentCommitRecord(ctx, v.KV, task, round, int(fragment))
		if err != nil {
			return err
		}
		res, height = rec.Result, rec.Height
		return nil
	})
	return res, height, err
}
