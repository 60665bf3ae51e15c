// Package buildtool builds a plugin from a source directory: Go sources with
// the local Go toolchain (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared), C
// sources with clang --target=wasm32 (the flags of plugins/builtin/build.sh),
// then attaches the directory's manifest.json as the manifest section.
package buildtool

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tenzro/train/plugins/abi"
)

// CFlags are the clang flags for C plugins (same as the built-ins).
var CFlags = []string{"--target=wasm32", "-O3", "-msimd128", "-mbulk-memory", "-mnontrapping-fptoint", "-msign-ext",
	"-ffreestanding", "-nostdlib", "-ffp-contract=off", "-fno-ident", "-g0",
	"-Wl,--no-entry", "-Wl,--strip-all", "-Wl,-z,stack-size=1048576"}

// Build compiles dir and returns the module with its manifest attached.
func Build(ctx context.Context, dir string) ([]byte, error) {
	man, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("build: %w (a plugin directory needs manifest.json)", err)
	}
	goFiles, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	cFiles, _ := filepath.Glob(filepath.Join(dir, "*.c"))
	tmp, err := os.MkdirTemp("", "tenzro-plugin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "plugin.wasm")
	var cmd *exec.Cmd
	switch {
	case len(goFiles) > 0:
		cmd = exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, ".")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		cmd.Dir = dir
	case len(cFiles) > 0:
		clang := os.Getenv("CLANG")
		if clang == "" {
			clang = "clang"
		}
		args := append(append([]string{}, CFlags...), "-o", out)
		args = append(args, cFiles...)
		cmd = exec.CommandContext(ctx, clang, args...)
	default:
		return nil, fmt.Errorf("build: %s has no .go or .c sources", dir)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build: %s: %w\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	mod, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	return abi.AppendManifest(mod, man)
}
