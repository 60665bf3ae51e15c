package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenzro/train/wire/safetensors"
)

var (
	binDir   string
	buildErr error
	buildOne sync.Once
)

// build compiles both binaries once per test binary.
func build(t testing.TB) {
	t.Helper()
	buildOne.Do(func() {
		dir, err := os.MkdirTemp("", "tenzro-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/tenzro/train/cmd/tenzro", "github.com/tenzro/train/cmd/tenzro-node").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

type env struct {
	t    *testing.T
	dir  string
	keys string
	rpc  string
	addr string
	// extra are more tenzro-node flags (a later --enclave overrides "none").
	extra []string
	// bin, when set, is the tenzro-node binary (default: binDir's).
	bin     string
	node    *exec.Cmd
	nodeLog *os.File
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newEnv(t *testing.T, keys string) *env {
	e := &env{t: t, dir: t.TempDir(), keys: keys}
	e.addr = freeAddr(t)
	e.rpc = "http://" + e.addr
	return e
}

func (e *env) start() {
	e.t.Helper()
	log, err := os.OpenFile(filepath.Join(e.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	e.nodeLog = log
	args := []string{"--dev", "--data-dir", filepath.Join(e.dir, "data"),
		"--rpc-addr", e.addr, "--listen-addr", "/ip4/127.0.0.1/tcp/0", "--node-key", filepath.Join(e.keys, "node.key"), "--enclave", "none"}
	bin := filepath.Join(binDir, "tenzro-node")
	if e.bin != "" {
		bin = e.bin
	}
	cmd := exec.Command(bin, append(args, e.extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.node = cmd
	waitListen(e.t, e)
}

// waitListen waits for a node's RPC port.
func waitListen(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", e.addr, 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node did not listen; log:\n%s", e.log())
}

// writeInit writes the initial weights: F tensors of N values.
func writeInit(t *testing.T, dir string) string {
	var init []safetensors.Tensor
	for i := 0; i < F; i++ {
		v := make([]float32, N)
		for j := range v {
			v[j] = 0.01 * float32(i+1)
		}
		init = append(init, safetensors.FromF32(fmt.Sprintf("layer%d.w", i), []int64{N}, v))
	}
	raw, _ := safetensors.Encode(init, nil)
	path := filepath.Join(dir, "init.safetensors")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// gradientFrom builds trainer i's deterministic pseudo-gradient for the
// fragment whose weights are in the safetensors file w.
func gradientFrom(t *testing.T, w string, i, round, f int) []byte {
	raw, err := os.ReadFile(w)
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	var out []safetensors.Tensor
	for _, tn := range ts {
		v, _ := safetensors.F32Values(tn)
		for j := range v {
			v[j] = float32(1+i) * 0.001 * trainerValue(i, round, f, j)
		}
		out = append(out, safetensors.FromF32(tn.Name, tn.Shape, v))
	}
	payload, _ := safetensors.Encode(out, nil) // unbound: tenzro train submit-gradient stamps it
	return payload
}

func (e *env) log() string { b, _ := os.ReadFile(filepath.Join(e.dir, "node.log")); return string(b) }

func (e *env) kill9() {
	_ = e.node.Process.Signal(syscall.SIGKILL)
	_, _ = e.node.Process.Wait()
	e.nodeLog.Close()
}

func (e *env) stop() {
	if e.node != nil && e.node.ProcessState == nil {
		_ = e.node.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = e.node.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.kill9()
		}
	}
}

// cli runs the tenzro CLI; ok=false returns the error instead of failing.
func (e *env) cli(ok bool, args ...string) (string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "tenzro"), append(args, "--rpc", e.rpc)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("tenzro %s: %v: %s", strings.Join(args, " "), err, errb.String())
		if ok {
			e.t.Fatalf("%v\nnode log tail:\n%s", err, tail(e.log()))
		}
	}
	return out.String(), err
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

func (e *env) must(args ...string) string { s, _ := e.cli(true, args...); return s }

// postAndEnrol is the sponsor's and trainers' walk on a --dev node: fund the
// sponsor from the faucet, post the run (spec and init weights from files,
// signed with sponsor.key), then fund and enrol each trainer with its key
// t<i>.key from e.keys at a stake of 100 TNZO.
func (e *env) postAndEnrol(task, specPath, initPath, sponsor string, trainers []string) {
	e.must("ledger", "faucet", "--did", sponsor, "--amount", "2000000000000000000000")
	e.must("train", "post-task", "--spec", specPath, "--init-weights", initPath, "--key", filepath.Join(e.keys, "sponsor.key"))
	for i, d := range trainers {
		e.must("ledger", "faucet", "--did", d, "--amount", "200000000000000000000")
		e.must("train", "enroll-trainer", "--task-id", task, "--did", d, "--stake", "100000000000000000000", "--key", filepath.Join(e.keys, fmt.Sprintf("t%d.key", i)))
	}
}

// makeKeys creates the node, sponsor and trainer keys once, so two runs use
// the same identities (and so can produce the same receipt).
func makeKeys(t *testing.T, trainers int) (string, []string, string) {
	dir := t.TempDir()
	gen := func(name, kind string) string {
		out, err := exec.Command(filepath.Join(binDir, "tenzro"), "key", "generate", "--kind", kind, "--out", filepath.Join(dir, name+".key"), "--format", "json").Output()
		if err != nil {
			t.Fatalf("key generate: %v", err)
		}
		var k struct{ DID string }
		if err := json.Unmarshal(out, &k); err != nil {
			t.Fatal(err)
		}
		return k.DID
	}
	gen("node", "machine")
	sponsor := gen("sponsor", "human")
	var ts []string
	for i := 0; i < trainers; i++ {
		ts = append(ts, gen(fmt.Sprintf("t%d", i), "machine"))
	}
	return dir, ts, sponsor
}

const (
	M, K, F, R, N = 8, 6, 4, 4, 64
	task          = "train-2026-04-25-timesfm-200m"
)

// seedSpec is the seed's spec (DESIGN §10) with small numbers where the
// local run needs them (param_count is the small initial weights' count: the
// node refuses a count the weights do not hold).
func seedSpec(sponsor string) string {
	return fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x00000000000000000000000000000000000000aa",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,
 "dtype":"f32","metadata":{"context_len":2048,"horizon":128}},"tier":"Open","aggregation":"Mean",
 "trainer_count":%d,"quorum":%d,"inner_steps":24,"max_rounds":%d,"grace_window_ms":8000,
 "reward_pool":"1000000000000000000000","dataset_ref":"ipfs://Qm...","dataset_hash":"0x...",
 "min_throughput":null,"created_at":1761350400}`, task, sponsor, F*N, F, M, K, R)
}

type runView struct {
	Status    string `json:"status"`
	Round     int    `json:"round"`
	Fragments []struct {
		Accepted int `json:"accepted"`
	} `json:"fragments"`
}

func (e *env) getRun() runView {
	var v runView
	if err := json.Unmarshal([]byte(e.must("train", "get-run", "--task-id", task, "--format", "json")), &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *env) submit(i, round, f int) error {
	w := filepath.Join(e.dir, fmt.Sprintf("w-%d-%d-%d.safetensors", i, round, f))
	e.must("train", "get-weights", "--task-id", task, "--fragment", fmt.Sprint(f), "--out", w)
	payload := gradientFrom(e.t, w, i, round, f)
	p := filepath.Join(e.dir, fmt.Sprintf("g-%d-%d-%d.safetensors", i, round, f))
	if err := os.WriteFile(p, payload, 0o644); err != nil {
		e.t.Fatal(err)
	}
	_, err := e.cli(false, "train", "submit-gradient", "--task-id", task, "--round", fmt.Sprint(round), "--fragment", fmt.Sprint(f),
		"--payload", p, "--key", filepath.Join(e.keys, fmt.Sprintf("t%d.key", i)))
	return err
}

// crashPoint says where scenario B kills the node.
type crashPoint struct {
	round      int
	afterSubs  int // kill after this many submissions of fragment 0 (0: before the round)
	afterFinal bool
}

// scenario runs the whole flow; kills lists where to SIGKILL and restart.
func scenario(t *testing.T, keys string, trainers []string, sponsor string, kills []crashPoint) []byte {
	e := newEnv(t, keys)
	e.start()
	defer e.stop()
	crash := func(round, subs int, final bool) {
		for _, k := range kills {
			if k.round == round && k.afterSubs == subs && k.afterFinal == final {
				before := e.getRun()
				e.kill9()
				e.start()
				after := e.getRun()
				if after.Round != before.Round || after.Fragments[0].Accepted != before.Fragments[0].Accepted {
					t.Fatalf("state lost across kill -9: before round %d/%d accepted, after round %d/%d",
						before.Round, before.Fragments[0].Accepted, after.Round, after.Fragments[0].Accepted)
				}
			}
		}
	}
	specPath := filepath.Join(e.dir, "spec.json")
	os.WriteFile(specPath, []byte(seedSpec(sponsor)), 0o644)
	initPath := writeInit(t, e.dir)
	e.must("ledger", "faucet", "--did", sponsor, "--amount", "2000000000000000000000")
	// K > M refused and nothing stored.
	bad := strings.Replace(seedSpec(sponsor), `"quorum":6`, `"quorum":9`, 1)
	bad = strings.Replace(bad, task, task+"-bad", 1)
	os.WriteFile(filepath.Join(e.dir, "bad.json"), []byte(bad), 0o644)
	if _, err := e.cli(false, "train", "post-task", "--spec", filepath.Join(e.dir, "bad.json"), "--init-weights", initPath, "--key", filepath.Join(keys, "sponsor.key")); err == nil {
		t.Fatal("K > M accepted")
	}
	e.must("train", "post-task", "--spec", specPath, "--init-weights", initPath, "--key", filepath.Join(keys, "sponsor.key"))
	if strings.Contains(e.must("train", "list-runs", "--format", "json"), task+"-bad") {
		t.Fatal("refused run was stored")
	}
	for i, d := range trainers {
		e.must("ledger", "faucet", "--did", d, "--amount", "200000000000000000000")
		if i < M {
			e.must("train", "enroll-trainer", "--task-id", task, "--did", d, "--stake", "100000000000000000000", "--key", filepath.Join(keys, fmt.Sprintf("t%d.key", i)))
		}
	}
	if st := e.getRun().Status; st != "running" {
		t.Fatalf("status %q after M enrolments", st)
	}
	for round := 0; round < R; round++ {
		crash(round, 0, false)
		if round == 1 { // one trainer leaves, one joins late (active from round 2)
			e.must("train", "leave", "--task-id", task, "--key", filepath.Join(keys, "t7.key"))
			e.must("train", "enroll-trainer", "--task-id", task, "--did", trainers[M], "--stake", "100000000000000000000", "--key", filepath.Join(keys, fmt.Sprintf("t%d.key", M)))
		}
		subs := []int{0, 1, 2, 3, 4, 5}
		if round == 0 {
			subs = append(subs, 6) // 7 submissions
		}
		if round >= 2 {
			subs = append(subs, M) // the late joiner
		}
		for f := 0; f < F; f++ {
			for n, i := range subs {
				if err := e.submit(i, round, f); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v\n%s", round, f, i, err, tail(e.log()))
				}
				if f == 0 {
					crash(round, n+1, false)
				}
			}
		}
		// Wrong round refused.
		if err := e.submit(0, round+5, 1); err == nil {
			t.Fatal("wrong round accepted")
		}
		// Signed by the elected syncer (this node's key). Trainer 7 (and
		// later 6) stays active without submitting, so the round can close
		// only once the grace window has passed: finalize-round waits for it.
		if out, err := e.cli(false, "train", "finalize-round", "--task-id", task, "--key", filepath.Join(e.keys, "node.key"), "--wait", "50s"); err != nil {
			t.Fatalf("finalize round %d: %v %s\n%s", round, err, out, tail(e.log()))
		}
		crash(round, 0, true)
		if v := e.getRun(); v.Round <= round && v.Status != "sealed" {
			t.Fatalf("round %d did not advance: %+v", round, v)
		}
	}
	if st := e.getRun().Status; st != "sealed" {
		t.Fatalf("not sealed: %s", st)
	}
	rc := e.must("train", "get-receipt", "--task-id", task, "--format", "json")
	path := filepath.Join(e.dir, "receipt.json")
	os.WriteFile(path, []byte(rc), 0o644)
	if out, err := e.cli(false, "receipt", "verify", "--receipt", path); err != nil {
		t.Fatalf("receipt does not verify: %v %s", err, out)
	}
	// An auditor replays the run from the node's stored payloads.
	if out, err := e.cli(false, "receipt", "replay", "--receipt", path); err != nil || !strings.Contains(out, "match") {
		t.Fatalf("replay: %v %s", err, out)
	}
	var r struct {
		RunRoot string `json:"run_root"`
	}
	json.Unmarshal([]byte(rc), &r)
	badRc := strings.Replace(rc, r.RunRoot, r.RunRoot[:63]+string("10"[boolIdx(r.RunRoot[63] == '1')]), 1)
	os.WriteFile(filepath.Join(e.dir, "bad-receipt.json"), []byte(badRc), 0o644)
	cmd := exec.Command(filepath.Join(binDir, "tenzro"), "receipt", "verify", "--receipt", filepath.Join(e.dir, "bad-receipt.json"))
	if err := cmd.Run(); err == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("tampered receipt: exit %d, want 1", cmd.ProcessState.ExitCode())
	}
	return []byte(rc)
}

func boolIdx(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCLIRunAndKill9 runs the seed's spec through the CLI twice — once
// uninterrupted, once with kill -9 between and inside rounds — and requires
// byte-identical receipts.
func TestCLIRunAndKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs two full flows")
	}
	build(t)
	keys, trainers, sponsor := makeKeys(t, M+1)
	a := scenario(t, keys, trainers, sponsor, nil)
	b := scenario(t, keys, trainers, sponsor, []crashPoint{
		{round: 0, afterSubs: 3},     // inside round 0
		{round: 1, afterFinal: true}, // between rounds
		{round: 2, afterSubs: 0},     // at round start
		{round: 3, afterSubs: 7},     // inside the last round, after all of fragment 0
	})
	if !bytes.Equal(a, b) {
		t.Fatalf("receipt after kill -9 differs from the uninterrupted run's\nA: %.400s\nB: %.400s", a, b)
	}
}
