package machine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/wire"
)

// The input sketch (docs/protocol/copies.md §7): with the spec's
// copies.sketch_dim set, each kept input of a commit carries a sketch of
// its values, and the stale rule compares an input with the same trainer's
// sketches of every round before r − StaleLookbackRounds. The sketches live
// in the round commits (KSTranscript, kept for the run's life), so no state
// beyond the transcript is written.

// RoundCommitKey is the key of a closed round's commit (KSTranscript): what
// a re-execution reads earlier sketches from.
func RoundCommitKey(task string, round uint64) []byte { return commitKey(task, round) }

// EarlierSketches reads the sketches of fragment f's inputs in the rounds
// 0 … round − StaleLookbackRounds − 1: round → trainer DID → sketch (only
// inputs that carry one). Empty when round ≤ StaleLookbackRounds.
func EarlierSketches(ctx context.Context, kv KV, task string, round uint64, f int) (map[uint64]map[string][]byte, error) {
	out := map[uint64]map[string][]byte{}
	for q := uint64(0); q+wire.StaleLookbackRounds < round; q++ {
		raw, err := kv.Get(ctx, KSTranscript, commitKey(task, q))
		if err != nil {
			return nil, fmt.Errorf("commit of %s round %d: %w", task, q, err)
		}
		var rc wire.RoundCommit
		if err := json.Unmarshal(raw, &rc); err != nil {
			return nil, fmt.Errorf("commit of %s round %d: %w", task, q, err)
		}
		m := map[string][]byte{}
		for _, fc := range rc.Fragments {
			if fc.Fragment != f {
				continue
			}
			for _, in := range fc.Inputs {
				if len(in.Sketch) > 0 {
					m[in.TrainerDID] = in.Sketch
				}
			}
		}
		out[q] = m
	}
	return out, nil
}

// checkSketches checks the sketches of a commit against the spec: none
// when the sketch is off; otherwise each is 2 × sketch_dim bytes and sits
// on an input that is neither a copy nor a replay. Which kept inputs carry
// one and what it holds is for re-execution (it is in
// FragmentResultHash).
func checkSketches(spec *wire.TaskSpec, fc *wire.FragmentCommit) error {
	dim := spec.SketchDim()
	for j, in := range fc.Inputs {
		switch {
		case in.Sketch == nil:
		case dim == 0:
			return Errf(KindInvalid, "commit: input %d (%s) carries a sketch; the spec has no copies.sketch_dim", j, in.TrainerDID)
		case len(in.Sketch) != 2*dim:
			return Errf(KindInvalid, "commit: input %d (%s): sketch of %d bytes, want %d (copies.sketch_dim %d int16 values)", j, in.TrainerDID, len(in.Sketch), 2*dim, dim)
		case in.CopyOf != "" || in.StaleOfRound != nil:
			return Errf(KindInvalid, "commit: input %d (%s) is a copy or a replay and carries a sketch", j, in.TrainerDID)
		}
	}
	return nil
}

// olderSketch says whether trainer's input to fragment f in round q (older
// than the stale rule's exact lookback) carries a sketch: what a stale
// verdict naming that round compared with.
func (x *mtx) olderSketch(task string, q uint64, f int, trainer string) (bool, error) {
	var rc wire.RoundCommit
	ok, err := x.getJSON(KSTranscript, commitKey(task, q), &rc)
	if err != nil || !ok {
		return false, err
	}
	for _, fc := range rc.Fragments {
		if fc.Fragment != f {
			continue
		}
		for _, in := range fc.Inputs {
			if in.TrainerDID == trainer && len(in.Sketch) > 0 {
				return true, nil
			}
		}
	}
	return false, nil
}
