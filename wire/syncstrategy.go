package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MaxSyncStrategyBytes bounds the spec's sync_strategy value.
const MaxSyncStrategyBytes = 64

// Sync strategies (docs/protocol/overlap.md). They say how a trainer
// computes its submission for a round; what the syncer and the chain compute
// from the submissions does not depend on them.
const (
	// SyncBlocking: the submission for round r is θ_r − θ after H inner
	// steps from θ_r, the committed weights of round r (the default).
	SyncBlocking = "blocking"
	// SyncEager: the trainer starts round r+1's inner phase at once from a
	// local proxy (θ_r with its own outer gradient applied by the outer
	// step); its submission for round r+1 is the inner progress made since
	// that proxy (Kale, Douillard, Donchev 2025).
	SyncEager = "eager"
	// SyncStreaming: fragment f is synchronised at its own offset s_f of
	// each inner phase; the submission for round r, fragment f is θ_{r,f}
	// (the committed weights of fragment f the trainer merged) − the
	// trainer's fragment f at step s_f of phase r, queued until round r is
	// open; fragment commits are merged mid-phase (Douillard et al. 2025).
	SyncStreaming = "streaming"
)

// SyncStrategyRef parses the spec's sync_strategy field strictly: absent
// means SyncBlocking; otherwise it must be the JSON string "blocking",
// "eager" or "streaming" (null, "", other strings and other JSON types are
// refused).
func (s *TaskSpec) SyncStrategyRef() (string, error) {
	if len(s.SyncStrategy) == 0 {
		return SyncBlocking, nil
	}
	v, err := ParseSyncStrategy(s.SyncStrategy)
	if err != nil {
		return "", fmt.Errorf("spec: sync_strategy: %w", err)
	}
	return v, nil
}

// ParseSyncStrategy parses one sync_strategy value: a JSON string naming a
// strategy this version implements.
func ParseSyncStrategy(raw []byte) (string, error) {
	if len(raw) > MaxSyncStrategyBytes {
		return "", fmt.Errorf("%d bytes, limit %d", len(raw), MaxSyncStrategyBytes)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("want the string %q, %q or %q, got %s", SyncBlocking, SyncEager, SyncStreaming, trunc(string(raw)))
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("want a JSON string: %w", err)
	}
	switch v {
	case SyncBlocking, SyncEager, SyncStreaming:
		return v, nil
	}
	return "", fmt.Errorf("unknown strategy %q (want %q, %q or %q)", trunc(v), SyncBlocking, SyncEager, SyncStreaming)
}
