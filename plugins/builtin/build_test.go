package builtin

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReproducibleBuild rebuilds every built-in from source and requires the
// same bytes as the committed modules. It needs the clang recorded in
// wasm/TOOLCHAIN (other clang versions emit other code); it fails, rather
// than skips, when that clang is missing.
func TestReproducibleBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	want, err := os.ReadFile("wasm/TOOLCHAIN")
	if err != nil {
		t.Fatal(err)
	}
	clang, err := pinnedClang(strings.TrimSpace(string(want)))
	if err != nil {
		// Not a skip: a skip would silently turn off "built-in hashes are
		// checkable from source". `make tools` installs the pinned clang.
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("./build.sh", out)
	cmd.Env = append(os.Environ(), "CLANG="+clang)
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

// pinnedClang finds a clang whose --version first line is want: the
// versioned name first (clang-14 for "Debian clang version 14.0.6"), then
// plain clang.
func pinnedClang(want string) (string, error) {
	var names []string
	if f := strings.Fields(want); len(f) > 0 {
		v := f[len(f)-1]
		names = append(names, "clang-"+strings.SplitN(v, ".", 2)[0])
	}
	names = append(names, "clang")
	var seen []string
	for _, name := range names {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		have, _ := exec.Command(path, "--version").Output()
		first := strings.SplitN(string(have), "\n", 2)[0]
		if first == want {
			return path, nil
		}
		seen = append(seen, fmt.Sprintf("%s is %q", path, first))
	}
	return "", fmt.Errorf("the built-ins are pinned to %q (wasm/TOOLCHAIN) and no such clang is installed (%s); run `make tools` (Debian bookworm: apt-get install -y clang-14 lld-14)", want, strings.Join(append(seen, "checked "+strings.Join(names, ", ")), "; "))
}
