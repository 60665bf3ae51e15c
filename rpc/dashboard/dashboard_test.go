package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/rpc/dashboard"
	"github.com/tenzro/train/wire"
)

// fakeSource serves fixed views (test only): the dashboard's empty and
// early states, which the e2e test's run passes through too quickly to see.
type fakeSource struct {
	runs []wire.RunSummary
	run  *wire.RunView
	tr   []wire.RoundCommit
}

func (f fakeSource) ListRuns(context.Context, wire.ListRunsParams) ([]wire.RunSummary, error) {
	return f.runs, nil
}

func (f fakeSource) GetRun(_ context.Context, id string) (*wire.RunView, error) {
	if f.run == nil || f.run.TaskID != id {
		return nil, machine.Errf(machine.KindNotFound, "no run %q", id)
	}
	return f.run, nil
}

func (f fakeSource) GetTranscript(context.Context, string) ([]wire.RoundCommit, error) {
	return f.tr, nil
}

func (f fakeSource) GetReceipt(context.Context, string) (*wire.Receipt, error) {
	return nil, machine.Errf(machine.KindNotFound, "not sealed")
}

func (f fakeSource) ReportedMetrics(context.Context, string) ([]wire.MetricsReport, error) {
	return nil, nil
}

func (f fakeSource) Info(context.Context) wire.NodeInfo {
	return wire.NodeInfo{Version: "test", NodeDID: "did:tenzro:machine:z6MkTEST", Role: "syncer"}
}

const spec = `{"task_id":"t-1","sponsor_did":"did:tenzro:human:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK","sponsor_address":"0x00000000000000000000000000000000000000aa",
 "architecture":{"family":"timesfm","param_count":200000000,"modality":"Timeseries","fragment_count":2,
 "dtype":"bf16","metadata":{}},"tier":"Open","aggregation":"Mean",
 "trainer_count":3,"quorum":2,"inner_steps":24,"max_rounds":5,"grace_window_ms":30000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://Qm...","dataset_hash":"0x...",
 "min_throughput":null,"created_at":1761350400}`

func get(t *testing.T, h http.Handler, path string) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestEmptyAndEarlyStates(t *testing.T) {
	if _, _, err := wire.ParseSpec([]byte(spec)); err != nil {
		t.Fatal(err)
	}
	run := &wire.RunView{TaskID: "t-1", TaskSpec: json.RawMessage(spec), Status: wire.StatusAwaiting, Escrow: "1000000000000000000000",
		Trainers: []wire.TrainerView{}, TrainerMetrics: map[string]wire.TrainerMetrics{},
		Fragments: []wire.FragmentView{{Index: 0}, {Index: 1}}, Aggregation: json.RawMessage(`{"name":"Mean"}`)}
	const a, b = "did:tenzro:machine:zA", "did:tenzro:machine:zB"
	mid := &wire.RunView{TaskID: "t-1", TaskSpec: json.RawMessage(spec), Status: wire.StatusRunning, Escrow: "1000000000000000000000",
		Round: 2, RoundStartedMs: time.Now().UnixMilli(), ChallengeWindowBlocks: 4, FinalRounds: 1,
		PendingFinal:   []wire.RoundFinality{{Round: 1, FinalAt: 88}},
		Trainers:       []wire.TrainerView{{DID: a, Status: wire.TrainerActive, Stake: "1"}, {DID: b, Status: wire.TrainerActive, Stake: "1"}},
		TrainerMetrics: map[string]wire.TrainerMetrics{a: {Submitted: 3, Accepted: 1, CurrentReward: "0"}, b: {Submitted: 1, Accepted: 1, CurrentReward: "0"}},
		Fragments:      []wire.FragmentView{{Index: 0, Accepted: 1, Committed: true}, {Index: 1}}, Aggregation: json.RawMessage(`{"name":"Mean"}`)}
	midTr := []wire.RoundCommit{
		{Round: 0, Fragments: []wire.FragmentCommit{{Fragment: 0, Status: wire.FragAggregated, Inputs: []wire.CommitInput{{TrainerDID: a}, {TrainerDID: b}}}}},
		{Round: 1, Fragments: []wire.FragmentCommit{{Fragment: 0, Status: wire.FragAggregated, Inputs: []wire.CommitInput{{TrainerDID: a}}}}},
	}
	for _, c := range []struct {
		name, path string
		src        fakeSource
		code       int
		want       []string
	}{
		{"no runs", "/", fakeSource{}, 200, []string{"No runs yet", "tenzro train post-task"}},
		{"runs", "/", fakeSource{runs: []wire.RunSummary{{TaskID: "a", Status: wire.StatusSealed, Round: 9, Rounds: 10, Tier: "Open"},
			{TaskID: "b", Status: wire.StatusRunning, Round: 3, Rounds: 10}}}, 200,
			[]string{`href="/runs/a"`, "10 / 10 rounds committed", "3 / 10 rounds committed", `class="pill sealed"`}},
		{"a run awaiting trainers", "/runs/t-1", fakeSource{run: run}, 200, []string{`id="loss-empty"`, "No trainer has enrolled yet",
			"not yet (the election runs when the run starts)", "The receipt is written when the run seals", "1000 TNZO", "0 / 5"}},
		// Issue 27 item 4: mid-run, pending submissions beside the final
		// counters, the round's progress and when pending ones count.
		{"a run mid-round", "/runs/t-1", fakeSource{run: mid, tr: midTr}, 200, []string{`id="progress"`,
			"round 2 of 5: 1 of 2 fragments committed, 1 submissions recorded", "round deadline in", "accepted (final)",
			`<td class="pending">2: 1 kept, 0 rejected</td>`, `<td class="pending">0</td>`, "4 blocks after the commit", "1 of 2 committed rounds are final; round 1 final at height 88"}},
		{"unknown run", "/runs/nope", fakeSource{run: run}, 404, []string{"no run"}},
		{"verify before the seal", "/runs/t-1/verify", fakeSource{run: run}, 400, []string{"no receipt to verify"}},
		{"stylesheet", "/style.css", fakeSource{}, 200, []string{".chart"}},
	} {
		h := dashboard.Handler(c.src, dashboard.Options{})
		code, body := get(t, h, c.path)
		if code != c.code {
			t.Errorf("%s: status %d, want %d", c.name, code, c.code)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: page lacks %q", c.name, w)
			}
		}
	}
}

// Finding 10 of issue 22: the dashboard may not be framed by another page
// (clickjacking of the verify button).
func TestDashboardRefusesFraming(t *testing.T) {
	rec := httptest.NewRecorder()
	dashboard.Handler(fakeSource{}, dashboard.Options{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q lacks frame-ancestors 'none'", csp)
	}
	if xfo := rec.Header().Get("X-Frame-Options"); xfo != "DENY" {
		t.Errorf("X-Frame-Options %q", xfo)
	}
}
