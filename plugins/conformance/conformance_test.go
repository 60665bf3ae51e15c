package conformance

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tenzro/train/plugins/buildtool"
	"github.com/tenzro/train/plugins/builtin"
)

func examplesDir() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(f), "..", "examples")
}

func mustPass(t *testing.T, mod []byte, opt Options) {
	t.Helper()
	rep, err := Run(context.Background(), mod, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed() {
		t.Fatalf("conformance failed:\n%s", rep)
	}
	t.Logf("\n%s", rep)
}

func TestBuiltinsConform(t *testing.T) {
	params := map[string]string{"l2normbound": `{"max":1000}`, "normratio": `{"max_ratio":3}`}
	for _, stem := range builtin.Names() {
		t.Run(stem, func(t *testing.T) {
			if testing.Short() && stem != "mean" && stem != "krum" {
				t.Skip("short")
			}
			mod, err := builtin.Module(stem)
			if err != nil {
				t.Fatal(err)
			}
			opt := Options{}
			if p, ok := params[stem]; ok {
				opt.Params = json.RawMessage(p)
			}
			mustPass(t, mod, opt)
		})
	}
}

// The example third-party rules, built from source and run through the suite.
func TestExampleGo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	mod, err := buildtool.Build(context.Background(), filepath.Join(examplesDir(), "go-median"))
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, mod, Options{})
}

func TestExampleC(t *testing.T) {
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang not installed (apt-get install -y clang lld)")
	}
	mod, err := buildtool.Build(context.Background(), filepath.Join(examplesDir(), "c-meanclip"))
	if err != nil {
		t.Fatal(err)
	}
	mustPass(t, mod, Options{})
}
