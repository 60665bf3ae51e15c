package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestNewcomerWalk is README's "A local network" as a newcomer types it
// (issue 27), on one network:
//
//  1. `make testnet`'s script: four validators on free loopback ports, every
//     node's addresses, the dashboard, a light-client command line and a
//     block to paste;
//  2. the block, pasted into bash as printed: a one-round Open run posted on
//     node 0, trained through node 3, waited for with progress lines,
//     sealed, verified (--full), replayed through node 1, and a second
//     trainer funded by `tenzro ledger transfer`; node 0 and node 3 then
//     answer the same run, receipt and balances;
//  3. the light client, started as printed (walkLightClient);
//  4. a Verified run with the simulated enclave: the sponsor writes its
//     policy with `tenzro attest policy init --simulated` and posts through
//     the light client; the second trainer, funded by the transfer, runs the reference
//     trainer (`tenzro-trainer run`) through the light client, attesting
//     with `attestation: {enclave: simulated-snp}`; the receipt verifies
//     with every piece of evidence counted;
//  5. a replay of that run through a validator that never held its
//     payloads: it fetches them from its peers;
//  6. Ctrl-C: the script exits 0 and none of the nodes' ports accepts.
//
// The reference trainer needs TENZRO_PYTHON (a python with the trainer's
// dependencies; `make test` sets it from scripts/venv.sh).
func TestNewcomerWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process walk")
	}
	py := os.Getenv("TENZRO_PYTHON")
	if py == "" {
		t.Skip("TENZRO_PYTHON is unset: set it to the venv's python (scripts/venv.sh prints the venv) for the reference trainer")
	}
	build(t)
	start, last := time.Now(), time.Now()
	phase := func(done string) { // where the walk's time goes, in -v output
		t.Logf("%-44s %6.1f s (at %5.1f s)", done, time.Since(last).Seconds(), time.Since(start).Seconds())
		last = time.Now()
	}
	tn := startTestnetScript(t)
	defer tn.stop()
	printed := tn.printed
	phase("testnet up")

	// 2. The block, pasted as printed (bash -e: the first failing command stops it).
	block := regexp.MustCompile(`(?s)# --- begin\n.*# --- end\n`).FindString(printed)
	if block == "" {
		t.Fatalf("no sponsor/trainer block printed:\n%s", printed)
	}
	pasteOut := runFor(t, 3*time.Minute, tn.dir, nil, block, "bash", "-e")
	for _, want := range []string{
		"testnet-run: round 0 of 1: ", "blocks left", // the waits say what they wait for, and how long the window has left
		"testnet-run: receipt signed", "receipt written to", "checked: compact, full, chain)", "match",
		"sent 150000000000000000000 attoTNZO to",
	} {
		if !strings.Contains(pasteOut, want) {
			t.Fatalf("the printed block's output lacks %q:\n%s", want, pasteOut)
		}
	}
	did := func(who string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)\b` + who + ` (did:tenzro:\S+)`).FindStringSubmatch(printed)
		if m == nil {
			t.Fatalf("no %s DID printed:\n%s", who, printed)
		}
		return m[1]
	}
	sponsor, trainer, trainer2 := did("sponsor"), did("trainer"), did("trainer2")
	if !strings.Contains(pasteOut, trainer2+": 150000000000000000000 attoTNZO") {
		t.Fatalf("the second trainer is not funded as printed:\n%s", pasteOut)
	}
	rpc := func(i int) string { return "http://" + tn.nodes[i][2] }
	cli := func(node string, args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir, "tenzro"), append(args, "--rpc", node)...).Output()
		if err != nil {
			t.Fatalf("tenzro %v --rpc %s: %v %s", args, node, err, out)
		}
		return string(out)
	}
	// Every node answers the same from its own replica.
	for _, args := range [][]string{
		{"train", "get-run", "--task-id", "testnet-run", "--format", "json"},
		{"train", "get-receipt", "--task-id", "testnet-run", "--format", "json"},
	} {
		if a, b := cli(rpc(0), args...), cli(rpc(3), args...); a != b {
			t.Fatalf("tenzro %v: node 0 says\n%s\nnode 3 says\n%s", args, a, b)
		}
	}
	// Balances too (each answer names the height it was read at).
	for _, d := range []string{sponsor, trainer, trainer2} {
		var a, b struct {
			Balance string `json:"balance"`
		}
		_ = json.Unmarshal([]byte(cli(rpc(0), "ledger", "balance", "--did", d, "--format", "json")), &a)
		_ = json.Unmarshal([]byte(cli(rpc(3), "ledger", "balance", "--did", d, "--format", "json")), &b)
		if a.Balance == "" || a != b {
			t.Fatalf("balance of %s: node 0 %q, node 3 %q", d, a.Balance, b.Balance)
		}
	}
	// get-run shows final counters beside pending ones and says when pending ones count.
	if out := cli(rpc(3), "train", "get-run", "--task-id", "testnet-run"); !strings.Contains(out, "status    sealed") ||
		!strings.Contains(out, "ACCEPTED(final)") || !strings.Contains(out, "When they count: sealed") {
		t.Fatalf("get-run of the sealed run:\n%s", out)
	}

	phase("block pasted, nodes compared")
	// 3. The light client, as printed.
	lc := walkLightClient(t, printed, "testnet-run")
	defer lc.stop()

	phase("light client followed")
	// 4. A Verified run with the simulated enclave, trained by the second
	// trainer's reference trainer through the light client.
	w := filepath.Join(tn.dir, "verified")
	if err := os.MkdirAll(w, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pyEnv := []string{"PYTHONPATH=" + filepath.Join(root, "trainer", "src"), "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	trainerCmd := []string{py, "-m", "tenzro_trainer"}
	if exe := filepath.Join(filepath.Dir(py), "tenzro-trainer"); fileExists(exe) {
		trainerCmd = []string{exe}
	}
	sh := func(within time.Duration, line ...string) string {
		t.Helper()
		return runFor(t, within, w, pyEnv, "", line...)
	}
	const vtask = "verified-walk"
	note := sh(time.Minute, "tenzro", "attest", "policy", "init", "--tier", "verified", "--vendor", "snp", "--simulated", "--out", "dev-policy.json")
	if !strings.Contains(note, "SIMULATED") {
		t.Fatalf("policy init --simulated does not say loudly what it wrote: %q", note)
	}
	policy, err := os.ReadFile(filepath.Join(w, "dev-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	const md = `{"context_len":64,"horizon":16,"patch_len":8,"d_model":32,"n_layers":2,"n_heads":4,"d_ff":64,"stride":4}`
	var iw struct {
		Params int `json:"params"`
	}
	if err := json.Unmarshal([]byte(sh(2*time.Minute, append(trainerCmd, "init-weights", "--family", "timesfm", "--metadata", md, "--out", "init.safetensors")...)), &iw); err != nil || iw.Params == 0 {
		t.Fatalf("tenzro-trainer init-weights: %v %+v", err, iw)
	}
	const ref = "statsmodels://co2,nile"
	dsHash := strings.TrimSpace(sh(2*time.Minute, append(trainerCmd, "dataset-hash", ref)...))
	spec := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":2,"dtype":"f32","metadata":%s},
 "tier":"Verified","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":2,"max_rounds":1,"grace_window_ms":0,
 "reward_pool":"10000000000000000000","dataset_ref":%q,"dataset_hash":%q,"min_throughput":null,"created_at":1761350400,
 "attestation_policy":{"Verified":%s}}`, vtask, sponsor, iw.Params, md, ref, dsHash, policy)
	if err := os.WriteFile(filepath.Join(w, "spec.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	sponsorKey, trainerKey, trainer2Key := filepath.Join(tn.dir, "sponsor.key"), filepath.Join(tn.dir, "trainer.key"), filepath.Join(tn.dir, "trainer2.key")
	sh(time.Minute, "tenzro", "train", "post-task", "--spec", "spec.json", "--init-weights", "init.safetensors", "--key", sponsorKey, "--rpc", lc.rpc)
	// Without evidence a Verified run refuses an enrolment, and says why.
	if out, err := runErr(w, pyEnv, "tenzro", "train", "enroll-trainer", "--task-id", vtask, "--stake", "100000000000000000", "--key", trainerKey, "--rpc", lc.rpc); err == nil ||
		!strings.Contains(strings.ToLower(out), "attestation") {
		t.Fatalf("an enrolment without evidence in a Verified run: %v %s", err, out)
	}
	yaml := fmt.Sprintf(`node_rpc: %s
trainer_keypair: %s
task_id: %s
inner: {lr: 1.0e-3, batch_size: 8}
metrics: {port: 0}
threads: 1
eval: false
log_format: text
attestation: {enclave: simulated-snp, gpu: none}
`, lc.rpc, trainer2Key, vtask)
	if err := os.WriteFile(filepath.Join(w, "trainer.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	phase("Verified run posted")
	sh(6*time.Minute, append(trainerCmd, "run", "--config", "trainer.yaml")...)
	phase("reference trainer done (run sealed)")
	sh(2*time.Minute, "tenzro", "train", "wait", "--task-id", vtask, "--for", "receipt", "--out", "receipt.json", "--timeout", "2m", "--rpc", lc.rpc)
	// Every validator has the receipt too (each answers from its own replica).
	for i := range tn.nodes {
		sh(2*time.Minute, "tenzro", "train", "wait", "--task-id", vtask, "--for", "receipt", "--timeout", "2m", "--rpc", rpc(i))
	}
	if out := sh(time.Minute, "tenzro", "receipt", "verify", "--receipt", "receipt.json", "--full", "--rpc", rpc(0)); !strings.Contains(out, "checked: compact, full, chain)") {
		t.Fatalf("receipt verify --full of the Verified run: %s", out)
	}
	var rc struct {
		SyncerDID        string `json:"syncer_did"`
		AttestationCount int    `json:"attestation_count"`
	}
	if raw, err := os.ReadFile(filepath.Join(w, "receipt.json")); err != nil || json.Unmarshal(raw, &rc) != nil {
		t.Fatalf("receipt.json: %v", err)
	}
	// The trainer's enrolment and its two submissions; the testnet's syncers
	// hold their keys outside an enclave (--enclave none), so none of theirs.
	if rc.AttestationCount != 1+2 {
		t.Fatalf("attestation_count %d, want 3", rc.AttestationCount)
	}
	// The dashboard the script printed shows both runs, and the run's page
	// its final counters.
	dash := regexp.MustCompile(`(?m)^== the run dashboard .*: (http://\S+/) `).FindStringSubmatch(printed)
	if dash == nil {
		t.Fatalf("no dashboard URL printed:\n%s", printed)
	}
	if code, page := httpGet(t, dash[1]); code != 200 || !strings.Contains(page, `href="/runs/testnet-run"`) || !strings.Contains(page, `href="/runs/`+vtask+`"`) {
		t.Fatalf("dashboard %s: status %d\n%s", dash[1], code, tail(page))
	}
	if code, page := httpGet(t, dash[1]+"runs/"+vtask); code != 200 || !strings.Contains(page, "accepted (final)") || !strings.Contains(page, trainer2) {
		t.Fatalf("dashboard page of %s: status %d\n%s", vtask, code, tail(page))
	}
	var run struct {
		TrainerMetrics map[string]struct {
			Accepted int `json:"accepted"`
		} `json:"trainer_metrics"`
	}
	if err := json.Unmarshal([]byte(cli(rpc(2), "train", "get-run", "--task-id", vtask, "--format", "json")), &run); err != nil || run.TrainerMetrics[trainer2].Accepted != 2 {
		t.Fatalf("the Verified run on node 2: %v %+v", err, run)
	}

	phase("receipt everywhere, verified")
	// 5. A replay through a validator that is not the syncer and whose blob
	// store lacks the payloads (the run was posted and trained through the
	// light client) until the replay asks its peers.
	payload := regexp.MustCompile(`"payload_hash":\s*"(?:0x)?([0-9a-f]{64})"`).FindStringSubmatch(cli(rpc(0), "train", "get-transcript", "--task-id", vtask, "--format", "json"))
	if payload == nil {
		t.Fatal("no payload hash in the Verified run's transcript")
	}
	auditor, blobFile := "", ""
	for i := 0; i < len(tn.nodes) && auditor == ""; i++ {
		var info struct {
			NodeDID string `json:"node_did"`
		}
		_ = json.Unmarshal([]byte(cli(rpc(i), "node", "info", "--format", "json")), &info)
		f := filepath.Join(tn.dir, "nodes", "node"+tn.nodes[i][1], "node", "blobs", payload[1][:2], payload[1])
		if _, err := os.Stat(f); info.NodeDID != "" && info.NodeDID != rc.SyncerDID && errors.Is(err, fs.ErrNotExist) {
			auditor, blobFile = rpc(i), f
		}
	}
	if auditor == "" {
		t.Fatalf("every validator is the syncer %s or already holds payload %s", rc.SyncerDID, payload[1])
	}
	t.Logf("replaying through %s (the syncer is %s)", auditor, rc.SyncerDID)
	if out := sh(3*time.Minute, "tenzro", "receipt", "replay", "--receipt", "receipt.json", "--rpc", auditor); !strings.Contains(out, "match") {
		t.Fatalf("replay through %s (not the posting node, never held the payloads): %s", auditor, out)
	}
	if _, err := os.Stat(blobFile); err != nil {
		t.Fatalf("the replay through %s did not fetch payload %s from its peers: %v", auditor, payload[1], err)
	}

	phase("replayed through a node without the payloads")
	// 6. Ctrl-C stops every node.
	lc.stop()
	tn.stop()
	for _, a := range append(tn.addrs(), lc.addr) {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts after the script stopped: a node was left running", a)
		}
	}
	phase("stopped")
}

// testnetScript is scripts/testnet.sh (make testnet) running in its own
// process group, with what it printed until "Ctrl-C stops the network".
type testnetScript struct {
	t       *testing.T
	dir     string
	cmd     *exec.Cmd
	exited  chan error
	stopped bool
	printed string
	// nodes: per validator, [line, index, JSON-RPC, CometBFT RPC, libp2p].
	nodes [][]string
}

// startTestnetScript runs the script as a newcomer's terminal would (free
// ports and a short block time, so the walk stays bounded) and waits for its
// ready line.
func startTestnetScript(t *testing.T) *testnetScript {
	t.Helper()
	s := &testnetScript{t: t, dir: t.TempDir(), exited: make(chan error, 1)}
	s.cmd = exec.Command("bash", filepath.Join("..", "scripts", "testnet.sh"))
	s.cmd.Env = append(os.Environ(), "TESTNET_DIR="+s.dir, "TESTNET_BASE_PORT=0", "TESTNET_BLOCK_TIME=200ms", "TENZRO_BIN_DIR="+binDir)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	s.cmd.Stdout, s.cmd.Stderr = pw, pw
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if sc.Text() == "== Ctrl-C stops the network" {
				close(ready)
			}
		}
	}()
	go func() { s.exited <- s.cmd.Wait(); pw.Close() }()
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	select {
	case <-ready:
	case err := <-s.exited:
		s.stopped = true
		t.Fatalf("testnet.sh exited: %v\n%s", err, text())
	case <-time.After(4 * time.Minute):
		s.stop()
		t.Fatalf("testnet.sh not ready within 4 minutes:\n%s", text())
	}
	s.printed = text()
	s.nodes = regexp.MustCompile(`(?m)^node(\d+)  JSON-RPC http://(\S+)  CometBFT RPC http://(\S+)  libp2p (/ip4/\S+/p2p/\S+)`).FindAllStringSubmatch(s.printed, -1)
	if len(s.nodes) != 4 {
		s.stop()
		t.Fatalf("want every node's JSON-RPC, CometBFT RPC and libp2p address printed, got %d:\n%s", len(s.nodes), s.printed)
	}
	return s
}

// stop is Ctrl-C: SIGINT to the script, which must exit 0 having stopped
// every validator.
func (s *testnetScript) stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-s.exited:
		if err != nil {
			s.t.Errorf("testnet.sh on Ctrl-C: %v (want exit 0)", err)
		}
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		s.t.Error("testnet.sh did not stop on SIGINT within 30 s")
	}
}

// addrs are every validator's JSON-RPC, CometBFT RPC and libp2p TCP addresses.
func (s *testnetScript) addrs() []string {
	var out []string
	for _, nd := range s.nodes {
		out = append(out, nd[2], nd[3])
		if m := regexp.MustCompile(`^/ip4/([^/]+)/tcp/(\d+)/`).FindStringSubmatch(nd[4]); m != nil {
			out = append(out, net.JoinHostPort(m[1], m[2]))
		}
	}
	return out
}

// walkNode is a node the walk started itself.
type walkNode struct {
	t    *testing.T
	rpc  string // http://host:port
	addr string // host:port
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// walkLightClient starts the light client exactly as the script printed it
// (its command line after "== a light client"), on a free port instead of
// the printed 8600, and waits until it has followed the chain to the sealed
// run task. It is the walk's one light-client step, kept apart so that a
// change of the light client's role or flags changes only this function.
func walkLightClient(t *testing.T, printed, task string) *walkNode {
	t.Helper()
	m := regexp.MustCompile(`(?m)^== a light client.*\n\s+(\S+/tenzro-node .*)$`).FindStringSubmatch(printed)
	if m == nil || !strings.Contains(m[1], "--role light-client") || !strings.Contains(m[1], "--genesis-hash") {
		t.Fatalf("no light-client command printed:\n%s", printed)
	}
	args := strings.Fields(m[1])
	n := &walkNode{t: t, addr: freeAddr(t), done: make(chan struct{})}
	n.rpc = "http://" + n.addr
	for i := range args {
		if i > 0 && args[i-1] == "--rpc-addr" {
			args[i] = n.addr
		}
	}
	n.log = filepath.Join(t.TempDir(), "light.log")
	f, err := os.Create(n.log)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(args[0], args[1:]...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); f.Close(); close(n.done) }()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := exec.Command(filepath.Join(binDir, "tenzro"), "train", "get-run", "--task-id", task, "--format", "json", "--rpc", n.rpc).Output()
		if err == nil && strings.Contains(string(out), `"status": "sealed"`) {
			return n
		}
		select {
		case <-n.done:
			raw, _ := os.ReadFile(n.log)
			t.Fatalf("the light client exited:\n%s", tail(string(raw)))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.stop()
			raw, _ := os.ReadFile(n.log)
			t.Fatalf("the light client did not follow the chain to %s sealed within 3 minutes:\n%s", task, tail(string(raw)))
		}
	}
}

func (n *walkNode) stop() {
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
		n.t.Error("the light client did not stop on SIGTERM within 30 s")
	}
}

// runFor runs one command line (tenzro means bin/tenzro) in dir with stdin,
// failing the test on a non-zero exit or when it outlives within; it
// returns stdout and stderr together.
func runFor(t *testing.T, within time.Duration, dir string, env []string, stdin string, line ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	name := line[0]
	if name == "tenzro" {
		name = filepath.Join(binDir, "tenzro")
	}
	cmd := exec.CommandContext(ctx, name, line[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, append(os.Environ(), env...), strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		logs := ""
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if fileExists(filepath.Join(d, "nodes")) {
				logs = tailLogs(d)
			}
		}
		t.Fatalf("%s: %v (limit %s)\n%s\n%s", strings.Join(line, " "), err, within, out, logs)
	}
	return string(out)
}

// runErr is runFor for a command expected to fail: its output and error.
func runErr(dir string, env []string, line ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, line[0]), line[1:]...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// tailLogs is the end of every node log under a testnet dir.
func tailLogs(dir string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(dir, "nodes", "node*", "node.log"))
	for _, l := range logs {
		raw, _ := os.ReadFile(l)
		fmt.Fprintf(&b, "==== %s\n%s\n", l, tail(string(raw)))
	}
	return b.String()
}
