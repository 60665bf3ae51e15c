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
)

// TestLightNodeForwardsSubmissions: a trainer talks only to its light node;
// the light node relays the submission over gossip (announcement + payload
// by hash) and the syncer's node accepts it.
func TestLightNodeForwardsSubmissions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	build(t)
	keys, trainers, sponsor := makeKeys(t, M)
	syncerEnv := newEnv(t, keys)
	syncerEnv.start()
	defer syncerEnv.stop()
	var info struct {
		PeerID string   `json:"peer_id"`
		Listen []string `json:"listen_addrs"`
	}
	if err := json.Unmarshal([]byte(syncerEnv.must("node", "info", "--format", "json")), &info); err != nil || len(info.Listen) == 0 {
		t.Fatalf("node info has no listen addresses: %v %+v", err, info)
	}
	light := newEnv(t, keys)
	lk := filepath.Join(t.TempDir(), "light.key")
	log, _ := os.Create(filepath.Join(light.dir, "node.log"))
	cmd := exec.Command(filepath.Join(binDir, "tenzro-node"), "--role", "light-client", "--data-dir", filepath.Join(light.dir, "data"), "--rpc-addr", light.addr,
		"--listen-addr", "/ip4/127.0.0.1/tcp/0", "--node-key", lk, "--enclave", "none", "--boot-nodes", info.Listen[0])
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	light.node, light.nodeLog = cmd, log
	defer light.stop()
	waitListen(t, light)

	// The run lives on the syncer's node.
	specPath := filepath.Join(syncerEnv.dir, "spec.json")
	os.WriteFile(specPath, []byte(seedSpec(sponsor)), 0o644)
	initPath := writeInit(t, syncerEnv.dir)
	syncerEnv.must("ledger", "faucet", "--did", sponsor, "--amount", "2000000000000000000000")
	syncerEnv.must("train", "post-task", "--spec", specPath, "--init-weights", initPath, "--key", filepath.Join(keys, "sponsor.key"))
	for i, d := range trainers {
		syncerEnv.must("ledger", "faucet", "--did", d, "--amount", "200000000000000000000")
		syncerEnv.must("train", "enroll-trainer", "--task-id", task, "--did", d, "--stake", "100000000000000000000", "--key", filepath.Join(keys, fmt.Sprintf("t%d.key", i)))
	}
	// Trainer 0 pulls weights from the syncer but submits to its light node.
	w := filepath.Join(syncerEnv.dir, "w0.safetensors")
	syncerEnv.must("train", "get-weights", "--task-id", task, "--fragment", "0", "--out", w)
	payload := gradientFrom(t, w, 0, 0, 0)
	p := filepath.Join(syncerEnv.dir, "g.safetensors")
	os.WriteFile(p, payload, 0o644)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := light.must("train", "submit-gradient", "--task-id", task, "--round", "0", "--fragment", "0", "--payload", p, "--key", filepath.Join(keys, "t0.key"))
		if !strings.Contains(out, "forwarded") {
			t.Fatalf("light node did not forward: %s", out)
		}
		// Gossip is best effort while the mesh forms: resubmit until the syncer has it
		// (a repeat of the same payload is a harmless duplicate on the syncer).
		if syncerEnv.getRun().Fragments[0].Accepted == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("syncer never accepted the forwarded submission\nlight log:\n%s\nsyncer log:\n%s", tail(light.log()), tail(syncerEnv.log()))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
