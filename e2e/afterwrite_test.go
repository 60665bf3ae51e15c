package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// afterWriteSpec is a one-fragment run of two trainers, quorum two: both
// submitting makes the fragment due at once, so the node's worker commits
// without waiting for a grace window.
func afterWriteSpec(sponsor string) string {
	return fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x00000000000000000000000000000000000000aa",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":1,
 "dtype":"f32","metadata":{"context_len":2048,"horizon":128}},"tier":"Open","aggregation":"Mean",
 "trainer_count":2,"quorum":2,"inner_steps":24,"max_rounds":3,"grace_window_ms":8000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://Qm...","dataset_hash":"0x...",
 "min_throughput":null,"created_at":1761350400}`, task, sponsor, F*N)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, e *env, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; node log tail:\n%s", what, tail(e.log()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// committedState is fragment 0's current weights hash (get-run).
func (e *env) committedWeights() (round int, wh wire.Hash) {
	var v struct {
		Round     int `json:"round"`
		Fragments []struct {
			WeightsHash wire.Hash `json:"weights_hash"`
		} `json:"fragments"`
	}
	if err := json.Unmarshal([]byte(e.must("train", "get-run", "--task-id", task, "--format", "json")), &v); err != nil {
		e.t.Fatal(err)
	}
	return v.Round, v.Fragments[0].WeightsHash
}

// TestCrashBetweenCommitAndStateWrite kills the node (SIGKILL, a real
// process) after its commit of round 0 reached the chain and before the
// durable write of the new weights and momentum (held by the faultinject
// build's --fault-hold-state-writes), restarts it, and requires the two
// blobs re-derived byte-identical to the committed hashes and the run to
// go on to the next round. Before the kill, GET /blobs/<hash> serves the
// pending weights from memory, byte-identical.
func TestCrashBetweenCommitAndStateWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs a node")
	}
	bin := buildFault(t)
	keys, trainers, sponsor := makeKeys(t, 2)
	e := newEnv(t, keys)
	e.bin = bin
	hold := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(hold, "release"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.extra = []string{"--fault-hold-state-writes", hold}
	e.start()
	defer e.stop()
	specPath := filepath.Join(e.dir, "spec.json")
	if err := os.WriteFile(specPath, []byte(afterWriteSpec(sponsor)), 0o644); err != nil {
		t.Fatal(err)
	}
	e.postAndEnrol(task, specPath, writeInit(t, e.dir), sponsor, trainers)
	_, before := e.committedWeights()
	for i := range trainers {
		if err := e.submit(i, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The commit reaches the chain while both writes are held.
	heldHashes := func() []wire.Hash {
		ents, _ := os.ReadDir(hold)
		var out []wire.Hash
		for _, d := range ents {
			if h, err := wire.ParseHash(strings.TrimSuffix(d.Name(), ".held")); err == nil && strings.HasSuffix(d.Name(), ".held") {
				out = append(out, h)
			}
		}
		return out
	}
	waitFor(t, e, "the new state's two writes held", func() bool { return len(heldHashes()) == 2 })
	waitFor(t, e, "round 0's commit on chain", func() bool { r, _ := e.committedWeights(); return r == 1 })
	_, wh := e.committedWeights()
	held := heldHashes()
	if wh == before || (held[0] != wh && held[1] != wh) {
		t.Fatalf("committed weights %s (before %s); held writes %v", wh, before, held)
	}
	blobFile := func(h wire.Hash) string {
		return filepath.Join(e.dir, "data", "blobs", h.String()[:2], h.String())
	}
	for _, h := range held {
		if _, err := os.Stat(blobFile(h)); !os.IsNotExist(err) {
			t.Fatalf("%s named on disk while its write is held: %v", h, err)
		}
	}
	// Served from memory meanwhile, the right bytes.
	resp, err := http.Get(e.rpc + "/blobs/" + wh.String())
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || wire.ContentHash(body) != wh {
		t.Fatalf("GET /blobs/%s while pending: %d, %d bytes hashing to %s, %v", wh, resp.StatusCode, len(body), wire.ContentHash(body), err)
	}

	e.kill9()
	for _, h := range held {
		if _, err := os.Stat(blobFile(h)); !os.IsNotExist(err) {
			t.Fatalf("%s on disk after a kill inside the window: %v", h, err)
		}
	}
	e.extra = nil
	e.start()
	waitFor(t, e, "the state re-derived", func() bool {
		for _, h := range held {
			if _, err := os.Stat(blobFile(h)); err != nil {
				return false
			}
		}
		return true
	})
	for _, h := range held {
		raw, err := os.ReadFile(blobFile(h))
		if err != nil || wire.ContentHash(raw) != h {
			t.Fatalf("re-derived %s: %v, bytes hash to %s", h, err, wire.ContentHash(raw))
		}
	}
	if !strings.Contains(e.log(), "restore state: re-derived") {
		t.Fatalf("no re-derivation logged:\n%s", tail(e.log()))
	}
	// The run goes on from the re-derived state.
	for i := range trainers {
		if err := e.submit(i, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, e, "round 1's commit", func() bool { r, _ := e.committedWeights(); return r == 2 })
}
