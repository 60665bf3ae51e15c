package syncer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// phaseLog records the compute phases the node reports.
type phaseLog struct {
	mu     sync.Mutex
	counts map[string]int
}

func (p *phaseLog) FragmentCommitted(string, uint64, int, string, time.Duration) {}
func (p *phaseLog) RoundCommitted(string, uint64)                                {}
func (p *phaseLog) CommitCompute(phase string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d < 0 {
		phase += " (negative)"
	}
	p.counts[phase]++
}

// TestStaleRuleCacheColdWarm: N = 200,000 values (three times the cache's
// prefix), four trainers, rounds 0…3, trainer 3 replaying its round-0
// values from round 1 on. The syncer's commits of rounds 1 and 2 use the
// stale rule's cache (hits: the honest pairs are decided on the prefix, the
// replays fall back to the payload); each commit's re-execution, which runs
// cold, computes the same FragmentResultHash. Before round 3's commit the
// node restarts (an empty cache): that commit is computed cold, has the
// same verdicts, and re-executes to the same hash — a restart loses only
// speed. A second node with the cache off commits the same bytes in every
// round, and the warm node reports each commit's compute phases.
func TestStaleRuleCacheColdWarm(t *testing.T) {
	phases := &phaseLog{counts: map[string]int{}}
	warm := staleCacheRun(t, func(c *syncer.Config) { c.Observer = phases }, true)
	cold := staleCacheRun(t, func(c *syncer.Config) { c.QuantCacheBytes = -1 }, false)
	if !slices.Equal(warm, cold) {
		t.Fatalf("commits with and without the cache differ:\n%x\n%x", warm, cold)
	}
	for _, ph := range []string{syncer.PhaseVerify, syncer.PhaseCopyStale, syncer.PhaseFinalize, syncer.PhaseWrite} {
		if phases.counts[ph] != len(warm) {
			t.Errorf("phase %s reported %d times for %d commits (%v)", ph, phases.counts[ph], len(warm), phases.counts)
		}
	}
	if len(phases.counts) != 4 {
		t.Errorf("phases reported: %v", phases.counts)
	}
}

// openChallengeableMean opens the node, posts a one-fragment Mean run of m
// trainers, quorum k and rounds rounds over n values, challengeable for 3
// blocks (so the caches' entries outlive a round), and enrols every
// trainer with a stake of 1000.
func (h *harness) openChallengeableMean(m, k, rounds, n int) {
	h.t.Helper()
	h.open()
	h.faucet(h.sponsor.DID.String(), "2000000000000000000000")
	sp := strings.Replace(strings.Replace(string(spec(h.task, h.sponsor.DID.String(), m, k, 1, rounds)), `"param_count":16`, fmt.Sprintf(`"param_count":%d`, n), 1),
		`"aggregation":"Mean"`, challengeable+`"aggregation":"Mean"`, 1)
	if err := h.post([]byte(sp), initWeights(h.t, 1, n)); err != nil {
		h.t.Fatal(err)
	}
	for i := 0; i < m; i++ {
		h.faucet(h.tr[i].DID.String(), "1000")
		if err := h.enroll(i, "1000"); err != nil {
			h.t.Fatal(err)
		}
	}
}

// staleCacheRun runs the scenario of TestStaleRuleCacheColdWarm and returns
// each round's committed FragmentResultHash.
func staleCacheRun(t *testing.T, configure func(*syncer.Config), cached bool) []wire.Hash {
	const M, R, N = 4, 4, 200_000 // rounds 0…3 of a 5-round run (a last round seals: not challengeable)
	kv, _ := store.OpenInMemory()
	h := newHarness(t, kv)
	h.configure = configure
	h.openChallengeableMean(M, M-1, R+1, N)
	replayer := h.tr[3].DID.String()
	first := h.gradient(3, 0, 0, 1)
	var out []wire.Hash
	for round := 0; round < R; round++ {
		for i := 0; i < 3; i++ {
			if err := h.submit(h.gradient(i, round, 0, 1)); err != nil {
				t.Fatal(err)
			}
		}
		g := first
		if round > 0 {
			g = h.resend(first, 3, round)
		}
		if round == R-1 {
			h.open() // a restart: the cache is empty
			if hits, _ := h.node.QuantCacheStats(); hits != 0 {
				t.Fatalf("a restarted node has %d cache hits", hits)
			}
		}
		hitsBefore, _ := h.node.QuantCacheStats()
		if err := h.submit(g); err != nil {
			t.Fatal(err)
		}
		h.closeRound(round)
		hits, _ := h.node.QuantCacheStats()
		switch {
		case !cached || round == 0 || round == R-1:
			if hits != hitsBefore {
				t.Fatalf("round %d: %d cache hits with nothing cached", round, hits-hitsBefore)
			}
		case hits == hitsBefore:
			t.Fatalf("round %d: the commit did not use the cache", round)
		}
		re, err := h.node.Reexecute(context.Background(), h.task, uint64(round), 0)
		if err != nil {
			t.Fatal(err)
		}
		if !re.Agrees() || re.Commit == nil {
			t.Fatalf("round %d: the cold re-execution disagrees with the commit: %+v", round, re)
		}
		if re.Commit.Status != wire.FragAggregated {
			t.Fatalf("round %d: %s %s", round, re.Commit.Status, re.Commit.Reason)
		}
		for _, in := range re.Commit.Inputs {
			stale := in.StaleOfRound != nil
			if want := in.TrainerDID == replayer && round > 0; stale != want || (want && *in.StaleOfRound != uint64(round-1)) {
				t.Fatalf("round %d: %s: %+v", round, in.TrainerDID, in)
			}
		}
		out = append(out, re.Committed)
	}
	return out
}
