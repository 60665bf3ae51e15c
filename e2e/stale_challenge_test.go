package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestChallengeWrongStaleFourValidators: on 4 validators, the run's first
// syncer commits round 1 fragment 0 naming the one honest trainer's fresh
// input a replay of its round-0 input (fault build, --fault-wrong-stale
// 1:0: an invented stale verdict, copies.md §6; with K=1 the commit is
// no_quorum, which the chain's own checks accept). The watcher re-executes
// and challenges; the validators re-execute and vote the challenger's
// result hash; the challenge is upheld, the syncer slashed and excluded;
// the next syncer redoes the fragment with the input kept; the trainer is
// never slashed for the verdict (a replay is settled only once its round
// is final, and the wrong one was rolled back before).
func TestChallengeWrongStaleFourValidators(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	t0 := time.Now()
	watcher, sponsor, trainer := chainKey(t, did.KindHuman, 81), chainKey(t, did.KindHuman, 82), chainKey(t, did.KindMachine, 83)
	c := newChallengeNet(t, []string{"--fault-wrong-stale", "1:0"}, watcher, sponsor, trainer)
	t.Logf("4 validators and a watcher up after %s", time.Since(t0).Round(time.Millisecond))
	const task = "wrong-stale-run"
	c.post(task, sponsor, trainer, "")
	c.submitRound(task, trainer, 0)
	c.waitFor("round 0 committed", 60*time.Second, func() bool { return c.run(task).Round == 1 })
	c.submitRound(task, trainer, 1)

	var ch wire.ChallengeRecord
	c.waitFor("the wrong stale verdict is challenged and decided", 120*time.Second, func() bool {
		chs := c.challenges(task)
		if len(chs) > 0 && chs[0].Outcome != wire.ChallengeOpen {
			ch = chs[0]
			return true
		}
		return false
	})
	if ch.Outcome != wire.ChallengeUpheld || ch.Round != 1 || ch.Fragment != 0 || ch.Challenger != watcher.DID.String() || ch.Ticket != 0 || ch.SyncerSlashed == "0" {
		t.Fatalf("challenge: %+v", ch)
	}
	if ch.Claimed == ch.Committed || ch.Result != ch.Claimed || len(ch.Votes) < 3 {
		t.Fatalf("challenge decided %s: committed %s, claimed %s, %d votes", ch.Result, ch.Committed, ch.Claimed, len(ch.Votes))
	}
	for _, v := range ch.Votes {
		if v.Unavailable || v.ResultHash != ch.Claimed {
			t.Fatalf("validator %s voted %s (unavailable %v), the challenger claimed %s", v.Validator, v.ResultHash, v.Unavailable, ch.Claimed)
		}
	}
	injected := false
	for _, n := range c.nodes {
		injected = injected || logHas(n, "FAULT INJECTED: committing an invented stale verdict", "round=1", "fragment=0")
	}
	if !injected {
		t.Fatal("no validator's log shows the injected stale verdict: the challenge was upheld for another reason")
	}
	if r := c.run(task); len(r.Excluded) != 1 || r.Excluded[0] != ch.Syncer {
		t.Fatalf("excluded syncers %v, want the slashed %s", r.Excluded, ch.Syncer)
	}
	t.Logf("wrong stale verdict (height %d) → slash (height %d): %s of block time, %d votes; syncer %s slashed %s",
		ch.CommitHeight, ch.Decided, c.blockTime(ch.Decided).Sub(c.blockTime(ch.CommitHeight)), len(ch.Votes), ch.Syncer, ch.SyncerSlashed)

	// The next syncer redoes round 1 fragment 0: the input is kept, the
	// fragment aggregated, and the run seals with the trainer unslashed.
	c.waitFor("the run seals", 120*time.Second, func() bool { return c.run(task).Status == wire.StatusSealed })
	rc := c.roundCommit(task, 1)
	found := false
	for _, fc := range rc.Fragments {
		if fc.Fragment != 0 {
			continue
		}
		found = true
		if fc.Syncer == ch.Syncer || fc.Status != wire.FragAggregated || len(fc.Inputs) != 1 {
			t.Fatalf("redone round 1 fragment 0: syncer %s (slashed %s), status %s, %d inputs", fc.Syncer, ch.Syncer, fc.Status, len(fc.Inputs))
		}
		if in := fc.Inputs[0]; in.TrainerDID != trainer.DID.String() || in.StaleOfRound != nil || in.Rejected != "" {
			t.Fatalf("redone round 1 fragment 0: the honest input is %+v", in)
		}
		if wire.FragmentResultHash(&fc) != ch.Claimed {
			t.Fatalf("the redone commit's result %s is not the one the validators voted, %s", wire.FragmentResultHash(&fc), ch.Claimed)
		}
	}
	if !found {
		t.Fatalf("redone round 1 has no fragment 0 commit: %+v", rc.Fragments)
	}
	raw, _ := query(t, c.nodes[0], chain.QueryRun, task)
	var view struct {
		Trainers []struct {
			DID     string `json:"did"`
			Slashed string `json:"slashed"`
		} `json:"trainers"`
	}
	if err := json.Unmarshal([]byte(raw), &view); err != nil {
		t.Fatal(err)
	}
	if len(view.Trainers) != 1 || view.Trainers[0].DID != trainer.DID.String() || view.Trainers[0].Slashed != "0" {
		t.Fatalf("trainers at the seal: %+v (want the honest trainer unslashed)", view.Trainers)
	}
	t.Logf("done after %s", time.Since(t0).Round(time.Millisecond))
}
