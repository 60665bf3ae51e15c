package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenzro/train/wire"
)

// Finalizing a fragment runs plugins (round-level verifiers, the aggregation
// rule, the outer step), which may take as long as their fuel budget allows
// and, in worker processes, may be killed at the wall-clock backstop. The
// timer path (tickRun) therefore computes outside the node's mutex and
// applies under it: phase one snapshots the run and computes every due
// fragment's result without the lock; phase two reloads the run under the
// lock and applies the results whose inputs are unchanged (fragKey). A
// result whose inputs changed meanwhile is not recomputed under the lock:
// the tick commits nothing and the next tick starts over. A local failure
// (a killed or dead worker, a store error) is never recorded: the node
// abstains from finalizing that run and retries after a backoff.

// fragResult is what finalizing one fragment decides.
type fragResult struct {
	fc       *wire.FragmentCommit
	weights  []byte // new weights; nil unless aggregated
	momentum []byte
	encHash  wire.Hash // hash of the encoded new weights
	inputs   int
}

// errNotPrecomputed stops a tick whose run changed after its results were
// computed outside the lock.
var errNotPrecomputed = errors.New("fragment inputs changed since they were computed")

// fragKey identifies everything a fragment's result depends on: run,
// round, fragment, the accepted payloads, the weights and momentum before,
// and the rules.
func fragKey(r *runState, i int) wire.Hash {
	fs := r.Fragments[i]
	subs := sortedSubs(fs.Subs)
	payloads := make([]string, len(subs))
	for k, s := range subs {
		payloads[k] = s.DID + "/" + s.PayloadHash.String()
	}
	raw, _ := json.Marshal(struct {
		Task      string
		Round     uint64
		Fragment  int
		Payloads  []string
		Weights   wire.Hash
		Momentum  bool
		Rule      RuleRef
		Outer     RuleRef
		Verifiers []RuleRef
		Spec      wire.Hash
	}{r.spec.TaskID, r.Round, i, payloads, fs.WeightsHash, fs.HasMomentum, r.Rule, r.Outer, r.Verifiers, r.SpecHash})
	return wire.SHA256(raw)
}

// finalizeFragment aggregates fragment i, applies the outer step and stages
// the new weights, momentum and transcript entry in b. With precomputed
// results (r.pre, the timer path) it only applies them, and fails with
// errNotPrecomputed rather than run a plugin under the lock.
func (n *Node) finalizeFragment(ctx context.Context, b *Batch, r *runState, i int, forced bool) error {
	var res *fragResult
	if r.pre != nil {
		if res = r.pre[fragKey(r, i)]; res == nil {
			return errNotPrecomputed
		}
	} else {
		var err error
		if res, err = n.computeFragment(ctx, b, r, i); err != nil {
			return err
		}
	}
	fs := r.Fragments[i]
	fs.Committed = true
	fs.Commit = res.fc
	n.observeFragment(r, i, res.fc.Status)
	if res.weights == nil {
		return nil
	}
	task := r.spec.TaskID
	fs.WeightsHash = res.encHash
	fs.HasMomentum = true
	b.Set(KSWeights, weightsKey(task, i), res.weights)
	b.Set(KSWeights, momentumKey(task, i), res.momentum)
	n.log.Info("fragment committed", "task", task, "round", r.Round, "fragment", i, "inputs", res.inputs, "forced", forced, "weights", fs.WeightsHash.String()[:12])
	return nil
}

// computeFragment runs fragment i's plugins and returns what finalizing it
// decides, changing nothing. b holds staged writes (payloads accepted in the
// same batch); nil outside a batch.
func (n *Node) computeFragment(ctx context.Context, b *Batch, r *runState, i int) (*fragResult, error) {
	fs := r.Fragments[i]
	task := r.spec.TaskID
	subs := sortedSubs(fs.Subs)
	fc := baseCommit(r, i)
	inputs := make([][]byte, 0, len(subs))
	for _, s := range subs {
		// Mapped from the blob store: the values of a plain payload alias
		// the file's pages until this returns.
		payload, release, err := loadBlob(ctx, n.blobs, s.PayloadHash)
		if err != nil {
			return nil, fmt.Errorf("payload %s: %w", s.PayloadHash, err)
		}
		defer release()
		v, fuel, err := payloadValues(ctx, n.eng, r.Codec, fs, payload)
		if err != nil {
			return nil, fmt.Errorf("stored payload %s: %w", s.PayloadHash, err)
		}
		fc.Fuel += fuel
		inputs = append(inputs, v)
	}
	fc.Inputs = commitInputs(subs)
	res := &fragResult{fc: fc}
	// Round-level verifiers may reject inputs before aggregation.
	keep := make([]bool, len(inputs))
	for k := range keep {
		keep[k] = true
	}
	for _, v := range r.Verifiers {
		if !v.RoundLevel {
			continue
		}
		for k := range inputs {
			out, err := n.eng.Verify(ctx, VerifyInput{Verifier: v, Dtype: fs.Dtype, N: int(fs.N), Input: inputs[k], Round: inputs})
			if err != nil {
				return nil, fmt.Errorf("round verifier %s: %w", v.Name, err)
			}
			fc.Fuel += out.Fuel
			if !out.Accept && keep[k] {
				keep[k] = false
				fc.Inputs[k].Rejected = fmt.Sprintf("%s: %s", v.Name, out.Reason)
			}
		}
	}
	var kept [][]byte
	var keptIdx []int
	for k, ok := range keep {
		if ok {
			kept = append(kept, inputs[k])
			keptIdx = append(keptIdx, k)
		}
	}
	res.inputs = len(kept)
	if len(kept) < r.spec.Quorum {
		fc.Status = wire.FragNoQuorum
		fc.Reason = fmt.Sprintf("%d of K=%d inputs left after round-level verification", len(kept), r.spec.Quorum)
		return res, nil
	}
	agg, err := n.eng.Aggregate(ctx, AggregateInput{Rule: r.Rule, Dtype: fs.Dtype, N: int(fs.N), Inputs: kept})
	var rf *RuleFailure
	if errors.As(err, &rf) {
		fc.Status, fc.Reason = wire.FragRuleFailed, rf.Error()
		return res, nil
	} else if err != nil {
		return nil, fmt.Errorf("aggregate fragment %d: %w", i, err)
	}
	fc.Fuel += agg.Fuel
	for j, k := range keptIdx {
		fc.Inputs[k].Selected = j < len(agg.Selected) && agg.Selected[j]
	}
	fc.AggregateHash = wire.ContentHash(agg.Aggregate)
	weights, err := n.kv.Get(ctx, KSWeights, weightsKey(task, i))
	if err != nil {
		return nil, fmt.Errorf("weights of fragment %d: %w", i, err)
	}
	var mom []byte
	if fs.HasMomentum {
		if mom, err = n.kv.Get(ctx, KSWeights, momentumKey(task, i)); err != nil {
			return nil, fmt.Errorf("momentum of fragment %d: %w", i, err)
		}
	}
	o := r.spec.Outer()
	step, err := n.eng.OuterStep(ctx, OuterStepInput{Rule: r.Outer, Dtype: fs.Dtype, N: int(fs.N), Weights: weights, Momentum: mom,
		Aggregate: agg.Aggregate, LR: o.LR, Beta: o.Momentum, Nesterov: o.Nesterov})
	if errors.As(err, &rf) {
		fc.Status, fc.Reason = wire.FragRuleFailed, rf.Error()
		return res, nil
	} else if err != nil {
		return nil, fmt.Errorf("outer step fragment %d: %w", i, err)
	}
	fc.Fuel += step.Fuel
	enc, err := encodeFragment(fs, step.Weights)
	if err != nil {
		return nil, err
	}
	res.encHash = wire.ContentHash(enc)
	res.weights, res.momentum = step.Weights, step.Momentum
	fc.Status = wire.FragAggregated
	fc.WeightsAfter = res.encHash
	fc.MomentumAfter = wire.ContentHash(step.Momentum)
	return res, nil
}

// Submit implements Service. The submission is checked and committed under
// the lock (submit). When it completes a fragment (every active trainer is
// in), the fragment is finalized by the timer, which Submit wakes at once:
// a submission never waits on a plugin call, and a local failure while
// finalizing cannot refuse it (it is already accepted).
func (n *Node) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	res, err := n.submit(ctx, g)
	if err == nil && res.Finalized { // completed the fragment (wire.SubmitResult)
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
	return res, err
}

// allIn: every active trainer has submitted to fs, and at least K did.
func allIn(r *runState, fs *fragState) bool {
	return len(fs.Subs) >= r.spec.Quorum && len(fs.Subs) >= r.count(wire.TrainerActive)
}

// fragmentDue: the timer finalizes fs at now (grace window passed, or every
// active trainer in).
func fragmentDue(r *runState, fs *fragState, now int64) bool {
	return !fs.Committed && ((fs.KthMs > 0 && now > fs.KthMs+r.spec.GraceWindowMs) || allIn(r, fs))
}

// dueFragments lists the fragments a tick at now finalizes: those
// fragmentDue, and (at the round deadline) any uncommitted fragment with K
// submissions.
func dueFragments(r *runState, now int64) (due []int, deadline bool) {
	deadline = now >= r.RoundMs+r.spec.RoundDeadline()
	for i, fs := range r.Fragments {
		if fragmentDue(r, fs, now) || (!fs.Committed && deadline && len(fs.Subs) >= r.spec.Quorum) {
			due = append(due, i)
		}
	}
	return due, deadline
}

// tickEach is the Run loop's tick: every running run's tickRun in its own
// goroutine, at most one per run at a time, so a run whose plugin call is
// slow (up to the backstop) never holds back the timers of the others.
func (n *Node) tickEach(ctx context.Context, wg *sync.WaitGroup) {
	var tasks []string
	err := n.kv.Scan(ctx, KSRuns, nil, func(k, v []byte) error {
		var st struct {
			Status string `json:"status"`
		}
		// Awaiting runs too: their enrolment window can expire (cancel.go).
		if json.Unmarshal(v, &st) == nil && (st.Status == wire.StatusRunning || st.Status == wire.StatusAwaiting) {
			tasks = append(tasks, string(k))
		}
		return nil
	})
	if err != nil {
		n.log.Error("round timer", "err", err)
		return
	}
	for _, task := range tasks {
		n.abstainMu.Lock()
		busy := n.ticking[task]
		if !busy {
			if n.ticking == nil {
				n.ticking = map[string]bool{}
			}
			n.ticking[task] = true
		}
		n.abstainMu.Unlock()
		if busy {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.tickRun(ctx, task); err != nil && ctx.Err() == nil {
				n.logTickErr(task, err)
			}
			n.abstainMu.Lock()
			delete(n.ticking, task)
			n.abstainMu.Unlock()
		}()
	}
}

// Abstention backoff after a local failure: first retry after
// abstainFirst, doubling up to abstainMax.
const (
	abstainFirst = time.Second
	abstainMax   = 5 * time.Minute
)

type abstention struct {
	until time.Time
	delay time.Duration
}

// tickRun applies the clock: grace windows and the round deadline. Plugins
// run outside the mutex (see the top of this file).
func (n *Node) tickRun(ctx context.Context, task string) error {
	now := n.now()
	n.abstainMu.Lock()
	a, abstaining := n.abstain[task]
	n.abstainMu.Unlock()
	if abstaining && now.Before(a.until) {
		return nil
	}
	// Phase one: snapshot and compute without the lock.
	n.mu.Lock()
	snap, err := n.load(ctx, task)
	if err == nil && snap.Status == wire.StatusAwaiting {
		// An unstarted run expires after its enrolment window (cancel.go).
		err = n.maybeExpire(ctx, snap, now.UnixMilli())
		n.mu.Unlock()
		return err
	}
	n.mu.Unlock()
	if err != nil || snap.Status != wire.StatusRunning {
		return err
	}
	due, _ := dueFragments(snap, now.UnixMilli())
	pre := map[wire.Hash]*fragResult{}
	for _, i := range due {
		res, err := n.computeFragment(ctx, nil, snap, i)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			n.abstainFrom(task, a, fmt.Errorf("fragment %d: %w", i, err))
			return nil
		}
		pre[fragKey(snap, i)] = res
	}
	if abstaining {
		n.abstainMu.Lock()
		delete(n.abstain, task)
		n.abstainMu.Unlock()
	}
	// Phase two: apply under the lock.
	n.mu.Lock()
	defer n.mu.Unlock()
	r, err := n.load(ctx, task)
	if err != nil || r.Status != wire.StatusRunning {
		return err
	}
	r.pre = pre
	var b Batch
	for i, fs := range r.Fragments {
		if fragmentDue(r, fs, now.UnixMilli()) {
			if err := n.finalizeFragment(ctx, &b, r, i, false); err != nil {
				return retryLater(err)
			}
		}
	}
	deadline := now.UnixMilli() >= r.RoundMs+r.spec.RoundDeadline()
	if err := n.maybeCloseRound(ctx, &b, r, deadline); err != nil {
		return retryLater(err)
	}
	if b.Len() == 0 {
		return nil
	}
	n.putRun(&b, r)
	return n.kv.Commit(ctx, &b)
}

// precompute computes, without the lock, the result of every uncommitted
// fragment of task with at least K submissions (FinalizeRound's set): the
// caller applies them under the lock through r.pre.
func (n *Node) precompute(ctx context.Context, task string) (map[wire.Hash]*fragResult, error) {
	n.mu.Lock()
	snap, err := n.load(ctx, task)
	n.mu.Unlock()
	if err != nil || snap.Status != wire.StatusRunning {
		return nil, err
	}
	pre := map[wire.Hash]*fragResult{}
	for i, fs := range snap.Fragments {
		if fs.Committed || len(fs.Subs) < snap.spec.Quorum {
			continue
		}
		res, err := n.computeFragment(ctx, nil, snap, i)
		if err != nil {
			return nil, err
		}
		pre[fragKey(snap, i)] = res
	}
	return pre, nil
}

// changedConflict reports errNotPrecomputed to an RPC caller as a conflict
// to retry.
func changedConflict(err error) error {
	if errors.Is(err, errNotPrecomputed) {
		return Errf(KindConflict, "the round changed while its fragments were computed; retry")
	}
	return err
}

// retryLater turns "the run changed under the computed results" into a
// quiet no-op: the next tick computes again.
func retryLater(err error) error {
	if errors.Is(err, errNotPrecomputed) {
		return nil
	}
	return err
}

// abstainFrom records a local failure: the run is not finalized now, and
// the node retries after a backoff. Nothing is recorded in the run.
func (n *Node) abstainFrom(task string, prev abstention, err error) {
	d := abstainFirst
	if prev.delay > 0 {
		d = min(2*prev.delay, abstainMax)
	}
	n.abstainMu.Lock()
	if n.abstain == nil {
		n.abstain = map[string]abstention{}
	}
	n.abstain[task] = abstention{until: n.now().Add(d), delay: d}
	n.abstainMu.Unlock()
	n.log.Warn("abstaining from finalizing after a local failure; nothing recorded, retrying later",
		"task", task, "retry_in", d, "err", err)
}
