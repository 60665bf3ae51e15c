package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// The cross-round self-copy rule (docs/protocol/copies.md §6): an input
// whose decoded values point the way of the SAME trainer's input to the
// same fragment in one of the StaleLookbackRounds rounds before (cosine at
// least the copy rule's threshold, the same exact integer measure) is a
// replay: rejected with stale_of_round naming the nearest such round,
// unpaid, slashed like a copy, and it forfeits the fragment's N. It runs
// after the within-round copy rule, over the inputs that rule kept, so an
// input carries at most one of copy_of and stale_of_round.

// earlierRecords reads each trainer's record of fragment f in the rounds
// round−1 … round−StaleLookbackRounds (those that exist): what the stale
// rule compares round's inputs with.
func earlierRecords(ctx context.Context, kv machine.KV, task string, round uint64, f int) (map[uint64]map[string]machine.Record, error) {
	out := map[uint64]map[string]machine.Record{}
	for d := uint64(1); d <= wire.StaleLookbackRounds && d <= round; d++ {
		q := round - d
		recs := map[string]machine.Record{}
		err := kv.Scan(ctx, machine.KSTranscript, machine.RecordPrefix(task, q, f), func(_, raw []byte) error {
			var rec machine.Record
			if err := json.Unmarshal(raw, &rec); err != nil {
				return fmt.Errorf("record of %s round %d fragment %d: %w", task, q, f, err)
			}
			recs[rec.TrainerDID] = rec
			return nil
		})
		if err != nil {
			return nil, err
		}
		out[q] = recs
	}
	return out, nil
}

// earlierQuantized returns the quantized values of an earlier round's
// record (nil when its payload does not have the recorded size or hash,
// does not decode, or holds a value that is not finite: such an input
// copies nothing). Its integers are computed as they are compared
// (quantizeLazy): release, once it is compared, lets the payload go. A
// payload that cannot be fetched is a fetchError.
func (n *Node) earlierQuantized(ctx context.Context, r *machine.Run, fs *machine.RunFragment, rec *machine.Record) (q *quantized, release func(), err error) {
	payload, unmap, checked, path, err := n.storedBlob(ctx, rec.PayloadHash, rec.PayloadSize, rec.Provider)
	if err != nil {
		var fe *fetchError
		if ctx.Err() == nil && (errors.Is(err, machine.ErrNotFound) || errors.As(err, &fe)) {
			return nil, nil, &fetchError{fmt.Errorf("stale rule: round %d payload %s of %s: %w", rec.Round, rec.PayloadHash, rec.TrainerDID, err)}
		}
		return nil, nil, err
	}
	// Every return but the last leaves release nil: the mapping goes here
	// (unmap, not the named result, which those returns have cleared).
	defer func() {
		if q == nil {
			unmap()
		}
	}()
	if uint64(len(payload)) != rec.PayloadSize || (!checked && wire.ContentHash(payload) != rec.PayloadHash) {
		return nil, nil, nil
	}
	size := fs.N * int64(fs.Dtype.Size())
	var flat []byte
	if r.Codec == nil {
		v, err := TensorValues(memReader(payload), int64(len(payload)), path, fs.Tensors)
		if err != nil {
			return nil, nil, nil
		}
		b, ok := v.inPlace(size)
		if !ok {
			if b, err = v.Bytes(size); err != nil {
				return nil, nil, err
			}
		}
		flat = b
	} else {
		// The decode's fuel is not counted in the commit: the earlier
		// input's decode was counted in its own round.
		b, _, err := payloadValues(ctx, n.eng, r.Codec, &fs.FragLayout, payload)
		if err != nil {
			var rf *RuleFailure
			if ctx.Err() != nil || (!errors.As(err, &rf) && isHostFailure(err)) {
				return nil, nil, err
			}
			return nil, nil, nil
		}
		if int64(len(b)) != size {
			return nil, nil, nil
		}
		flat = b
	}
	lq, ok := quantizeLazy(flat, fs.Dtype, int(fs.N))
	if !ok {
		return nil, nil, nil
	}
	return &lq, unmap, nil
}

// applyStaleRule runs the stale rule over fragment i's inputs still kept
// after the copy rule (values[k] is fc.Inputs[idx[k]]'s) and returns the
// values and indices of those it left kept. An earlier payload that cannot
// be fetched: while the syncer is patient, a local failure (retry); a
// re-execution, unavailable (fetchError); a syncer past its patience
// compares with what it has. With the input sketch on (copies.md §7), an
// input not judged a replay of rounds r−1, r−2 is compared by its sketch
// with the same trainer's sketches of every older round, nearest first, and
// a kept input gets its sketch.
func (n *Node) applyStaleRule(ctx context.Context, s *snapshot, i int, fc *wire.FragmentCommit, values []Values, idx []int, qs *commitQuant) ([]Values, []int, error) {
	r := s.r
	fs := r.Fragments[i]
	ppm := r.TaskSpec().CopyThresholdPpm()
	earlier := s.earlier[i]
	dim := r.TaskSpec().SketchDim()
	if ppm >= wire.CopyRuleOff || len(values) == 0 || (len(earlier) == 0 && dim == 0) {
		return values, idx, nil
	}
	// The cache serves this node's own commits; a re-execution runs cold,
	// exactly as before the cache (it has no say on availability).
	var lk wire.Hash
	if s.store {
		lk = layoutKey(r, fs)
	}
	var keptV []Values
	var keptIdx []int
	for k, j := range idx {
		in := &fc.Inputs[j]
		current := func() (*quantized, error) { return qs.of(j, values[k], "stale rule") }
		for d := uint64(1); d <= wire.StaleLookbackRounds && d <= r.Round; d++ {
			q := r.Round - d
			rec, ok := earlier[q][in.TrainerDID]
			if !ok {
				continue
			}
			// The cache's prefix of the earlier input decides most pairs
			// (quantcache.go); what it leaves open is decided on the
			// payload, as without it.
			if kept := n.quants.get(rec.PayloadHash, lk); kept != nil {
				c, err := current()
				if err != nil {
					return nil, nil, err
				}
				if c == nil {
					break
				}
				if cmp := compareQuantized(c, kept, ppm); cmp.decided {
					n.logStaleCompare("stale rule", r, i, in.TrainerDID, q, cmp)
					if cmp.sim {
						markStale(in, q)
						break
					}
					continue
				}
			}
			pq, release, err := n.earlierQuantized(ctx, r, fs, &rec)
			var fe *fetchError
			switch {
			case errors.As(err, &fe) && s.patient:
				return nil, nil, errLocal{err}
			case errors.As(err, &fe) && !s.store:
				return nil, nil, err // re-execution: unavailable
			case errors.As(err, &fe):
				n.log.Warn("stale rule: earlier payload unavailable, not compared", "trainer", in.TrainerDID, "round", r.Round, "fragment", i, "earlier_round", q, "err", err)
				continue
			case err != nil:
				return nil, nil, errLocal{err}
			case pq == nil:
				continue
			}
			c, err := current()
			if err != nil {
				release()
				return nil, nil, err
			}
			if c == nil {
				release()
				break
			}
			cmp := compareQuantized(c, pq, ppm)
			release()
			n.logStaleCompare("stale rule", r, i, in.TrainerDID, q, cmp)
			if cmp.sim {
				markStale(in, q)
				break
			}
		}
		if in.Rejected == "" && dim > 0 {
			c, err := current()
			if err != nil {
				return nil, nil, err
			}
			if c != nil {
				c.full()
				sk := sketchOf(c.q, wire.SketchSeed(r.TaskSpec().TaskID, uint64(i)), dim)
				if q, ok := n.staleBySketch(s, i, in.TrainerDID, sk, dim, ppm); ok {
					markStale(in, q)
				} else {
					in.Sketch = sk
				}
			}
		}
		if in.Rejected == "" {
			keptV, keptIdx = append(keptV, values[k]), append(keptIdx, j)
		}
	}
	return keptV, keptIdx, nil
}

// staleBySketch compares sketch sk of trainer's input with its sketches of
// the rounds older than the exact lookback, nearest first, and returns the
// first round whose sketch it is similar to (copies.md §7).
func (n *Node) staleBySketch(s *snapshot, i int, trainer string, sk []byte, dim int, ppm int64) (uint64, bool) {
	r := s.r
	cur, ok := sketchValues(sk, dim)
	if !ok {
		return 0, false
	}
	for q := r.Round; q > wire.StaleLookbackRounds; q-- {
		old := q - wire.StaleLookbackRounds - 1
		prev, ok := sketchValues(s.sketches[i][old][trainer], dim)
		if !ok {
			continue
		}
		cmp := compareQuantized(&cur, &prev, ppm)
		n.logStaleCompare("stale rule (sketch)", r, i, trainer, old, cmp)
		if cmp.sim {
			return old, true
		}
	}
	return 0, false
}

func markStale(in *wire.CommitInput, q uint64) {
	round := q
	in.StaleOfRound = &round
	in.Rejected = fmt.Sprintf("replay: its values are a copy of its own input of round %d (stale)", q)
}

// logStaleCompare logs one comparison of the stale rule with what it
// computed: the exact cosine, or the upper bound at which the early exit
// proved the pair dissimilar (no second dot for the log).
func (n *Node) logStaleCompare(msg string, r *machine.Run, i int, trainer string, earlier uint64, cmp similarity) {
	key := "cosine"
	if !cmp.exact {
		key = "cosine_at_most"
	}
	n.log.Info(msg, "task", r.TaskSpec().TaskID, "round", r.Round, "fragment", i, "trainer", trainer,
		"earlier_round", earlier, key, fmt.Sprintf("%.6f", cmp.cosine))
}
