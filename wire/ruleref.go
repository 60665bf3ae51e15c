package wire

import "encoding/json"

// RuleRef is a resolved reference to a rule: which code runs (by hash) and
// with which canonical parameters. Round commits record it, and a posting
// carries the resolved references of its rule, verifiers, outer step and
// codec (docs/protocol/chain.md).
type RuleRef struct {
	// Name is the rule's id, e.g. "Mean", "TrimmedMean", "Nesterov", "Finite".
	Name string `json:"name"`
	// Hash identifies the code that runs: the SHA-256 of the plugin module
	// (as registered, before instrumentation) or of a native implementation's
	// identity string.
	Hash Hash `json:"hash"`
	// Params is the canonical (RFC 8785) JSON of the parameters; "{}" if none.
	Params json.RawMessage `json:"params"`
	// RoundLevel marks verifiers that judge an input against the other inputs
	// of its fragment (e.g. norm ratio to the round median). They run at
	// aggregation time through VerifyRound; the others run per submission.
	RoundLevel bool `json:"round_level,omitempty"`
}
