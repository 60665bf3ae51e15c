package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tenzro/train/internal/hostilemod"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/safetensors"
)

func cliRSS(t *testing.T) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestPluginRunInWorkers: `tenzro plugin run` runs rules in a worker
// process: a built-in gives its answer, and a memory.grow bomb (which took
// the CLI to 8.5 GB in process) is refused precisely while the CLI's own
// RSS grows by less than 512 MB.
func TestPluginRunInWorkers(t *testing.T) {
	dir := t.TempDir()
	var inputs []string
	for i, v := range []float32{1, 3} {
		b, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{4}, []float32{v, v, v, v})}, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "in"+strconv.Itoa(i)+".safetensors")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, p)
	}
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := execute(context.Background(), append([]string{"plugin", "run"}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	out := filepath.Join(dir, "out.safetensors")
	if code, msg := run("--rule", "Mean", "--inputs", strings.Join(inputs, ","), "--out", out); code != 0 {
		t.Fatalf("plugin run Mean: %d %s", code, msg)
	}
	raw, _ := os.ReadFile(out)
	ts, _, err := safetensors.Parse(raw, safetensors.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := safetensors.F32Values(ts[0]); len(v) != 4 || v[0] != 2 {
		t.Fatalf("Mean gave %v", v)
	}

	bomb, err := hostilemod.Build(hostilemod.ABIOne, hostilemod.GrowTouch, 1)
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "bomb.wasm")
	if err := os.WriteFile(mod, bomb, 0o600); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	before := cliRSS(t)
	code, msg := run("--rule", "sha256:"+wire.SHA256(bomb).String(), "--module", mod, "--inputs", strings.Join(inputs, ","), "--out", out)
	if code == 0 || !strings.Contains(msg, "unreachable") {
		t.Fatalf("memory bomb: exit %d, %s", code, msg)
	}
	runtime.GC()
	if grew := cliRSS(t) - before; grew > 512<<20 {
		t.Fatalf("the CLI's RSS grew by %d MB", grew>>20)
	}
}
