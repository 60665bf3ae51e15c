package rpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

// replayCounter is a challenge service whose replays block until released
// and which records how many ran and how many ran at once.
type replayCounter struct {
	fakeChallenges
	mu        sync.Mutex
	running   int
	maxAtOnce int
	runs      int
	started   chan struct{}
	release   chan struct{}
	// commit names fragment 3's current commit (its result hash's first
	// byte and its height); every other fragment's is fixed.
	commit byte
}

func (c *replayCounter) commitOf(frag uint64) (wire.Hash, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var h wire.Hash
	h[0], h[1] = byte(frag), 1
	if frag == 3 {
		h[1] = c.commit
	}
	return h, int64(h[1])
}

// CommitOf names the commit a replay re-executes (rpc.CommitNamer).
func (c *replayCounter) CommitOf(_ context.Context, _ string, _, frag uint64) (wire.Hash, int64, error) {
	h, ht := c.commitOf(frag)
	return h, ht, nil
}

func (c *replayCounter) ReplayFragment(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.ReplayFragmentResult, error) {
	c.mu.Lock()
	c.running++
	c.runs++
	c.maxAtOnce = max(c.maxAtOnce, c.running)
	c.mu.Unlock()
	c.started <- struct{}{}
	<-c.release
	c.mu.Lock()
	c.running--
	c.mu.Unlock()
	h, _ := c.commitOf(p.Fragment)
	return &wire.ReplayFragmentResult{TaskID: p.TaskID, Round: p.Round, Fragment: p.Fragment, Committed: h, Result: h, Agrees: true}, nil
}

// Finding 7 of issue 22: a ~1 KB batch of 8 replayFragment calls took a
// node from 3.9 to 12.3 GB. Replays are now refused in batches, run under a
// byte budget (here room for two at once), and one (task, round, fragment)
// is executed once however many ask.
func TestReplayBudgetBatchAndCache(t *testing.T) {
	cs := &replayCounter{started: make(chan struct{}, 64), release: make(chan struct{}), commit: 1}
	h := newHarness(t, rpc.Options{Challenges: cs, HeavyMemoryBytes: 2 << 30, ReplayBytes: 1 << 30, LargeWait: 5 * time.Minute})

	// A batch of 8 replays: every one refused, none executed.
	var batch []string
	for i := 0; i < 8; i++ {
		batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"task_id":"t","round":0,"fragment":%d}}`, i, wire.MethodReplayFragment, i))
	}
	_, b := h.post(t, "["+strings.Join(batch, ",")+"]")
	var resps []struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &resps); err != nil || len(resps) != 8 {
		t.Fatalf("batch answer %s: %v", b, err)
	}
	for i, r := range resps {
		if r.Error == nil || r.Error.Code != rpc.CodeInvalidRequest || !strings.Contains(r.Error.Message, "refused inside a batch") {
			t.Fatalf("batch element %d: %+v", i, r.Error)
		}
	}
	cs.mu.Lock()
	if cs.runs != 0 {
		t.Fatalf("%d replays ran from a batch", cs.runs)
	}
	cs.mu.Unlock()

	// Six distinct fragments and, for fragment 0, ten identical callers.
	var wg sync.WaitGroup
	errs := make(chan string, 32)
	one := func(frag int) {
		defer wg.Done()
		_, b := h.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":{"task_id":"t","round":0,"fragment":%d}}`, wire.MethodReplayFragment, frag))
		if !strings.Contains(string(b), `"agrees":true`) {
			errs <- string(b)
		}
	}
	for f := 0; f < 6; f++ {
		wg.Add(1)
		go one(f)
	}
	for i := 0; i < 9; i++ {
		wg.Add(1)
		go one(0)
	}
	// Release the replays one at a time as they start.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for {
		select {
		case <-cs.started:
			cs.release <- struct{}{}
			continue
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatal("replays did not finish")
		}
		break
	}
	close(errs)
	for e := range errs {
		t.Errorf("replay answer: %s", e)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.maxAtOnce > 2 {
		t.Errorf("%d replays ran at once; the budget has room for 2", cs.maxAtOnce)
	}
	if cs.runs > 6 {
		t.Errorf("%d executions for 6 distinct fragments (identical calls must share one)", cs.runs)
	}
	// Asked again: answered from the cache, nothing executes.
	before := cs.runs
	cs.mu.Unlock()
	_, b = h.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":{"task_id":"t","round":0,"fragment":3}}`, wire.MethodReplayFragment))
	cs.mu.Lock()
	if !strings.Contains(string(b), `"agrees":true`) || cs.runs != before {
		t.Fatalf("cached replay: %s, executions %d → %d", b, before, cs.runs)
	}
	// Fragment 3's commit rolled back by an upheld challenge and redone:
	// the replay runs again and answers for the new commit, not the cached
	// one (an e2e wrong-score run saw the watcher answer the discarded
	// commit for a minute).
	cs.commit = 2
	cs.mu.Unlock()
	go func() {
		select {
		case <-cs.started:
			cs.release <- struct{}{}
		case <-time.After(2 * time.Minute):
		}
	}()
	_, b = h.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":{"task_id":"t","round":0,"fragment":3}}`, wire.MethodReplayFragment))
	cs.mu.Lock()
	var redone struct {
		Result wire.ReplayFragmentResult `json:"result"`
	}
	if err := json.Unmarshal(b, &redone); err != nil || redone.Result.Committed[1] != 2 || cs.runs != before+1 {
		t.Fatalf("replay after the commit was redone: %s (%v), executions %d → %d", b, err, before, cs.runs)
	}
	runs, hits := h.srv.HeavyStats()
	if hits == 0 {
		t.Error("no cache hit recorded")
	}
	// The node's /metrics reads the same counts.
	reg := prometheus.NewRegistry()
	if err := rpc.RegisterGauges(reg, rpc.NodeGauges{
		ReplayRuns: func() float64 { r, _ := h.srv.HeavyStats(); return float64(r) },
		ReplayHits: func() float64 { _, x := h.srv.HeavyStats(); return float64(x) },
	}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if got["tenzro_replay_runs_total"] != float64(runs) || got["tenzro_replay_cache_hits_total"] != float64(hits) {
		t.Errorf("metrics %v, HeavyStats runs %d hits %d", got, runs, hits)
	}
}
