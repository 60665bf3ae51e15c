package runroot

import (
	"encoding/hex"
	"testing"

	"github.com/tenzro/train/wire"
)

// docLeaves are the leaves of docs/protocol/runroot.md §4:
// SHA-256("spec"), SHA-256("round-0"), SHA-256("round-1"), SHA-256("final").
func docLeaves() [][]byte {
	var out [][]byte
	for _, s := range []string{"spec", "round-0", "round-1", "final"} {
		h := wire.SHA256([]byte(s))
		out = append(out, h[:])
	}
	return out
}

func TestDocVector(t *testing.T) {
	leaves := docLeaves()
	got := map[string]string{
		"empty": hex.EncodeToString(Hasher{}.EmptyRoot()),
		"leaf0": hex.EncodeToString(Hasher{}.HashLeaf(leaves[0])),
		"root1": Root(leaves[:1]).String(),
		"root3": Root(leaves[:3]).String(),
		"root4": Root(leaves).String(),
	}
	p, err := InclusionProof(leaves[:3], 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range p {
		got["proof3_2_"+string(rune('0'+i))] = h.String()
	}
	for k, want := range docVector {
		if got[k] != want {
			t.Errorf("%s = %s, want %s", k, got[k], want)
		}
	}
	if len(got) != len(docVector) {
		t.Errorf("vector has %d values, computed %d: %v", len(docVector), len(got), got)
	}
}

// docVector: keep in step with docs/protocol/runroot.md §4.
var docVector = map[string]string{
	"empty":      "468cd0304d897767cc461b28efc3f600c0bc9d8b6eb70244125f966b5b7808f5",
	"leaf0":      "d82d8628777c0ea271f19c880ee0f6d7efda4f49457e7563248accf7a1074c32",
	"root1":      "d82d8628777c0ea271f19c880ee0f6d7efda4f49457e7563248accf7a1074c32",
	"root3":      "dd8eaba17d3fb8d86d757578c1fa04612f1e9a2ffbfe3b7fcd9ffd07eb23e225",
	"root4":      "b821362544429dc002bf4c9ec6a32d6f7f825959151a4f7ce5c37d627dc86088",
	"proof3_2_0": "b67b19b16c27c77ac37f193080854c9a59e8136fa057a8e544b22c0094ee3cb4",
}
