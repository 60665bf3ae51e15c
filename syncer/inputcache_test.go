package syncer_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

// TestInputCacheWarmColdRestart: the facts a node keeps of each input it
// accepted (inputcache.go) change no byte of a commit. Six trainers, N =
// 200,000 values (three times the kept prefix, so the copy rule continues
// the ingest read pass over the payload), rounds 0 and 1. Round 0 holds
// three honest inputs, a byte copy of trainer 0 re-bound to trainer 3
// (accepted at ingest, rejected by the copy rule), and two records this
// node never accepted (put on chain directly): a non-finite payload and a
// payload bound to another round. In round 1 trainer 2 replays its round-0
// values (the stale rule compares with the seeded input to the end), and
// trainer 5's record names trainer 1's payload, which the cache holds
// under trainer 1's binding (the binding is checked again). The
// same submissions go to a node with the cache on (every accepted input a
// hit at the commit), with it off, and with it on but restarted between
// the submissions and the commit (every input a miss): each round's
// committed FragmentResultHash and the commit's canonical bytes are equal
// in the three, and each commit's cold re-execution agrees.
func TestInputCacheWarmColdRestart(t *testing.T) {
	warm := inputCacheRun(t, nil, false, 4+6)
	cold := inputCacheRun(t, func(c *syncer.Config) { c.InputCacheBytes = -1 }, false, 0)
	restarted := inputCacheRun(t, nil, true, 0)
	for name, got := range map[string][]commitBytes{"cache off": cold, "restarted before each commit": restarted} {
		if len(got) != len(warm) {
			t.Fatalf("%s: %d commits, warm %d", name, len(got), len(warm))
		}
		for round := range warm {
			if got[round].result != warm[round].result || !bytes.Equal(got[round].canon, warm[round].canon) {
				t.Fatalf("round %d: %s commits differently from the warm node:\n%s\n%s", round, name, got[round].canon, warm[round].canon)
			}
		}
	}
}

type commitBytes struct {
	result wire.Hash // FragmentResultHash
	canon  []byte    // machine.CommitJCS
}

// inputCacheRun runs TestInputCacheWarmColdRestart's scenario and returns
// each round's commit; wantHits is the input cache's hits over the run.
func inputCacheRun(t *testing.T, configure func(*syncer.Config), restart bool, wantHits int64) []commitBytes {
	const M, N = 6, 200_000
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.configure = configure
	h.openChallengeableMean(M, 3, 3, N)
	tr := func(i int) string { return h.tr[i].DID.String() }
	// Round 0.
	first := make([]*wire.OuterGradient, M)
	for i := 0; i < 3; i++ {
		first[i] = h.gradient(i, 0, 0, 1)
		if err := h.submit(first[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.submit(h.rebind(first[0], 3, 1)); err != nil {
		t.Fatalf("a re-bound byte copy is a valid submission: %v", err)
	}
	nonFinite := h.gradient(4, 0, 0, 1)
	ts, _, _ := safetensors.Parse(nonFinite.GradientPayload, safetensors.DefaultLimits)
	v, _ := safetensors.F32Values(ts[0])
	v[N-5] = float32(math.Inf(-1)) // past the kept prefix
	p, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32(ts[0].Name, ts[0].Shape, v)}, bound(h.task, tr(4), 0, 0))
	resign(h, nonFinite, p)
	unbound := h.gradient(5, 0, 0, 1)
	ts, _, _ = safetensors.Parse(unbound.GradientPayload, safetensors.DefaultLimits)
	p, _ = safetensors.Encode(ts, bound(h.task, tr(5), 7, 0)) // bound to round 7
	resign(h, unbound, p)
	h.block(h.record(nonFinite), h.record(unbound))
	want := map[string]string{tr(3): "copy of", tr(4): "verifier Finite rejected", tr(5): "payload binding"}
	out := []commitBytes{inputCacheCommit(h, 0, restart, want)}
	// Round 1: trainer 2 replays its round-0 values, and trainer 5's record
	// names trainer 1's payload (bound to trainer 1; this node accepted it
	// for trainer 1, so the cache holds it under another binding).
	var g1 *wire.OuterGradient
	for i := 0; i < M-1; i++ {
		g := h.gradient(i, 1, 0, 1)
		if i == 2 {
			g = h.resend(first[2], 2, 1)
		}
		if i == 1 {
			g1 = g
		}
		if err := h.submit(g); err != nil {
			t.Fatal(err)
		}
	}
	byHash := h.gradient(5, 1, 0, 1)
	resign(h, byHash, g1.GradientPayload)
	h.block(h.record(byHash))
	out = append(out, inputCacheCommit(h, 1, restart, map[string]string{tr(2): "replay", tr(5): "payload binding"}))
	if hits, _ := h.node.InputCacheStats(); hits != wantHits {
		t.Fatalf("input cache hits %d, want %d", hits, wantHits)
	}
	return out
}

// inputCacheCommit closes round (restarting the node first when restart
// is set), checks each input's verdict (want: trainer → what its rejection
// says; the others kept) and the cold re-execution, and returns the commit.
func inputCacheCommit(h *harness, round int, restart bool, want map[string]string) commitBytes {
	h.t.Helper()
	if restart {
		h.open()
	}
	h.closeRound(round)
	re, err := h.node.Reexecute(context.Background(), h.task, uint64(round), 0)
	if err != nil {
		h.t.Fatal(err)
	}
	if !re.Agrees() || re.Commit == nil {
		h.t.Fatalf("round %d: the cold re-execution disagrees with the commit: %+v", round, re)
	}
	trs, err := h.node.GetTranscript(h.ctx, h.task)
	if err != nil {
		h.t.Fatal(err)
	}
	var fc *wire.FragmentCommit
	for k := range trs {
		if trs[k].Round == uint64(round) {
			fc = &trs[k].Fragments[0]
		}
	}
	if fc == nil {
		h.t.Fatalf("round %d: no commit in the transcript", round)
	}
	if fc.Status != wire.FragAggregated || len(fc.Inputs) != 6 {
		h.t.Fatalf("round %d: %s %s, %d inputs", round, fc.Status, fc.Reason, len(fc.Inputs))
	}
	for _, in := range fc.Inputs {
		if w := want[in.TrainerDID]; (w == "") != (in.Rejected == "") || !strings.Contains(in.Rejected, w) {
			h.t.Fatalf("round %d: %s rejected %q, want %q", round, in.TrainerDID, in.Rejected, w)
		}
	}
	canon, err := machine.CommitJCS(fc)
	if err != nil {
		h.t.Fatal(err)
	}
	res := wire.FragmentResultHash(fc)
	if res != re.Committed {
		h.t.Fatalf("round %d: the transcript's commit hashes to %s, the chain holds %s", round, res, re.Committed)
	}
	return commitBytes{result: res, canon: canon}
}
