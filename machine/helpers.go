package machine

import (
	"fmt"

	"github.com/tenzro/train/wire"
)

// CandKey is a syncer candidate's key in KSMeta.
func CandKey(did string) []byte { return []byte("cand/" + did) }

// RunKey is a run's key in KSRuns.
func RunKey(task string) []byte { return []byte(task) }
func commitKey(task string, round uint64) []byte {
	return append([]byte("c/"+task+"/"), u64Bytes(round)...)
}

// ProofKey is the key of a DID's election proof for a run (KSMeta).
func ProofKey(task, did string) []byte { return []byte("proof/" + task + "/" + did) }

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

func orStrs(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

func orHashes(v []wire.Hash) []wire.Hash {
	if v == nil {
		return []wire.Hash{}
	}
	return v
}

// Dtype names the element type of fragment weights and payloads, as spelled
// in safetensors headers.
type Dtype string

// Element types the protocol accepts.
const (
	F32  Dtype = "F32"
	BF16 Dtype = "BF16"
)

// Size is the width of one element in bytes.
func (d Dtype) Size() int {
	switch d {
	case F32:
		return 4
	case BF16:
		return 2
	}
	return 0
}

// codecRef is the transcript's record of a codec.
func CodecRefOf(r *RuleRef) *wire.CodecRef {
	if r == nil {
		return nil
	}
	return &wire.CodecRef{Name: r.Name, Hash: r.Hash, Params: r.Params}
}

// CodecText renders a codec reference for refusal messages ("none" for nil).
func CodecText(c *wire.CodecRef) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("%s (sha256:%s) %s", c.Name, c.Hash, c.Params)
}

// RuleRef is a resolved reference to a rule (wire.RuleRef): which code runs
// (by hash) and with which canonical parameters.
type RuleRef = wire.RuleRef
