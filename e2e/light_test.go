package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// nodeInfo is what `tenzro node info` says about a node's libp2p addresses
// and chain.
type nodeInfo struct {
	Listen []string        `json:"listen_addrs"`
	Chain  *wire.ChainInfo `json:"chain"`
}

func (e *env) nodeInfo() nodeInfo {
	e.t.Helper()
	var info nodeInfo
	if err := json.Unmarshal([]byte(e.must("node", "info", "--format", "json")), &info); err != nil || len(info.Listen) == 0 || info.Chain == nil || info.Chain.GenesisHash == nil {
		e.t.Fatalf("node info has no listen addresses or chain: %v %+v", err, info)
	}
	return info
}

// lightArgs are the flags of a light client that joins the network of the
// node at boot by itself (extra: --genesis-hash, or nothing for trust on
// first use).
func (e *env) lightArgs(boot string, extra ...string) []string {
	args := []string{"--role", "light-client", "--data-dir", filepath.Join(e.dir, "data"), "--rpc-addr", e.addr,
		"--listen-addr", "/ip4/127.0.0.1/tcp/0", "--enclave", "none"}
	if boot != "" {
		args = append(args, "--boot-nodes", boot)
	}
	return append(args, extra...)
}

// startNode starts tenzro-node with args, logging to e's node.log.
func (e *env) startNode(args ...string) {
	e.t.Helper()
	log, err := os.OpenFile(filepath.Join(e.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "tenzro-node"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.node, e.nodeLog = cmd, log
	waitListen(e.t, e)
}

// startLight starts a light client that joins syncerEnv's chain through
// its libp2p address alone (`--role light-client --boot-nodes`): it fetches
// the genesis and the node's CometBFT RPC over /tenzro/chain-info/1.0.0 and
// follows headers from it (no replica, no chain home).
func startLight(t *testing.T, syncerEnv *env, keys string, extra ...string) *env {
	t.Helper()
	light := newEnv(t, keys)
	light.startNode(light.lightArgs(syncerEnv.nodeInfo().Listen[0], extra...)...)
	return light
}

// TestLightNodeSubmitsThroughTheChain: trainers talk only to their light
// client, which keeps no replica: it follows headers (CometBFT's light
// client) and serves the run with values proven against them, pulls the
// weights from the syncer's node by hash, checks and keeps each payload and
// puts its record on chain as a transaction whose result it checks against
// the headers; refusals come back word for word. The syncer's node fetches the payloads from the light node by
// hash and commits the fragment.
func TestLightNodeSubmitsThroughTheChain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	build(t)
	keys, trainers, sponsor := makeKeys(t, M)
	syncerEnv := newEnv(t, keys)
	syncerEnv.start()
	defer syncerEnv.stop()
	info := syncerEnv.nodeInfo()
	pin := info.Chain.GenesisHash.String()
	// Another network's hash pinned: refused, and nothing is written.
	wrong := newEnv(t, keys)
	out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), wrong.lightArgs(info.Listen[0], "--genesis-hash", wire.SHA256([]byte("other")).String())...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not the pinned") {
		t.Fatalf("light client with another network's genesis hash: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(wrong.dir, "data", "chain")); !os.IsNotExist(err) {
		t.Fatalf("a refused bootstrap left a home behind: %v", err)
	}
	// Not pinned: the boot node's genesis is trusted on first use, with a
	// warning that prints its hash.
	light := startLight(t, syncerEnv, keys)
	defer light.stop()
	if l := light.log(); !strings.Contains(l, "trusting the boot node's genesis on first use") || !strings.Contains(l, pin) {
		t.Fatalf("no trust-on-first-use warning with the genesis hash %s:\n%s", pin, tail(l))
	}
	if _, err := os.Stat(filepath.Join(light.dir, "data", "chain")); !os.IsNotExist(err) {
		t.Fatalf("the light client wrote a chain home (a replica): %v", err)
	}

	specPath := filepath.Join(syncerEnv.dir, "spec.json")
	os.WriteFile(specPath, []byte(seedSpec(sponsor)), 0o644)
	initPath := writeInit(t, syncerEnv.dir)
	syncerEnv.must("ledger", "faucet", "--did", sponsor, "--amount", "2000000000000000000000")
	syncerEnv.must("train", "post-task", "--spec", specPath, "--init-weights", initPath, "--key", filepath.Join(keys, "sponsor.key"))
	// The light client answers by proofs: it sees the run once it has
	// verified the header after the posting's block.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := light.cli(false, "train", "get-run", "--task-id", task); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the posting did not reach the light node's replica\nlight log:\n%s", tail(light.log()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i, d := range trainers {
		syncerEnv.must("ledger", "faucet", "--did", d, "--amount", "200000000000000000000")
		// The light client checks the fee against proven state: wait until it
		// has verified the header after the faucet's block.
		deadline := time.Now().Add(60 * time.Second)
		for {
			out, err := light.cli(false, "ledger", "balance", "--did", d, "--format", "json")
			if err == nil && strings.Contains(out, `"balance": "200000000000000000000"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the faucet's block did not reach the light node's replica: %s %v\nlight log:\n%s", out, err, tail(light.log()))
			}
			time.Sleep(200 * time.Millisecond)
		}
		// Enrolment through the light node: a transaction it broadcasts.
		light.must("train", "enroll-trainer", "--task-id", task, "--did", d, "--stake", "100000000000000000000", "--key", filepath.Join(keys, fmt.Sprintf("t%d.key", i)))
	}
	deadline = time.Now().Add(60 * time.Second)
	for light.getRun().Status != "running" {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not start on the light node's replica\nlight log:\n%s", tail(light.log()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := syncerEnv.fragmentHash(0)
	// Every trainer submits fragment 0 through the light node (get-weights
	// there fetches the weights from the syncer's node by hash). Halfway,
	// the light node is killed with SIGKILL and restarted: it resumes its
	// home (pinned now, boot nodes from the home) and its verified headers,
	// and the submissions it acknowledged before are on chain with their
	// payloads still served.
	for i := 0; i < M; i++ {
		if i == M/2 {
			light.kill9()
			// A wrong pin is refused against the home as well.
			out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), light.lightArgs("", "--genesis-hash", wire.SHA256([]byte("other")).String())...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "follows the network whose genesis hash is "+pin) {
				t.Fatalf("restart with another network's genesis hash: %v\n%s", err, out)
			}
			light.startNode(light.lightArgs("", "--genesis-hash", pin)...)
			if n := strings.Count(light.log(), "light client home written"); n != 1 {
				t.Fatalf("the restarted light client wrote its home %d times", n)
			}
			// It resumes from the headers it verified before the kill (a
			// SIGKILL cannot tear one write(2) of a record), not from a
			// new trust root asked of the primary.
			if !strings.Contains(light.log(), "resuming from its stored trusted header") {
				t.Fatalf("the restarted light client did not resume from its stored headers\nlight log:\n%s", tail(light.log()))
			}
			// Its scans (getRun) went by proven walks over CometBFT's RPC.
			if strings.Contains(light.log(), "answers no proven walks") {
				t.Fatalf("the light client fell back to per-key proofs\nlight log:\n%s", tail(light.log()))
			}
			var run struct {
				Fragments []struct {
					Accepted int `json:"accepted"`
				} `json:"fragments"`
			}
			if err := json.Unmarshal([]byte(light.must("train", "get-run", "--task-id", task, "--format", "json")), &run); err != nil || run.Fragments[0].Accepted != M/2 {
				t.Fatalf("after the restart the light node's replica has %+v records of fragment 0, want %d (%v)", run, M/2, err)
			}
		}
		if err := light.submit(i, 0, 0); err != nil {
			t.Fatalf("trainer %d through the light node: %v\nlight log:\n%s", i, err, tail(light.log()))
		}
		if i == 0 {
			// A refusal reaches the trainer word for word, not "forwarded".
			p := filepath.Join(light.dir, "g-0-0-0.safetensors")
			out, err := light.cli(false, "train", "submit-gradient", "--task-id", task, "--round", "0", "--fragment", "0", "--payload", p, "--key", filepath.Join(keys, "t0.key"))
			if err == nil || !strings.Contains(err.Error(), "duplicate submission") || strings.Contains(out+err.Error(), "forwarded") {
				t.Fatalf("duplicate through the light node: %v %s", err, out)
			}
		}
	}
	// Every trainer is in: the syncer's node fetches the payloads from the
	// light node and commits the fragment with new weights.
	deadline = time.Now().Add(90 * time.Second)
	for syncerEnv.fragmentHash(0) == before {
		if time.Now().After(deadline) {
			t.Fatalf("fragment 0 was not aggregated from the light node's payloads\nsyncer log:\n%s", tail(syncerEnv.log()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for light.fragmentHash(0) == before {
		if time.Now().After(deadline) {
			t.Fatal("the light node's replica did not follow the commit")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fragmentHash is fragment f's current weights hash as the node reports it.
func (e *env) fragmentHash(f int) string {
	var v struct {
		Fragments []struct {
			WeightsHash string `json:"weights_hash"`
		} `json:"fragments"`
	}
	if err := json.Unmarshal([]byte(e.must("train", "get-run", "--task-id", task, "--format", "json")), &v); err != nil || len(v.Fragments) <= f {
		e.t.Fatalf("get-run: %v", err)
	}
	return v.Fragments[f].WeightsHash
}
