package e2e

import (
	"bufio"
	"bytes"
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

// TestTestnetScript runs scripts/testnet.sh (make testnet) as a newcomer
// would: four validators on free loopback ports; then the sponsor and
// trainer block it prints, pasted into bash as is (a run posted on node 0,
// trained through node 3, sealed by whichever node the election picked);
// then the CLI against node 0 and node 3 shows the same run, balances and
// receipt. Ctrl-C (SIGINT) stops every validator: none of their ports
// accepts afterwards.
func TestTestnetScript(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process script test")
	}
	build(t)
	dir := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "testnet.sh"))
	cmd.Env = append(os.Environ(), "TESTNET_DIR="+dir, "TESTNET_BASE_PORT=0", "TESTNET_BLOCK_TIME=200ms", "TENZRO_BIN_DIR="+binDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
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
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Error("testnet.sh did not stop on SIGINT within 30 s")
		}
	}
	defer stop()
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	select {
	case <-ready:
	case err := <-exited:
		t.Fatalf("testnet.sh exited: %v\n%s", err, text())
	case <-time.After(4 * time.Minute):
		t.Fatalf("testnet.sh not ready within 4 minutes:\n%s", text())
	}
	printed := text()
	nodes := regexp.MustCompile(`(?m)^node(\d+)  JSON-RPC http://(\S+)  CometBFT RPC http://(\S+)  libp2p (/ip4/\S+/p2p/\S+)`).FindAllStringSubmatch(printed, -1)
	if len(nodes) != 4 {
		t.Fatalf("want every node's JSON-RPC, CometBFT RPC and libp2p address printed, got %d:\n%s", len(nodes), printed)
	}
	if !strings.Contains(printed, "--role light-client") || !strings.Contains(printed, "--genesis-hash") {
		t.Fatalf("no light-client command printed:\n%s", printed)
	}
	block := regexp.MustCompile(`(?s)# --- begin\n.*# --- end\n`).FindString(printed)
	if block == "" {
		t.Fatalf("no sponsor/trainer block printed:\n%s", printed)
	}
	// Pasted as printed (bash -e: the first failing command stops it).
	paste := exec.Command("bash", "-e")
	paste.Stdin = strings.NewReader(block)
	done := make(chan struct{})
	var pasteOut []byte
	var pasteErr error
	go func() { pasteOut, pasteErr = paste.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		_ = paste.Process.Kill()
		<-done
		t.Fatalf("the printed block did not finish:\n%s", pasteOut)
	}
	if pasteErr != nil || !strings.Contains(string(pasteOut), "(compact, full, chain)") {
		t.Fatalf("the printed block: %v\n%s\n%s", pasteErr, pasteOut, tailLogs(dir))
	}
	// The newcomer's walk, as printed: waits that say what they wait for, a
	// replay through node 1 (neither the posting node nor the one the trainer
	// used), and a second trainer funded by a transfer.
	for _, want := range []string{"testnet-run: round ", "receipt signed", "receipt written to", "sent 150000000000000000000 attoTNZO to"} {
		if !strings.Contains(string(pasteOut), want) {
			t.Fatalf("the printed block's output lacks %q:\n%s", want, pasteOut)
		}
	}
	trainer2 := regexp.MustCompile(`trainer2 (did:tenzro:\S+)`).FindStringSubmatch(printed)
	if trainer2 == nil || !strings.Contains(string(pasteOut), trainer2[1]+": 150000000000000000000 attoTNZO") {
		t.Fatalf("second trainer not funded as printed:\n%s", pasteOut)
	}
	// The CLI against node 0 and node 3: the same run, balances and receipt.
	rpc0, rpc3 := "http://"+nodes[0][2], "http://"+nodes[3][2]
	sponsor := regexp.MustCompile(`sponsor (did:tenzro:\S+)`).FindStringSubmatch(printed)
	trainer := regexp.MustCompile(`trainer (did:tenzro:\S+)`).FindStringSubmatch(printed)
	if sponsor == nil || trainer == nil {
		t.Fatalf("no sponsor or trainer DID printed:\n%s", printed)
	}
	cli := func(rpc string, args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(binDir, "tenzro"), append(args, "--rpc", rpc)...).Output()
		if err != nil {
			t.Fatalf("tenzro %v --rpc %s: %v %s", args, rpc, err, out)
		}
		return string(out)
	}
	for _, args := range [][]string{
		{"train", "get-run", "--task-id", "testnet-run", "--format", "json"},
		{"train", "get-receipt", "--task-id", "testnet-run", "--format", "json"},
	} {
		if a, b := cli(rpc0, args...), cli(rpc3, args...); a != b {
			t.Fatalf("tenzro %v: node 0 says\n%s\nnode 3 says\n%s", args, a, b)
		}
	}
	for _, d := range []string{sponsor[1], trainer[1]} {
		var a, b struct {
			Balance string `json:"balance"`
		}
		json.Unmarshal([]byte(cli(rpc0, "ledger", "balance", "--did", d, "--format", "json")), &a)
		json.Unmarshal([]byte(cli(rpc3, "ledger", "balance", "--did", d, "--format", "json")), &b)
		if a.Balance == "" || a != b {
			t.Fatalf("balance of %s: node 0 %q, node 3 %q", d, a.Balance, b.Balance)
		}
	}
	if !strings.Contains(cli(rpc3, "train", "get-run", "--task-id", "testnet-run", "--format", "json"), `"status": "sealed"`) {
		t.Fatal("the run is not sealed")
	}
	// Replay through a node that never held the run's payloads: not node 3
	// (the trainer submitted there), not node 1 (the block replayed through
	// it), not the elected syncer (it fetched them). Its blob store lacks them
	// until the replay asks its peers.
	var rc struct {
		SyncerDID string `json:"syncer_did"`
	}
	json.Unmarshal([]byte(cli(rpc0, "train", "get-receipt", "--task-id", "testnet-run", "--format", "json")), &rc)
	auditor, auditorHome := "", ""
	for _, i := range []int{0, 2} {
		var info struct {
			NodeDID string `json:"node_did"`
		}
		json.Unmarshal([]byte(cli("http://"+nodes[i][2], "node", "info", "--format", "json")), &info)
		if info.NodeDID != "" && info.NodeDID != rc.SyncerDID {
			auditor, auditorHome = "http://"+nodes[i][2], filepath.Join(dir, "nodes", "node"+nodes[i][1])
			break
		}
	}
	if auditor == "" {
		t.Fatalf("no node other than the syncer %s among nodes 0 and 2", rc.SyncerDID)
	}
	payload := regexp.MustCompile(`"payload_hash":\s*"(?:0x)?([0-9a-f]{64})"`).FindStringSubmatch(cli(rpc0, "train", "get-transcript", "--task-id", "testnet-run", "--format", "json"))
	if payload == nil {
		t.Fatal("no payload hash in the transcript")
	}
	blobFile := filepath.Join(auditorHome, "node", "blobs", payload[1][:2], payload[1])
	if _, err := os.Stat(blobFile); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s already holds payload %s (%v): pick a node that never held it", auditorHome, payload[1], err)
	}
	if out := cli(auditor, "receipt", "replay", "--receipt", filepath.Join(dir, "receipt.json")); !strings.Contains(out, "match") {
		t.Fatalf("replay through %s (not the posting node, never held the payloads): %s", auditor, out)
	}
	if _, err := os.Stat(blobFile); err != nil {
		t.Fatalf("the replay through %s did not fetch payload %s from its peers: %v", auditor, payload[1], err)
	}
	stop()
	for _, nd := range nodes {
		for _, a := range []string{nd[2], nd[3]} {
			if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
				c.Close()
				t.Fatalf("%s still accepts after the script stopped: a validator was left running", a)
			}
		}
	}
}

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
