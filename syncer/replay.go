package syncer

import (
	"context"
	"fmt"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// PayloadSource serves stored blobs (payloads, initial weights) by content
// hash (wire.ContentHash).
// *Node and the RPC client implement it.
type PayloadSource interface {
	GetPayload(ctx context.Context, h wire.Hash) ([]byte, error)
}

// Divergence is the first place a replay disagrees with the receipt.
type Divergence struct {
	Round    uint64 `json:"round"`
	Fragment int    `json:"fragment"`
	What     string `json:"what"`
}

func (d *Divergence) Error() string {
	return fmt.Sprintf("round %d fragment %d: %s", d.Round, d.Fragment, d.What)
}

// ReplayReport is the outcome of Replay.
type ReplayReport struct {
	Rounds         int         `json:"rounds"`
	Aggregations   int         `json:"aggregations"`
	FinalModelHash wire.Hash   `json:"final_model_hash"`
	Match          bool        `json:"match"`
	Divergence     *Divergence `json:"divergence,omitempty"`
}

// Replay re-executes every round of a receipt from its transcript blob
// (TranscriptBlob; fetched by the receipt's transcript_hash) and the stored
// payloads with eng, and reports the first divergence or that the final
// model hash matches. The receipt and transcript are checked first
// (CheckReceiptFull). progress, when set, is called after each round.
func Replay(ctx context.Context, receipt, transcript []byte, src PayloadSource, eng Engine, progress func(round uint64, of int)) (*ReplayReport, error) {
	rc, rounds, _, err := audit.CheckFull(receipt, transcript)
	if err != nil {
		return nil, fmt.Errorf("receipt does not verify, nothing to replay: %w", err)
	}
	spec, _, err := wire.ParseSpec(rc.TaskSpec)
	if err != nil {
		return nil, err
	}
	raw, err := src.GetPayload(ctx, rc.InitWeightsHash)
	if err != nil {
		return nil, fmt.Errorf("initial weights %s: %w", rc.InitWeightsHash, err)
	}
	if wire.ContentHash(raw) != rc.InitWeightsHash {
		return nil, fmt.Errorf("initial weights blob does not hash to %s", rc.InitWeightsHash)
	}
	tensors, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("initial weights: %w", err)
	}
	parts, err := machine.SplitFragments(tensors, spec.Architecture.FragmentCount)
	if err != nil {
		return nil, err
	}
	frags := make([]*machine.FragLayout, len(parts))
	weights := make([][]byte, len(parts))
	moms := make([][]byte, len(parts))
	hashes := make([]wire.Hash, len(parts))
	for i, ts := range parts {
		if frags[i], hashes[i], weights[i], err = machine.BuildFragment(ts); err != nil {
			return nil, err
		}
	}
	rep := &ReplayReport{}
	if machine.ModelHash(hashes) != rc.InitModelHash {
		rep.Divergence = &Divergence{What: "initial weights give model hash " + machine.ModelHash(hashes).String() + ", receipt says " + rc.InitModelHash.String()}
		return rep, nil
	}
	o := spec.Outer()
	wantCodec, err := resolveCodec(ctx, eng, spec)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	for _, round := range rounds {
		if len(round.Fragments) != len(frags) {
			rep.Divergence = &Divergence{Round: round.Round, What: fmt.Sprintf("transcript has %d fragments, the model %d", len(round.Fragments), len(frags))}
			return rep, nil
		}
		for _, fc := range round.Fragments {
			i := fc.Fragment
			if i < 0 || i >= len(frags) {
				rep.Divergence = &Divergence{Round: round.Round, Fragment: i, What: "fragment index out of range"}
				return rep, nil
			}
			div := func(format string, a ...any) (*ReplayReport, error) {
				rep.Divergence = &Divergence{Round: round.Round, Fragment: i, What: fmt.Sprintf(format, a...)}
				return rep, nil
			}
			if fc.WeightsBefore != hashes[i] {
				return div("weights before are %s, transcript says %s", hashes[i], fc.WeightsBefore)
			}
			if w, got := machine.CodecRefOf(wantCodec), fc.Codec; (w == nil) != (got == nil) || w != nil && (w.Hash != got.Hash || !sameJSON(w.Params, got.Params)) {
				return div("the transcript's codec %s is not the spec's compression %s", machine.CodecText(got), machine.CodecText(w))
			}
			if fc.Status != wire.FragAggregated {
				if fc.WeightsAfter != hashes[i] {
					return div("%s fragment changed weights", fc.Status)
				}
				continue
			}
			var inputs [][]byte
			var idx []int
			for k, in := range fc.Inputs {
				if in.Rejected != "" {
					continue
				}
				p, err := src.GetPayload(ctx, in.PayloadHash)
				if err != nil {
					return nil, fmt.Errorf("round %d fragment %d payload %s: %w", round.Round, i, in.PayloadHash, err)
				}
				if got := wire.ContentHash(p); got != in.PayloadHash {
					return div("payload of %s hashes to %s, transcript says %s", in.TrainerDID, got, in.PayloadHash)
				}
				var codec *RuleRef
				if fc.Codec != nil {
					codec = &RuleRef{Name: fc.Codec.Name, Hash: fc.Codec.Hash, Params: fc.Codec.Params}
				}
				v, _, err := payloadValues(ctx, eng, codec, frags[i], p)
				if err != nil {
					return div("payload of %s: %v", in.TrainerDID, err)
				}
				inputs = append(inputs, v)
				idx = append(idx, k)
			}
			// The transcript's verdicts stand (no verifier runs again): the
			// kept inputs go through the engine's one Finalize.
			fin := FinalizeInput{Rule: RuleRef{Name: fc.Rule, Hash: fc.RuleHash, Params: fc.RuleParams}, Outer: RuleRef{Name: "Nesterov", Hash: fc.OuterHash},
				Dtype: frags[i].Dtype, N: int(frags[i].N), Weights: BytesValues(weights[i]), LR: o.LR, Beta: o.Momentum, Nesterov: o.Nesterov}
			for _, v := range inputs {
				fin.Inputs = append(fin.Inputs, BytesValues(v))
			}
			if moms[i] != nil {
				m := BytesValues(moms[i])
				fin.Momentum = &m
			}
			res, err := eng.Finalize(ctx, fin)
			if err != nil {
				return div("finalize failed: %v", err)
			}
			if res.Status != wire.FragAggregated {
				return div("finalize gave %s (%s), transcript says %s", res.Status, res.Reason, fc.Status)
			}
			if res.AggregateHash != fc.AggregateHash {
				return div("aggregate hash %s, transcript says %s", res.AggregateHash, fc.AggregateHash)
			}
			for j, k := range idx {
				if sel := res.Selected[j]; sel != fc.Inputs[k].Selected {
					return div("input %s selected=%v, transcript says %v", fc.Inputs[k].TrainerDID, sel, fc.Inputs[k].Selected)
				}
			}
			enc, err := machine.EncodeFragment(frags[i], res.Weights)
			if err != nil {
				return nil, err
			}
			weights[i], moms[i], hashes[i] = res.Weights, res.Momentum, wire.ContentHash(enc)
			if hashes[i] != fc.WeightsAfter {
				return div("weights after are %s, transcript says %s", hashes[i], fc.WeightsAfter)
			}
			if h := wire.ContentHash(res.Momentum); h != fc.MomentumAfter {
				return div("momentum after is %s, transcript says %s", h, fc.MomentumAfter)
			}
			rep.Aggregations++
		}
		if m := machine.ModelHash(hashes); m != round.ModelHash {
			rep.Divergence = &Divergence{Round: round.Round, Fragment: -1, What: fmt.Sprintf("model hash %s, transcript says %s", m, round.ModelHash)}
			return rep, nil
		}
		rep.Rounds++
		if progress != nil {
			progress(round.Round, len(rounds))
		}
	}
	rep.FinalModelHash = machine.ModelHash(hashes)
	rep.Match = rep.FinalModelHash == rc.FinalModelHash
	if !rep.Match {
		rep.Divergence = &Divergence{Round: uint64(len(rounds)), Fragment: -1, What: "final model hash " + rep.FinalModelHash.String() + ", receipt says " + rc.FinalModelHash.String()}
	}
	return rep, nil
}
