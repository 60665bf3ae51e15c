package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The crash contract of the new state (docs/protocol/blobs.md, "The new
// state is written after the commit"): a syncer sends a commit once the new
// weights' and momentum's hashes are known, and their durable write ends
// after (store.Blobs.WriteBlobAfter). A node killed in between restarts
// with a chain whose current state names blobs it never wrote. At start,
// before its worker runs, RestoreState finds, for every run, the fragments
// whose current weights or momentum this node committed and lacks, and
// re-derives them: the commit that produced them is re-executed from the
// inputs it kept and the state before it (Engine.Finalize, the code the
// syncer and the validators' re-execution run), its hashes checked equal
// to the committed ones, and the bytes stored. When that cannot be done
// (an input or the state before is not held here and no peer gives it),
// the blobs are fetched from peers by hash like a validator's, or the
// failure is logged precisely. A clean restart finds nothing to do: Close
// waited for every write.

// restoreJob is one fragment whose current state this node committed and
// lacks.
type restoreJob struct {
	task     string
	fragment int
	round    uint64 // the producing commit's round
	commit   wire.FragmentCommit
	// momentumBefore is the momentum the commit stepped from (zero: none).
	momentumBefore wire.Hash
	missing        []wire.Hash
}

// RestoreState re-derives the current state this node committed but did
// not write before it stopped (Run calls it first). It returns how many
// fragments' state it restored and the failures, joined; a failure leaves
// the node as without this pass (commits that need the missing blob
// abstain; it serves what it has).
func (n *Node) RestoreState(ctx context.Context) (int, error) {
	if _, files := n.blobs.(blobFiles); !files {
		return 0, nil // KV blobs are written with the commit's batch, synced
	}
	var jobs []restoreJob
	if err := n.view(ctx, func(v machine.View) error {
		var err error
		jobs, err = n.restoreJobs(ctx, v)
		return err
	}); err != nil {
		return 0, fmt.Errorf("restore state: %w", err)
	}
	done := 0
	var errs []error
	for _, j := range jobs {
		start := time.Now()
		err := n.rederive(ctx, j)
		how := "re-executed"
		if err != nil {
			if ctx.Err() != nil {
				return done, ctx.Err()
			}
			var ferr error
			if ferr = n.fetchState(ctx, j.missing); ferr == nil {
				n.log.Warn("restore state: re-execution failed; fetched the committed state from peers", "task", j.task, "fragment", j.fragment,
					"round", j.round, "err", err)
				how = "fetched"
			} else {
				errs = append(errs, fmt.Errorf("run %s round %d fragment %d: state %v missing: re-execution: %w; fetch: %v", j.task, j.round, j.fragment, j.missing, err, ferr))
				continue
			}
		}
		done++
		n.log.Info("restore state: re-derived the committed state this node had not written", "task", j.task, "fragment", j.fragment,
			"round", j.round, "how", how, "weights", j.commit.WeightsAfter.String()[:12], "elapsed", time.Since(start))
	}
	return done, errors.Join(errs...)
}

// restoreJobs lists the fragments whose current weights or momentum this
// node committed and its store lacks.
func (n *Node) restoreJobs(ctx context.Context, v machine.View) ([]restoreJob, error) {
	me := n.cfg.Signer.DID()
	tasks, err := machine.RunTasks(ctx, v.KV)
	if err != nil {
		return nil, err
	}
	var jobs []restoreJob
	for _, task := range tasks {
		h, err := machine.LoadRunHeader(ctx, v.KV, task, true)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", task, err)
		}
		var r *machine.Run
		for i, fs := range h.Fragments {
			if fs.MomentumHash.IsZero() {
				continue // no step yet: the initial weights were stored when the run was posted
			}
			var missing []wire.Hash
			for _, x := range []wire.Hash{fs.WeightsHash, fs.MomentumHash} {
				ok, err := n.blobs.Has(ctx, x)
				if err != nil {
					return nil, err
				}
				if !ok {
					missing = append(missing, x)
				}
			}
			if len(missing) == 0 {
				continue
			}
			if r == nil {
				if r, err = machine.LoadRun(ctx, v.KV, task); err != nil {
					return nil, fmt.Errorf("run %s: %w", task, err)
				}
			}
			j, err := producingCommit(ctx, v.KV, r, i)
			if err != nil {
				return nil, fmt.Errorf("run %s fragment %d: %w", task, i, err)
			}
			if j.commit.Syncer != me {
				continue // another syncer's state: not this node's to have written
			}
			j.missing = missing
			jobs = append(jobs, *j)
		}
	}
	return jobs, nil
}

// producingCommit finds the commit that made fragment i's current state
// (the latest aggregated one: its weights_after and momentum_after are the
// fragment's) and the momentum it stepped from (the one before's
// momentum_after; zero when it was the first step).
func producingCommit(ctx context.Context, kv machine.KV, r *machine.Run, i int) (*restoreJob, error) {
	fs := r.Fragments[i]
	task := r.TaskSpec().TaskID
	var j *restoreJob
	consider := func(round uint64, c *wire.FragmentCommit) bool {
		if c == nil || c.Status != wire.FragAggregated {
			return false
		}
		if j == nil {
			if c.WeightsAfter != fs.WeightsHash || c.MomentumAfter != fs.MomentumHash {
				return false
			}
			j = &restoreJob{task: task, fragment: i, round: round, commit: *c}
			return false
		}
		j.momentumBefore = c.MomentumAfter
		return true
	}
	// The current round's commit, while the round is open (or sealed with
	// its fragments as committed): its transcript entry, if any, is the same.
	current := fs.Closed && fs.Commit != nil
	if current && consider(r.Round, fs.Commit) {
		return j, nil
	}
	for q := len(r.Roots) - 1; q >= 0; q-- {
		if current && uint64(q) == r.Round {
			continue
		}
		raw, err := kv.Get(ctx, machine.KSTranscript, machine.RoundCommitKey(task, uint64(q)))
		if err != nil {
			return nil, fmt.Errorf("transcript round %d: %w", q, err)
		}
		var rc wire.RoundCommit
		if err := json.Unmarshal(raw, &rc); err != nil {
			return nil, fmt.Errorf("transcript round %d: %w", q, err)
		}
		if i >= len(rc.Fragments) {
			return nil, fmt.Errorf("transcript round %d has %d fragments", q, len(rc.Fragments))
		}
		if consider(uint64(q), &rc.Fragments[i]) {
			return j, nil
		}
	}
	if j == nil {
		return nil, fmt.Errorf("no commit names the current weights %s and momentum %s", fs.WeightsHash, fs.MomentumHash)
	}
	return j, nil // the first step: no momentum before
}

// rederive re-executes j's commit — the aggregation of the inputs it kept
// and the outer step from the state before it — stores the new state and
// checks it is the committed one.
func (n *Node) rederive(ctx context.Context, j restoreJob) error {
	var r *machine.Run
	if err := n.view(ctx, func(v machine.View) error {
		var err error
		r, err = machine.LoadRun(ctx, v.KV, j.task)
		return err
	}); err != nil {
		return err
	}
	fs := r.Fragments[j.fragment]
	c := &j.commit
	var releases []func()
	defer func() {
		for _, rel := range releases {
			rel()
		}
	}()
	var values []Values
	for _, in := range c.Inputs {
		if in.Rejected != "" {
			continue // every rule's verdict is in the commit: only the kept inputs were aggregated
		}
		payload, release, checked, path, err := n.storedBlob(ctx, in.PayloadHash, machine.MaxPayloadBytes, "")
		if err != nil {
			return fmt.Errorf("input of %s (payload %s): %w", in.TrainerDID, in.PayloadHash, err)
		}
		releases = append(releases, release)
		if !checked && wire.ContentHash(payload) != in.PayloadHash {
			return fmt.Errorf("input of %s: payload does not hash to %s", in.TrainerDID, in.PayloadHash)
		}
		v, _, _, err := inputValues(ctx, n.eng, r, fs, payload, path)
		if err != nil {
			return fmt.Errorf("input of %s (payload %s) does not decode: %w", in.TrainerDID, in.PayloadHash, err)
		}
		values = append(values, v)
	}
	w, release, err := n.storedValues(ctx, c.WeightsBefore, fs.Tensors)
	if err != nil {
		return fmt.Errorf("weights before %s: %w", c.WeightsBefore, err)
	}
	releases = append(releases, release)
	o := r.TaskSpec().Outer()
	fin := FinalizeInput{Rule: r.Rule, Outer: r.Outer, Dtype: fs.Dtype, N: int(fs.N), Quorum: r.TaskSpec().Quorum,
		Inputs: values, Weights: w, LR: o.LR, Beta: o.Momentum, Nesterov: o.Nesterov}
	if !j.momentumBefore.IsZero() {
		m, release, err := n.storedValues(ctx, j.momentumBefore, nil)
		if err != nil {
			return fmt.Errorf("momentum before %s: %w", j.momentumBefore, err)
		}
		releases = append(releases, release)
		fin.Momentum = &m
	}
	var got wire.FragmentCommit
	// No WeightsHeader: the re-derived state is hashed apart from the
	// engine that computed it, so the check below is independent of the
	// sweep's hashing.
	fin.Write = func(weights, momentum []byte, _ *StateHashes) error {
		return n.writeState(ctx, true, &fs.FragLayout, nil, weights, momentum, nil, &got)
	}
	out, err := n.eng.Finalize(ctx, fin)
	if err != nil {
		return fmt.Errorf("finalize: %w", err)
	}
	if out.Status != wire.FragAggregated {
		return fmt.Errorf("re-execution gave %s (%s), the commit %s", out.Status, out.Reason, c.Status)
	}
	if out.AggregateHash != c.AggregateHash || got.WeightsAfter != c.WeightsAfter || got.MomentumAfter != c.MomentumAfter {
		return fmt.Errorf("re-execution gave aggregate %s, weights %s, momentum %s; the commit names %s, %s, %s",
			out.AggregateHash, got.WeightsAfter, got.MomentumAfter, c.AggregateHash, c.WeightsAfter, c.MomentumAfter)
	}
	return n.stateDurable(ctx, c.WeightsAfter, c.MomentumAfter)
}

// fetchState fetches the missing blobs of a committed state from peers,
// each checked against its hash (Node.blob), and stores them.
func (n *Node) fetchState(ctx context.Context, missing []wire.Hash) error {
	for _, h := range missing {
		if _, err := n.blob(ctx, h, uint64(machine.MaxInitWeights), ""); err != nil {
			return err
		}
	}
	return nil
}

// stateDurable waits for the deferred writes of hs (blobDurability).
func (n *Node) stateDurable(ctx context.Context, hs ...wire.Hash) error {
	d, ok := n.blobs.(blobDurability)
	if !ok {
		return nil
	}
	for _, h := range hs {
		if err := d.Durable(ctx, h); err != nil {
			return err
		}
	}
	return nil
}
