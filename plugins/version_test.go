package plugins

import (
	"os"
	"strings"
	"testing"
)

// goModVersion reads the version go.mod requires for a module.
func goModVersion(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	t.Fatalf("go.mod does not require %s", path)
	return ""
}

// TestWazeroVersionMatchesGoMod: the version the profile (and so every
// receipt) names is the one go.mod pins, both as linked into the test binary
// and as the fallback used without build information.
func TestWazeroVersionMatchesGoMod(t *testing.T) {
	want := goModVersion(t, wazeroModule)
	if WazeroVersion != want {
		t.Fatalf("WazeroVersion %q, go.mod pins %q", WazeroVersion, want)
	}
	if wazeroPinned != want {
		t.Fatalf("wazeroPinned %q, go.mod pins %q: update version.go", wazeroPinned, want)
	}
	if got := linkedVersion("example.invalid/none", "fallback"); got != "fallback" {
		t.Fatalf("an unlinked module gave %q", got)
	}
}
