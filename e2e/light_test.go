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

// startLight starts a light-client node that follows syncerEnv's chain: a
// home written by `tenzro-node init` (the dev chain's genesis, the dev node
// as its persistent peer), its libp2p host booted from the dev node.
func startLight(t *testing.T, syncerEnv *env, keys string) *env {
	t.Helper()
	var info struct {
		Listen []string        `json:"listen_addrs"`
		Chain  *wire.ChainInfo `json:"chain"`
	}
	if err := json.Unmarshal([]byte(syncerEnv.must("node", "info", "--format", "json")), &info); err != nil || len(info.Listen) == 0 || info.Chain == nil {
		t.Fatalf("node info has no listen addresses or chain: %v %+v", err, info)
	}
	light := newEnv(t, keys)
	home := filepath.Join(light.dir, "home")
	if out, err := exec.Command(filepath.Join(binDir, "tenzro-node"), "init", "--home", home,
		"--genesis", filepath.Join(syncerEnv.dir, "data", "chain", "config", "genesis.json"), "--peers", info.Chain.Peer,
		"--p2p-addr", freeAddr(t), "--rpc-addr", freeAddr(t)).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	log, _ := os.Create(filepath.Join(light.dir, "node.log"))
	cmd := exec.Command(filepath.Join(binDir, "tenzro-node"), "--home", home, "--role", "light-client", "--rpc-addr", light.addr,
		"--listen-addr", "/ip4/127.0.0.1/tcp/0", "--enclave", "none", "--boot-nodes", info.Listen[0])
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	light.node, light.nodeLog = cmd, log
	waitListen(t, light)
	return light
}

// TestLightNodeSubmitsThroughTheChain: trainers talk only to their light
// node, which follows the chain without voting: it serves the run from its
// own replica, pulls the weights from the syncer's node by hash, checks and
// keeps each payload and puts its record on chain; refusals come back word
// for word. The syncer's node fetches the payloads from the light node by
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
	light := startLight(t, syncerEnv, keys)
	defer light.stop()

	specPath := filepath.Join(syncerEnv.dir, "spec.json")
	os.WriteFile(specPath, []byte(seedSpec(sponsor)), 0o644)
	initPath := writeInit(t, syncerEnv.dir)
	syncerEnv.must("ledger", "faucet", "--did", sponsor, "--amount", "2000000000000000000000")
	syncerEnv.must("train", "post-task", "--spec", specPath, "--init-weights", initPath, "--key", filepath.Join(keys, "sponsor.key"))
	// The light node answers from its own replica: it sees the run once it
	// has the posting's block.
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
	// there fetches the weights from the syncer's node by hash).
	for i := 0; i < M; i++ {
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
