package chain

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/tenzro/train/wire"
)

// TestInclusionPath checks our RFC 6962 path against transparency-dev's
// verifier for every index of trees of 1..33 leaves.
func TestInclusionPath(t *testing.T) {
	for n := 1; n <= 33; n++ {
		var leaves [][]byte
		for i := 0; i < n; i++ {
			leaves = append(leaves, rfc6962.DefaultHasher.HashLeaf([]byte(fmt.Sprint(i))))
		}
		tr := newTreeRoot()
		for i := 0; i < n; i++ {
			_ = tr.add([]byte(fmt.Sprint(i)))
		}
		root, _ := tr.root()
		for m := 0; m < n; m++ {
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, uint64(m), uint64(n), leaves[m], inclusionPath(leaves, uint64(m)), root[:]); err != nil {
				t.Fatalf("n=%d m=%d: %v", n, m, err)
			}
		}
	}
}

// TestRunRootProof seals five runs and proves each run root against the
// committed app hash; a wrong root, path or app hash is refused.
func TestRunRootProof(t *testing.T) {
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	runBlock(t, h, []txCase{{"register", must(RegisterSyncerTx(ManualChainID, w.candA, "10", 1)), CodeOK}})
	var roots []wire.Hash
	for i := 0; i < 5; i++ {
		task := fmt.Sprintf("p-%d", i)
		spec := testSpec(task, w.sponsor.DID.String(), 1, 1, 1, 1, "")
		n := uint64(2 + i)
		runBlock(t, h, []txCase{
			{"post", must(PostTaskTx(ManualChainID, w.sponsor, spec, testLayout(1, task), meanRules(t), n)), CodeOK},
			{"proof", must(ElectionProofTx(ManualChainID, w.candA, task, vrfProof(t, w.candA, task, spec), 10*n)), CodeOK},
			{"enrol", must(EnrollTx(ManualChainID, w.t1, task, "1", 10*n)), CodeOK},
			{"record", must(SubmissionTx(ManualChainID, w.t1, task, 0, 0, wire.ContentHash([]byte(task)), 4)), CodeOK},
		})
		runBlock(t, h, []txCase{{"commit", h.commit(task, 0, w.candA, 0, wire.FragAggregated, "", 10*n+1), CodeOK}})
		runBlock(t, h, []txCase{{"sign", h.signReceipt(task, w.candA), CodeOK}})
		roots = append(roots, h.run(task).Seal.RunRoot)
	}
	_, appHash := h.app.LastCommit()
	for i := 0; i < 5; i++ {
		code, raw := h.query(QueryRunProof, fmt.Sprintf("p-%d", i))
		if code != 0 {
			t.Fatal(raw)
		}
		var p RunRootProof
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			t.Fatal(err)
		}
		if p.LeafIndex != uint64(i) || p.LogSize != 5 {
			t.Fatalf("proof %d: index %d size %d", i, p.LeafIndex, p.LogSize)
		}
		if err := VerifyRunRootProof(&p, appHash, roots[i]); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if err := VerifyRunRootProof(&p, appHash, roots[(i+1)%5]); err == nil || !strings.Contains(err.Error(), "receipt's run root") {
			t.Fatalf("another run's root accepted: %v", err)
		}
		if err := VerifyRunRootProof(&p, sha256.Sum256([]byte("other")), roots[i]); err == nil || !strings.Contains(err.Error(), "header says") {
			t.Fatalf("wrong app hash accepted: %v", err)
		}
		bad := p
		bad.Path = append([]wire.Hash{}, p.Path...)
		bad.Path[0][0] ^= 1
		if err := VerifyRunRootProof(&bad, appHash, roots[i]); err == nil || !strings.Contains(err.Error(), "inclusion") {
			t.Fatalf("tampered path accepted: %v", err)
		}
	}
	if code, msg := h.query(QueryRunProof, "nope"); code != CodeNotFound {
		t.Fatalf("unknown run: %d %s", code, msg)
	}
}
