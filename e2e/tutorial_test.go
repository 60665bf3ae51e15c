package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
)

// person is someone following the seed's tutorial in their own home
// directory: their default key lives at ~/.tenzro/key.json (or $TENZRO_KEY).
type person struct {
	t    *testing.T
	e    *env
	home string
	env  []string
	dir  string
}

func newPerson(t *testing.T, e *env, name string, extraEnv ...string) *person {
	home := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	return &person{t: t, e: e, home: home, env: append(env, extraEnv...), dir: home}
}

// run types one tutorial command (the binary name first, as a person would),
// with --rpc pointing at the test's node.
func (p *person) run(ok bool, line ...string) (string, string, error) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := line[1:]
	if line[0] == "tenzro" && len(args) > 0 && args[0] != "key" {
		args = append(args, "--rpc", p.e.rpc)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, line[0]), args...)
	cmd.Env, cmd.Dir = p.env, p.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && ok {
		p.t.Fatalf("%s: %v\n%s%s", strings.Join(line, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String(), err
}

func (p *person) must(line ...string) string { s, _, _ := p.run(true, line...); return s }

func (p *person) did() string {
	var k struct{ DID string }
	if err := json.Unmarshal([]byte(p.must("tenzro", "key", "show", "--format", "json")), &k); err != nil {
		p.t.Fatal(err)
	}
	return k.DID
}

// TestSeedTutorialCommandsVerbatim types the seed's sponsor and trainer
// tutorial commands as written (no --key: the default key) against a real
// --dev node, the node make demo starts.
func TestSeedTutorialCommandsVerbatim(t *testing.T) {
	build(t)
	keys := t.TempDir()
	e := newEnv(t, keys)
	e.start()
	defer e.stop()

	// No key yet: a precise error that says how to make one.
	nobody := newPerson(t, e, "nobody")
	if _, stderr, err := nobody.run(false, "tenzro", "train", "leave", "--task-id", "x"); err == nil ||
		!strings.Contains(stderr, "tenzro key generate") || !strings.Contains(stderr, ".tenzro/key.json") {
		t.Fatalf("a signed command without any key: %v %s", err, stderr)
	}

	sponsor := newPerson(t, e, "sponsor")
	sponsor.must("tenzro", "key", "generate", "--kind", "human")
	if _, err := os.Stat(filepath.Join(sponsor.home, ".tenzro", "key.json")); err != nil {
		t.Fatalf("key generate did not make the default key: %v", err)
	}
	if _, _, err := sponsor.run(false, "tenzro", "key", "generate"); err == nil {
		t.Fatal("key generate overwrote the default key")
	}
	sdid := sponsor.did()
	const task = "train-2026-04-25-timesfm-200m"
	spec := strings.Replace(seedSpec(sdid), fmt.Sprintf(`"trainer_count":%d,"quorum":%d`, M, K), `"trainer_count":2,"quorum":2`, 1)
	spec = strings.Replace(spec, fmt.Sprintf(`"max_rounds":%d`, R), `"max_rounds":2`, 1)
	if err := os.WriteFile(filepath.Join(sponsor.dir, "spec.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	writeInit(t, sponsor.dir)
	sponsor.must("tenzro", "ledger", "faucet", "--did", sdid, "--amount", "2000000000000000000000")
	sponsor.must("tenzro", "train", "post-task", "--spec", "spec.json", "--init-weights", "init.safetensors")

	// Two trainers: one with ~/.tenzro/key.json, one with $TENZRO_KEY.
	alice := newPerson(t, e, "alice")
	alice.must("tenzro", "key", "generate")
	bobKey := filepath.Join(t.TempDir(), "bob.json")
	bob := newPerson(t, e, "bob", "TENZRO_KEY="+bobKey)
	bob.must("tenzro", "key", "generate")
	if _, err := os.Stat(bobKey); err != nil {
		t.Fatalf("key generate with $TENZRO_KEY: %v", err)
	}
	trainers := []*person{alice, bob}
	for _, p := range trainers {
		p.must("tenzro", "ledger", "faucet", "--did", p.did(), "--amount", "1000000000000000000000")
	}
	if out := alice.must("tenzro", "train", "list-runs"); !strings.Contains(out, task) {
		t.Fatalf("list-runs: %s", out)
	}

	// The first enrolment comes before the start: no shards yet, and it says when.
	var first wire.EnrollResult
	if err := json.Unmarshal([]byte(alice.must("tenzro", "train", "enroll-trainer", "--task-id", task, "--did", alice.did(),
		"--stake", "100000000000000000000", "--format", "json")), &first); err != nil {
		t.Fatal(err)
	}
	if first.ShardAssignments == nil || len(first.ShardAssignments) != 0 || first.ShardsFromRound != 0 || !strings.Contains(first.ShardsNote, "run starts") {
		t.Fatalf("enrol before the start: %+v", first)
	}
	out := bob.must("tenzro", "train", "enroll-trainer", "--task-id", task, "--stake", "100000000000000000000")
	if !strings.Contains(out, "shard_assignments [") || !strings.Contains(out, "from round 0") {
		t.Fatalf("enrol that starts the run: %s", out)
	}
	var run struct {
		Status   string `json:"status"`
		Round    int    `json:"round"`
		Trainers []struct {
			DID    string `json:"did"`
			Shards []int  `json:"shard_assignments"`
			Alias  []int  `json:"shards"`
			From   uint64 `json:"shards_from_round"`
		} `json:"trainers"`
		TrainerMetrics map[string]wire.TrainerMetrics `json:"trainer_metrics"`
	}
	getRun := func() {
		t.Helper()
		if err := json.Unmarshal([]byte(alice.must("tenzro", "train", "get-run", "--task-id", task, "--format", "json")), &run); err != nil {
			t.Fatal(err)
		}
	}
	getRun()
	if run.Status != wire.StatusRunning || len(run.Trainers) != 2 {
		t.Fatalf("run: %+v", run)
	}
	for _, tr := range run.Trainers {
		if len(tr.Shards) == 0 || fmt.Sprint(tr.Shards) != fmt.Sprint(tr.Alias) || tr.From != 0 {
			t.Fatalf("trainer %s: shard_assignments %v (shards %v) from %d", tr.DID, tr.Shards, tr.Alias, tr.From)
		}
	}

	// A round as the tutorial types it: pull the weights, submit per fragment.
	for round := 0; round < 2; round++ {
		for i, p := range trainers {
			for f := 0; f < F; f++ {
				w := fmt.Sprintf("w-%d-%d.safetensors", round, f)
				p.must("tenzro", "train", "get-weights", "--task-id", task, "--fragment", fmt.Sprint(f), "--out", w)
				g := fmt.Sprintf("g-%d-%d.safetensors", round, f)
				if err := os.WriteFile(filepath.Join(p.dir, g), gradientFrom(t, filepath.Join(p.dir, w), i, round, f), 0o644); err != nil {
					t.Fatal(err)
				}
				line := []string{"tenzro", "train", "submit-gradient", "--task-id", task, "--round", fmt.Sprint(round), "--fragment", fmt.Sprint(f), "--payload", g}
				if round == 0 && i == 0 && f == 0 {
					if _, stderr, err := p.run(false, append(line, "--metrics", "Train Loss=1")...); err == nil || !strings.Contains(stderr, "metrics") {
						t.Fatalf("a bad metrics name: %v %s", err, stderr)
					}
				}
				p.must(append(line, "--metrics", fmt.Sprintf("train_loss=%.3f,samples=768", 1.5-0.5*float64(round)))...)
			}
		}
		waitRoundClosed(t, client.New(e.rpc, client.WithTimeout(30*time.Second)), task, uint64(round))
		getRun()
		if round == 0 {
			// current_reward accrues before the seal.
			if run.Round != 1 {
				t.Fatalf("round 0 did not commit: at round %d", run.Round)
			}
			for d, m := range run.TrainerMetrics {
				if m.CurrentReward == "0" || m.Accepted != F {
					t.Fatalf("after round 0, trainer %s: %+v", d, m)
				}
			}
		}
	}
	if run.Status != wire.StatusSealed {
		t.Fatalf("run did not seal: %s", run.Status)
	}
	// The reported metrics reached the dashboard's loss curve.
	if code, page := httpGet(t, e.rpc+"/runs/"+task); code != 200 || !strings.Contains(page, `class="line train"`) || !strings.Contains(page, "1.0000 at round 1") {
		t.Errorf("dashboard after the tutorial's run: status %d, no loss curve of the reported metrics", code)
	}
	sponsor.must("tenzro", "train", "get-receipt", "--task-id", task, "--out", "receipt.json")
	sponsor.must("tenzro", "receipt", "verify", "--receipt", "receipt.json")
}
