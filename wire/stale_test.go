package wire_test

import (
	"testing"

	"github.com/tenzro/train/wire"
)

// vecStaleResultHash is challenges.md §9's commit with input 2 (did:b) a
// replay of its own round-1 input (copies.md §6).
const vecStaleResultHash = "d6f56be880bee800700660366200b0e43e8ec0830638134a436541480a37cd98"

// TestFragmentResultHashStaleVerdict: a stale verdict hashes as U64(3) ‖
// U64(stale_of_round); the round named is part of the result, and a commit
// without one hashes as before.
func TestFragmentResultHashStaleVerdict(t *testing.T) {
	c := vecCommit()
	if got := wire.FragmentResultHash(c).String(); got != vecResultHash {
		t.Fatalf("a commit without stale verdicts changed its hash: %s", got)
	}
	one := uint64(1)
	c.Inputs[1].Rejected, c.Inputs[1].StaleOfRound = "replay", &one
	got := wire.FragmentResultHash(c)
	if got.String() != vecStaleResultHash {
		t.Fatalf("FragmentResultHash with a stale verdict = %s", got)
	}
	zero := uint64(0)
	c.Inputs[1].StaleOfRound = &zero
	if wire.FragmentResultHash(c) == got {
		t.Fatal("stale_of_round is not in the result hash")
	}
	c.Inputs[1].StaleOfRound = nil
	if wire.FragmentResultHash(c) == got {
		t.Fatal("a stale verdict hashes like a plain rejection")
	}
	c.Inputs[1].CopyOf = "did:a"
	c.Inputs[1].StaleOfRound = &one
	cp := *c
	cp.Inputs = append([]wire.CommitInput(nil), c.Inputs...)
	cp.Inputs[1].StaleOfRound = nil
	if wire.FragmentResultHash(c) != wire.FragmentResultHash(&cp) {
		t.Fatal("copy_of does not take precedence over stale_of_round in the hash")
	}
}
