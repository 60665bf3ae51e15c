package builtin

import (
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReproducibleBuild rebuilds every built-in from source and requires the
// same bytes as the committed modules. It needs the clang recorded in
// wasm/TOOLCHAIN (other clang versions emit other code).
func TestReproducibleBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang not installed (apt-get install -y clang lld)")
	}
	want, err := os.ReadFile("wasm/TOOLCHAIN")
	if err != nil {
		t.Fatal(err)
	}
	have, _ := exec.Command(clang, "--version").Output()
	if first := strings.SplitN(string(have), "\n", 2)[0]; first != strings.TrimSpace(string(want)) {
		t.Skipf("clang is %q, the committed modules were built with %q", first, strings.TrimSpace(string(want)))
	}
	out := t.TempDir()
	cmd := exec.Command("./build.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	for _, stem := range Names() {
		committed, _ := Module(stem)
		rebuilt, err := os.ReadFile(filepath.Join(out, stem+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(committed) != sha256.Sum256(rebuilt) {
			t.Errorf("%s: rebuilt sha256 %x differs from committed %x", stem, sha256.Sum256(rebuilt), sha256.Sum256(committed))
		}
	}
}
