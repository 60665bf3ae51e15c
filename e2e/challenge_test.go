package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cometbft/cometbft/p2p"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

var (
	faultBin      string
	faultBuildErr error
	faultOnce     sync.Once
)

// buildFault compiles tenzro-node with the faultinject tag (test builds only).
func buildFault(t testing.TB) string {
	t.Helper()
	build(t)
	faultOnce.Do(func() {
		dir := filepath.Join(binDir, "faultinject")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			faultBuildErr = err
			return
		}
		out, err := exec.Command("go", "build", "-tags", "faultinject", "-o", dir+"/", "github.com/tenzro/train/cmd/tenzro-node").CombinedOutput()
		if err != nil {
			faultBuildErr = fmt.Errorf("go build -tags faultinject: %v\n%s", err, out)
		}
		faultBin = filepath.Join(dir, "tenzro-node")
	})
	if faultBuildErr != nil {
		t.Fatal(faultBuildErr)
	}
	return faultBin
}

// TestFaultFlagsOnlyInTestBuilds: the fault flags exist in a faultinject
// build, and not in a production build even with the faultinject tag.
func TestFaultFlagsOnlyInTestBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tenzro-node twice")
	}
	bin := buildFault(t)
	help := func(bin string) string {
		out, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --help: %v\n%s", bin, err, out)
		}
		return string(out)
	}
	if h := help(bin); !strings.Contains(h, "--fault-wrong-aggregate") || !strings.Contains(h, "--fault-withhold") {
		t.Fatalf("the faultinject build has no fault flags:\n%s", h)
	}
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-tags", "production,faultinject", "-o", dir+"/", "github.com/tenzro/train/cmd/tenzro-node").CombinedOutput()
	if err != nil {
		t.Fatalf("production build: %v\n%s", err, out)
	}
	prod := filepath.Join(dir, "tenzro-node")
	if h := help(prod); strings.Contains(h, "fault-") {
		t.Fatalf("a production build lists fault flags:\n%s", h)
	}
	if out, err := exec.Command(prod, "--fault-wrong-aggregate", "0:0").CombinedOutput(); err == nil || !strings.Contains(string(out), "unknown flag") {
		t.Fatalf("a production build took --fault-wrong-aggregate: %v %s", err, out)
	}
	syms, err := exec.Command("go", "tool", "nm", prod).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	if strings.Contains(string(syms), "parseFaultAt") {
		t.Fatal("a production build contains the fault flag parser")
	}
}

// challengeNet is 4 validators (the faultinject binary, every one with the
// same fault flags: the fault strikes only the run's first elected syncer)
// and a watcher full node.
type challengeNet struct {
	t       *testing.T
	dir     string
	nodes   []*chainNode
	jsonRPC []string
	watcher *chainNode
	wRPC    string
	keys    map[*did.Key]string
}

func newChallengeNet(t *testing.T, faultFlags []string, allocs ...*did.Key) *challengeNet {
	return newChallengeNetOn(t, engineFlag(), faultFlags, allocs...)
}

// newChallengeNetOn is newChallengeNet with every node (validators and
// watcher) on engine (native or wasm; a scored run needs wasm).
func newChallengeNetOn(t *testing.T, engine string, faultFlags []string, allocs ...*did.Key) *challengeNet {
	bin := buildFault(t)
	c := &challengeNet{t: t, dir: t.TempDir(), keys: map[*did.Key]string{}}
	args := []string{"testnet", "--validators", "4", "--dir", c.dir, "--base-port", "0", "--block-time", "200ms"}
	for _, k := range allocs {
		args = append(args, "--alloc", k.DID.String()+"=10000000000000000000")
	}
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("testnet: %v\n%s", err, out)
	}
	var boot, peers []string
	for i := 0; i < 4; i++ {
		home := filepath.Join(c.dir, fmt.Sprintf("node%d", i))
		nc := mustNodeConfig(t, home)
		rc, err := chainRPC(nc.RPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		c.jsonRPC = append(c.jsonRPC, nc.JSONRPCAddr)
		n := &chainNode{home: home, rpc: rc, extra: append([]string{"--enclave", "none", "--engine", engine}, faultFlags...)}
		n.cmd = nil
		c.nodes = append(c.nodes, n)
		boot = append(boot, nc.BootNodes...)
		nk, err := p2p.LoadNodeKey(filepath.Join(home, "config", "node_key.json"))
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, string(nk.ID())+"@"+nc.P2PAddr)
	}
	// Each validator's config names the others: together, all four.
	sort.Strings(boot)
	var uniq []string
	for i, b := range boot {
		if i == 0 || b != boot[i-1] {
			uniq = append(uniq, b)
		}
	}
	for _, n := range c.nodes {
		n.cmd, n.done = nil, nil
		startWith(t, n, bin)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.kill()
		}
	})
	for _, n := range c.nodes {
		waitHeight(t, n, 1, 90*time.Second)
	}
	// The watcher: a non-validator full node with --watch, its key funded
	// at genesis (allocs[0]).
	w := &chainNode{home: filepath.Join(c.dir, "watcher")}
	c.wRPC = freeAddr(t)
	cmtRPC := freeAddr(t)
	if out, err := exec.Command(bin, "init", "--home", w.home, "--genesis", filepath.Join(c.nodes[0].home, "config", "genesis.json"),
		"--peers", strings.Join(peers[:2], ","), "--p2p-addr", freeAddr(t), "--rpc-addr", cmtRPC).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	var err error
	if w.rpc, err = chainRPC(cmtRPC); err != nil {
		t.Fatal(err)
	}
	w.extra = []string{"--enclave", "none", "--engine", engine, "--watch", "--node-key", c.keyFile(allocs[0]), "--rpc-addr", c.wRPC,
		"--listen-addr", "/ip4/127.0.0.1/tcp/0", "--boot-nodes", strings.Join(uniq, ",")}
	startWith(t, w, bin)
	c.watcher = w
	t.Cleanup(w.kill)
	return c
}

// startWith starts a node process from bin.
func startWith(t *testing.T, n *chainNode, bin string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(n.home, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	n.log = f
	n.cmd = exec.Command(bin, append([]string{"--home", n.home}, n.extra...)...)
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(n.cmd, n.done)
}

func (c *challengeNet) keyFile(k *did.Key) string {
	if p, ok := c.keys[k]; ok {
		return p
	}
	p := filepath.Join(c.dir, strings.ReplaceAll(k.DID.String(), ":", "_")+".key")
	if err := k.Save(p); err != nil {
		c.t.Fatal(err)
	}
	c.keys[k] = p
	return p
}

// cli runs the tenzro CLI against validator i's JSON-RPC (i = -1: the watcher).
func (c *challengeNet) cli(i int, args ...string) (string, error) {
	addr := c.wRPC
	if i >= 0 {
		addr = c.jsonRPC[i]
	}
	out, err := exec.Command(filepath.Join(binDir, "tenzro"), append(args, "--rpc", "http://"+addr)...).CombinedOutput()
	return string(out), err
}

func (c *challengeNet) mustCLI(i int, args ...string) string {
	c.t.Helper()
	out, err := c.cli(i, args...)
	if err != nil {
		c.t.Fatalf("tenzro %v on node %d: %v\n%s\n%s", args, i, err, out, c.logs())
	}
	return out
}

func (c *challengeNet) logs() string {
	var s string
	for _, n := range append(append([]*chainNode{}, c.nodes...), c.watcher) {
		if n != nil {
			s += "=== " + n.home + ":\n" + n.logTail() + "\n"
		}
	}
	return s
}

// waitFor polls cond every 100 ms until it holds or within passes.
func (c *challengeNet) waitFor(what string, within time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %s\n%s", what, within, c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runState is the part of the chain's run state the test reads.
type runState struct {
	Status      string   `json:"status"`
	Round       uint64   `json:"round"`
	FinalRounds uint64   `json:"final_rounds"`
	Excluded    []string `json:"excluded_syncers"`
	Fragments   []struct {
		Closed  bool `json:"closed"`
		Records []struct {
			DID string `json:"did"`
		} `json:"records"`
	} `json:"fragments"`
}

func (c *challengeNet) run(task string) runState {
	c.t.Helper()
	raw, _ := query(c.t, c.nodes[0], chain.QueryRun, task)
	var r runState
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		c.t.Fatal(err)
	}
	return r
}

func (c *challengeNet) challenges(task string) []wire.ChallengeRecord {
	c.t.Helper()
	var out []wire.ChallengeRecord
	if err := json.Unmarshal([]byte(c.mustCLI(0, "train", "get-challenges", "--task-id", task, "--format", "json")), &out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// blockTime is the time of block h on node 0.
func (c *challengeNet) blockTime(h int64) time.Time {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := c.nodes[0].rpc.Block(ctx, &h)
	if err != nil {
		c.t.Fatal(err)
	}
	return b.Block.Time
}

// submitRound has the trainer submit every fragment of round through
// validator 3 (weights fetched there by hash).
func (c *challengeNet) submitRound(task string, trainer *did.Key, round int) {
	c.t.Helper()
	for f := 0; f < F; f++ {
		w := filepath.Join(c.dir, fmt.Sprintf("w%d-%d.safetensors", round, f))
		c.mustCLI(3, "train", "get-weights", "--task-id", task, "--fragment", fmt.Sprint(f), "--out", w)
		p := filepath.Join(c.dir, fmt.Sprintf("g%d-%d.safetensors", round, f))
		if err := os.WriteFile(p, gradientFrom(c.t, w, 0, round, f), 0o600); err != nil {
			c.t.Fatal(err)
		}
		c.mustCLI(3, "train", "submit-gradient", "--task-id", task, "--round", fmt.Sprint(round), "--fragment", fmt.Sprint(f), "--payload", p,
			"--key", c.keyFile(trainer))
	}
}

func (c *challengeNet) post(task string, sponsor, trainer *did.Key, extra string) {
	c.t.Helper()
	spec := []byte(fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,"dtype":"f32"},
 "tier":"Open","aggregation":"Mean","trainer_count":1,"quorum":1,"inner_steps":4,"max_rounds":2,"grace_window_ms":0,
 "reward_pool":"2000000000000000000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab","min_throughput":null,"created_at":1761350400,
 "challenge_window_blocks":50,"vote_window_blocks":80,"challenge_bond":"200000000000000000"%s}`, task, sponsor.DID, F*N, F, extra))
	specPath := filepath.Join(c.dir, task+".json")
	if err := os.WriteFile(specPath, spec, 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.mustCLI(0, "train", "post-task", "--spec", specPath, "--init-weights", writeInit(c.t, c.dir), "--key", c.keyFile(sponsor))
	// Every validator's candidate daemon enters the election (its log says
	// so once its proof is in a block): a succession of 4.
	c.waitFor("every candidate's election proof", 60*time.Second, func() bool {
		for _, n := range c.nodes {
			if !logHas(n, "entered a run's syncer election", "task="+task) {
				return false
			}
		}
		return true
	})
	c.mustCLI(2, "train", "enroll-trainer", "--task-id", task, "--did", trainer.DID.String(), "--stake", "100000000000000000", "--key", c.keyFile(trainer))
	c.waitFor("the run starts", 60*time.Second, func() bool { return c.run(task).Status == wire.StatusRunning })
}

// TestChallengeWrongAggregateFourValidators: on 4 validators, the run's
// first syncer commits a wrong aggregate for round 0 fragment 0 (fault
// build); the watcher node re-executes and challenges; the validators'
// nodes re-execute and vote; the syncer is slashed, the run rolls back and
// the next syncer re-does the fragment; a frivolous challenge of round 1
// loses its bond; a challenge of a final round is refused; the run seals
// with a receipt that records both challenges and verifies against the
// chain. It logs the time from the wrong commit to the slash.
func TestChallengeWrongAggregateFourValidators(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	t0 := time.Now()
	watcher, sponsor, trainer, other := chainKey(t, did.KindHuman, 41), chainKey(t, did.KindHuman, 42), chainKey(t, did.KindMachine, 43), chainKey(t, did.KindHuman, 44)
	c := newChallengeNet(t, []string{"--fault-wrong-aggregate", "0:0"}, watcher, sponsor, trainer, other)
	t.Logf("4 validators and a watcher up after %s", time.Since(t0).Round(time.Millisecond))
	const task = "challenge-run"
	c.post(task, sponsor, trainer, "")
	c.submitRound(task, trainer, 0)

	// The watcher challenges round 0 fragment 0; the validators decide.
	var ch wire.ChallengeRecord
	c.waitFor("the wrong commit is challenged and decided", 90*time.Second, func() bool {
		chs := c.challenges(task)
		if len(chs) > 0 && chs[0].Outcome != wire.ChallengeOpen {
			ch = chs[0]
			return true
		}
		return false
	})
	if ch.Outcome != wire.ChallengeUpheld || ch.Round != 0 || ch.Fragment != 0 || ch.Challenger != watcher.DID.String() || ch.Ticket != 0 || ch.SyncerSlashed == "0" {
		t.Fatalf("challenge: %+v", ch)
	}
	slashAfter := c.blockTime(ch.Decided).Sub(c.blockTime(ch.CommitHeight))
	t.Logf("FIGURE wrong commit (height %d) → slash (height %d): %s of block time, %d votes; syncer %s slashed %s",
		ch.CommitHeight, ch.Decided, slashAfter, len(ch.Votes), ch.Syncer, ch.SyncerSlashed)
	if r := c.run(task); len(r.Excluded) != 1 || r.Excluded[0] != ch.Syncer {
		t.Fatalf("excluded syncers %v, want the slashed %s", r.Excluded, ch.Syncer)
	}
	// The next syncer re-does fragment 0 and the round closes.
	c.waitFor("round 0 re-done", 60*time.Second, func() bool { return c.run(task).Round == 1 })
	c.submitRound(task, trainer, 1)
	c.waitFor("round 1 committed", 60*time.Second, func() bool {
		r := c.run(task)
		return r.Status != wire.StatusRunning || r.Fragments[F-1].Closed && r.Fragments[0].Closed
	})
	// Any node recomputes a commit's result hash (here the watcher's):
	// round 1 fragment 1 is right.
	cmd := exec.Command(filepath.Join(binDir, "tenzro"), "receipt", "replay", "--task-id", task, "--round", "1", "--fragment", "1", "--rpc", "http://"+c.wRPC)
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("tenzro receipt replay --round 1 --fragment 1: %v", err)
	}
	res := strings.TrimSpace(string(stdout))
	var rf wire.ReplayFragmentResult
	if err := json.Unmarshal([]byte(c.mustCLI(-1, "receipt", "replay", "--task-id", task, "--round", "1", "--fragment", "1", "--format", "json")), &rf); err != nil {
		t.Fatal(err)
	}
	if !rf.Agrees || res != rf.Result.String() || rf.Committed != rf.Result {
		t.Fatalf("replay of round 1 fragment 1: %q, %+v", res, rf)
	}
	// The same, re-executed by the CLI itself from the state slice and the
	// bytes of a node that holds them (the watcher fetched them all).
	cmd = exec.Command(filepath.Join(binDir, "tenzro"), "receipt", "replay", "--task-id", task, "--round", "1", "--fragment", "1", "--local",
		"--engine", engineFlag(), "--rpc", "http://"+c.wRPC)
	if stdout, err = cmd.Output(); err != nil || strings.TrimSpace(string(stdout)) != res {
		t.Fatalf("tenzro receipt replay --local: %v %q, want %s", err, stdout, res)
	}
	// A frivolous challenge of round 1 fragment 1 (a made-up hash).
	made := wire.ContentHash([]byte("made up")).String()
	out, err := c.cli(1, "train", "challenge", "--task-id", task, "--round", "1", "--fragment", "1", "--result-hash", made, "--bond", "200000000000000000", "--key", c.keyFile(other))
	if err != nil {
		t.Fatalf("frivolous challenge refused: %v %s", err, out)
	}
	c.waitFor("the frivolous challenge decided", 60*time.Second, func() bool {
		chs := c.challenges(task)
		return len(chs) == 2 && chs[1].Outcome != wire.ChallengeOpen
	})
	if f := c.challenges(task)[1]; f.Outcome != wire.ChallengeRejected || f.ToEscrow != "200000000000000000" {
		t.Fatalf("frivolous challenge: %+v", f)
	}
	// Late: round 0 is final (or the whole run): refused.
	c.waitFor("round 0 final", 60*time.Second, func() bool { r := c.run(task); return r.FinalRounds >= 1 || r.Status == wire.StatusSealed })
	out, err = c.cli(1, "train", "challenge", "--task-id", task, "--round", "0", "--fragment", "1", "--result-hash", made, "--bond", "200000000000000000", "--key", c.keyFile(other))
	if err == nil || !(strings.Contains(out, "after the challenge window") || strings.Contains(out, "every commit of it is final")) {
		t.Fatalf("late challenge: %v %s", err, out)
	}
	// The seal and the receipt.
	var receipt string
	c.waitFor("the receipt", 90*time.Second, func() bool {
		out, err := c.cli(2, "train", "get-receipt", "--task-id", task, "--format", "json")
		receipt = out
		return err == nil
	})
	var rc wire.Receipt
	if err := json.Unmarshal([]byte(receipt), &rc); err != nil {
		t.Fatal(err)
	}
	if rc.ChallengeCount != 2 || rc.SyncerDID == ch.Syncer {
		t.Fatalf("receipt: %d challenges, signed by %s (slashed: %s)", rc.ChallengeCount, rc.SyncerDID, ch.Syncer)
	}
	if err := audit.CheckReceipt([]byte(receipt), nil); err != nil {
		t.Fatalf("receipt: %v", err)
	}
	path := filepath.Join(c.dir, "receipt.json")
	if err := os.WriteFile(path, []byte(receipt), 0o600); err != nil {
		t.Fatal(err)
	}
	out = c.mustCLI(3, "receipt", "verify", "--receipt", path, "--format", "json")
	if !strings.Contains(out, `"valid": 1`) || !strings.Contains(out, `"chain"`) {
		t.Fatalf("verify against the chain: %s", out)
	}
	t.Logf("sealed with a receipt recording %d challenges, verified against the chain, after %s", rc.ChallengeCount, time.Since(t0).Round(time.Millisecond))
}

// logHas says whether a line of n's log contains every part.
func logHas(n *chainNode, parts ...string) bool {
	b, _ := os.ReadFile(filepath.Join(n.home, "node.log"))
	for _, line := range strings.Split(string(b), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// nodeOf is the index of the validator whose node key is d.
func (c *challengeNet) nodeOf(d string) int {
	c.t.Helper()
	for i, n := range c.nodes {
		k, err := did.Load(filepath.Join(n.home, "node", "node.key"))
		if err == nil && k.DID.String() == d {
			return i
		}
	}
	c.t.Fatalf("no validator's node key is %s", d)
	return -1
}

// TestChallengeWithholdingFourValidators: the run's first syncer receives
// the trainer's payloads itself and, once it has computed round 0's
// fragment 1, withholds them (fault build). Nobody else can fetch them: the
// watcher challenges the commit as unavailable once half its window has
// passed, the validators vote "unavailable" once half the vote window has,
// and the syncer loses: slashed, excluded, the fragment re-done by the next
// syncer (as no_quorum: the inputs are gone).
func TestChallengeWithholdingFourValidators(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chain test")
	}
	t0 := time.Now()
	watcher, sponsor, trainer := chainKey(t, did.KindHuman, 51), chainKey(t, did.KindHuman, 52), chainKey(t, did.KindMachine, 53)
	c := newChallengeNet(t, []string{"--fault-withhold", "0:1"}, watcher, sponsor, trainer)
	const task = "withhold-run"
	// A 20 s round deadline: after the rollback the next syncer waits half
	// its slot for the withheld payloads before it rejects them.
	c.post(task, sponsor, trainer, `,"round_deadline_ms":20000`)
	var view struct {
		Syncer string `json:"syncer"`
	}
	if err := json.Unmarshal([]byte(c.mustCLI(0, "train", "get-run", "--task-id", task, "--format", "json")), &view); err != nil {
		t.Fatal(err)
	}
	s := c.nodeOf(view.Syncer)
	// The trainer submits through the syncer's own node: it alone holds the payloads.
	for f := 0; f < F; f++ {
		w := filepath.Join(c.dir, fmt.Sprintf("w%d.safetensors", f))
		c.mustCLI(s, "train", "get-weights", "--task-id", task, "--fragment", fmt.Sprint(f), "--out", w)
		p := filepath.Join(c.dir, fmt.Sprintf("g%d.safetensors", f))
		if err := os.WriteFile(p, gradientFrom(t, w, 0, 0, f), 0o600); err != nil {
			t.Fatal(err)
		}
		c.mustCLI(s, "train", "submit-gradient", "--task-id", task, "--round", "0", "--fragment", fmt.Sprint(f), "--payload", p, "--key", c.keyFile(trainer))
	}
	var ch wire.ChallengeRecord
	c.waitFor("the withheld commit is challenged and decided", 120*time.Second, func() bool {
		chs := c.challenges(task)
		if len(chs) > 0 && chs[0].Outcome != wire.ChallengeOpen {
			ch = chs[0]
			return true
		}
		return false
	})
	if ch.Outcome != wire.ChallengeUpheld || !ch.Unavailable || !ch.Claimed.IsZero() || ch.Fragment != 1 || ch.Syncer != view.Syncer {
		t.Fatalf("withholding challenge: %+v", ch)
	}
	t.Logf("withheld commit (height %d) → slash (height %d): %s of block time; syncer %s slashed %s",
		ch.CommitHeight, ch.Decided, c.blockTime(ch.Decided).Sub(c.blockTime(ch.CommitHeight)), ch.Syncer, ch.SyncerSlashed)
	c.waitFor("round 0 re-done by the next syncer", 60*time.Second, func() bool { return c.run(task).Round == 1 })
	if r := c.run(task); len(r.Excluded) != 1 || r.Excluded[0] != view.Syncer {
		t.Fatalf("excluded %v", r.Excluded)
	}
	t.Logf("done after %s", time.Since(t0).Round(time.Millisecond))
}

// engineFlag is the challenge tests' engine: native (light on 2 cores), or
// TENZRO_CHALLENGE_ENGINE=wasm for the plugin sandbox the syncer runs by
// default.
func engineFlag() string {
	if e := os.Getenv("TENZRO_CHALLENGE_ENGINE"); e != "" {
		return e
	}
	return "native"
}
