package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestTestnetScript runs scripts/testnet.sh (make testnet) in its CI mode:
// four validators on free loopback ports answer, then the script stops
// them all and exits 0; afterwards none of their RPC ports accepts.
func TestTestnetScript(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process script test")
	}
	build(t)
	dir := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "testnet.sh"))
	cmd.Env = append(os.Environ(), "TESTNET_DIR="+dir, "TESTNET_BASE_PORT=0", "TESTNET_BLOCK_TIME=200ms",
		"TESTNET_EXIT_WHEN_READY=1", "TENZRO_BIN_DIR="+binDir)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(4 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("testnet.sh did not finish:\n%s", out)
	}
	if err != nil {
		t.Fatalf("testnet.sh: %v\n%s", err, out)
	}
	addrs := regexp.MustCompile(`(?m)^node\d+  RPC http://(\S+)`).FindAllStringSubmatch(string(out), -1)
	if len(addrs) != 4 {
		t.Fatalf("want 4 RPC addresses, got %d:\n%s", len(addrs), out)
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a[1], time.Second); err == nil {
			c.Close()
			t.Fatalf("%s still accepts after the script exited: a validator was left running", a[1])
		}
	}
}
