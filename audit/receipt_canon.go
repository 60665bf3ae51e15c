package audit

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/wire"
)

// CanonicalRoundCommit is the RFC 8785 (JCS) form of a round commit's JSON,
// the bytes its hash covers and the transcript blob holds: exactly
// jcs.Transform(json.Marshal(rc)). It writes the known schema directly (keys
// in sorted order, JCS string escaping) instead of marshalling and
// re-parsing, which was most of the cost of hashing and checking a
// transcript; a commit holding what that path does not cover (a string with
// a control character or invalid UTF-8, an integer beyond 2^53) takes the
// generic path. TestCanonicalRoundCommitMatchesJCS and FuzzCanonicalRoundCommit
// hold the two equal.
func CanonicalRoundCommit(rc *wire.RoundCommit) ([]byte, error) {
	e := canonEnc{b: make([]byte, 0, 512+len(rc.Fragments)*(640+len(rcInputs(rc))*160))}
	e.roundCommit(rc)
	if e.err == nil {
		return e.b, nil
	}
	if !errors.Is(e.err, errSlowPath) {
		return nil, e.err
	}
	raw, err := json.Marshal(rc)
	if err != nil {
		return nil, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalize round commit: %w", err)
	}
	return canon, nil
}

func rcInputs(rc *wire.RoundCommit) []wire.CommitInput {
	if len(rc.Fragments) == 0 {
		return nil
	}
	return rc.Fragments[0].Inputs
}

// errSlowPath: the commit holds a value the direct encoder does not cover.
var errSlowPath = errors.New("canonical encoder: take the generic path")

// maxExact is the largest integer every IEEE-754 double holds exactly: JCS
// prints numbers as doubles, so larger ones take the generic path.
const maxExact = 1 << 53

type canonEnc struct {
	b   []byte
	err error
}

func (e *canonEnc) raw(s string) { e.b = append(e.b, s...) }

// str writes a JSON string as JCS does: only '"' and '\' escaped among
// printable characters, UTF-8 as is. Control characters and invalid UTF-8
// take the generic path.
func (e *canonEnc) str(s string) {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			e.err = errSlowPath
			return
		}
	}
	if !utf8.ValidString(s) {
		e.err = errSlowPath
		return
	}
	e.b = append(e.b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			e.b = append(e.b, s[start:i]...)
			e.b = append(e.b, '\\', c)
			start = i + 1
		}
	}
	e.b = append(e.b, s[start:]...)
	e.b = append(e.b, '"')
}

func (e *canonEnc) hash(h wire.Hash) {
	e.b = append(e.b, '"')
	e.b = appendHex(e.b, h[:])
	e.b = append(e.b, '"')
}

const hexDigits = "0123456789abcdef"

func appendHex(b, p []byte) []byte {
	for _, c := range p {
		b = append(b, hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

func (e *canonEnc) u64(v uint64) {
	if v > maxExact {
		e.err = errSlowPath
		return
	}
	e.b = strconv.AppendUint(e.b, v, 10)
}

func (e *canonEnc) int(v int) {
	if v > maxExact || v < -maxExact {
		e.err = errSlowPath
		return
	}
	e.b = strconv.AppendInt(e.b, int64(v), 10)
}

// rawJSON writes a json.RawMessage member as json.Marshal then JCS would:
// nil is null, anything else its JCS form (small: rule and codec params).
func (e *canonEnc) rawJSON(m json.RawMessage) {
	if m == nil {
		e.raw("null")
		return
	}
	if string(m) == "{}" {
		e.raw("{}")
		return
	}
	c, err := jcs.Transform(m)
	if err != nil {
		e.err = fmt.Errorf("canonicalize round commit: %w", err)
		return
	}
	e.b = append(e.b, c...)
}

func (e *canonEnc) strs(v []string) {
	if v == nil {
		e.raw("null")
		return
	}
	e.b = append(e.b, '[')
	for i, s := range v {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(s)
	}
	e.b = append(e.b, ']')
}

func (e *canonEnc) hashes(v []wire.Hash) {
	if v == nil {
		e.raw("null")
		return
	}
	e.b = append(e.b, '[')
	for i, h := range v {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.hash(h)
	}
	e.b = append(e.b, ']')
}

func (e *canonEnc) bool(v bool) {
	if v {
		e.raw("true")
	} else {
		e.raw("false")
	}
}

// roundCommit writes wire.RoundCommit's members in sorted key order.
func (e *canonEnc) roundCommit(rc *wire.RoundCommit) {
	e.raw(`{"equivocations":`)
	e.hashes(rc.Equivocations)
	e.raw(`,"evicted":`)
	e.strs(rc.Evicted)
	e.raw(`,"fragments":`)
	if rc.Fragments == nil {
		e.raw("null")
	} else {
		e.b = append(e.b, '[')
		for i := range rc.Fragments {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.fragment(&rc.Fragments[i])
		}
		e.b = append(e.b, ']')
	}
	e.raw(`,"joined":`)
	e.strs(rc.Joined)
	e.raw(`,"left":`)
	e.strs(rc.Left)
	e.raw(`,"missed":`)
	e.strs(rc.Missed)
	e.raw(`,"model_hash":`)
	e.hash(rc.ModelHash)
	e.raw(`,"round":`)
	e.u64(rc.Round)
	e.raw(`,"task_id":`)
	e.str(rc.TaskID)
	e.b = append(e.b, '}')
}

// fragment writes wire.FragmentCommit's members in sorted key order
// (reason and codec omitted when empty, as json.Marshal does).
func (e *canonEnc) fragment(fc *wire.FragmentCommit) {
	e.raw(`{"aggregate_hash":`)
	e.hash(fc.AggregateHash)
	if fc.Codec != nil {
		e.raw(`,"codec":{"hash":`)
		e.hash(fc.Codec.Hash)
		e.raw(`,"name":`)
		e.str(fc.Codec.Name)
		e.raw(`,"params":`)
		e.rawJSON(fc.Codec.Params)
		e.b = append(e.b, '}')
	}
	e.raw(`,"fragment":`)
	e.int(fc.Fragment)
	e.raw(`,"fuel":`)
	e.u64(fc.Fuel)
	e.raw(`,"inputs":`)
	if fc.Inputs == nil {
		e.raw("null")
	} else {
		e.b = append(e.b, '[')
		for i := range fc.Inputs {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			in := &fc.Inputs[i]
			e.b = append(e.b, '{')
			if in.CopyOf != "" {
				e.raw(`"copy_of":`)
				e.str(in.CopyOf)
				e.b = append(e.b, ',')
			}
			e.raw(`"payload_hash":`)
			e.hash(in.PayloadHash)
			if in.Rejected != "" {
				e.raw(`,"rejected":`)
				e.str(in.Rejected)
			}
			if sc := in.Score; sc != nil {
				e.raw(`,"score":{"ctl_after":`)
				e.str(fmt.Sprintf("%016x", uint64(sc.CtlAfter)))
				e.raw(`,"ctl_before":`)
				e.str(fmt.Sprintf("%016x", uint64(sc.CtlBefore)))
				if sc.Failed != "" {
					e.raw(`,"failed":`)
					e.str(sc.Failed)
				}
				e.raw(`,"own_after":`)
				e.str(fmt.Sprintf("%016x", uint64(sc.OwnAfter)))
				e.raw(`,"own_before":`)
				e.str(fmt.Sprintf("%016x", uint64(sc.OwnBefore)))
				e.raw(`,"pass":`)
				e.bool(sc.Pass)
				e.b = append(e.b, '}')
			}
			e.raw(`,"selected":`)
			e.bool(in.Selected)
			if len(in.Sketch) > 0 { // []byte: standard base64, as encoding/json writes it
				e.raw(`,"sketch":`)
				e.str(base64.StdEncoding.EncodeToString(in.Sketch))
			}
			if in.StaleOfRound != nil {
				e.raw(`,"stale_of_round":`)
				e.u64(*in.StaleOfRound)
			}
			e.raw(`,"trainer_did":`)
			e.str(in.TrainerDID)
			e.b = append(e.b, '}')
		}
		e.b = append(e.b, ']')
	}
	e.raw(`,"momentum_after":`)
	e.hash(fc.MomentumAfter)
	e.raw(`,"outer_hash":`)
	e.hash(fc.OuterHash)
	if fc.Reason != "" {
		e.raw(`,"reason":`)
		e.str(fc.Reason)
	}
	e.raw(`,"rule":`)
	e.str(fc.Rule)
	e.raw(`,"rule_hash":`)
	e.hash(fc.RuleHash)
	e.raw(`,"rule_params":`)
	e.rawJSON(fc.RuleParams)
	if sc := fc.Scoring; sc != nil {
		e.raw(`,"scoring":{"batch":`)
		e.int(sc.Batch)
		e.raw(`,"evaluator":`)
		e.str(sc.Evaluator)
		e.raw(`,"hash":`)
		e.hash(sc.Hash)
		e.raw(`,"params":`)
		e.rawJSON(sc.Params)
		e.raw(`,"rate_bps":`)
		e.int(sc.RateBps)
		e.raw(`,"seed":`)
		e.hash(sc.Seed)
		if sc.Test != "" {
			e.raw(`,"test":`)
			e.str(sc.Test)
		}
		e.b = append(e.b, '}')
	}
	e.raw(`,"status":`)
	e.str(fc.Status)
	e.raw(`,"syncer":`)
	e.str(fc.Syncer)
	e.raw(`,"ticket":`)
	e.u64(fc.Ticket)
	e.raw(`,"weights_after":`)
	e.hash(fc.WeightsAfter)
	e.raw(`,"weights_before":`)
	e.hash(fc.WeightsBefore)
	e.b = append(e.b, '}')
}
