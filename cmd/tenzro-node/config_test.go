package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/syncer"
)

// captured runs the command with a fake runner and returns the config it got.
func captured(t *testing.T, args ...string) (Config, int, string) {
	t.Helper()
	var got Config
	var errOut bytes.Buffer
	cmd := newCmd(func(_ context.Context, cfg Config, _ *slog.Logger) error { got = cfg; return nil }, &errOut)
	cmd.SetArgs(args)
	cmd.SetErr(&errOut)
	cmd.SetOut(&errOut)
	if err := cmd.Execute(); err != nil {
		if _, ok := err.(usageError); ok {
			return got, 2, err.Error()
		}
		return got, 1, err.Error()
	}
	return got, 0, errOut.String()
}

func TestDefaults(t *testing.T) {
	cfg, code, msg := captured(t)
	if code != 0 {
		t.Fatal(msg)
	}
	home, _ := os.UserHomeDir()
	want := Config{Role: "syncer", DataDir: filepath.Join(home, ".tenzro", "node"), ListenAddr: "/ip4/0.0.0.0/tcp/4001",
		RPCAddr: "127.0.0.1:8545", Engine: defaultEngine, MaxRequestBytes: 256 << 20, LogLevel: "info", LogFormat: "text",
		NodeKey: filepath.Join(home, ".tenzro", "node", "node.key")}
	if cfg.Role != want.Role || cfg.DataDir != want.DataDir || cfg.ListenAddr != want.ListenAddr || cfg.RPCAddr != want.RPCAddr ||
		cfg.Engine != want.Engine || cfg.MaxRequestBytes != want.MaxRequestBytes || cfg.MaxBlobBytes != DefaultMaxBlobBytes || cfg.NodeKey != want.NodeKey || cfg.Dev || cfg.MetricsAddr != "" ||
		cfg.QuantCacheBytes != syncer.DefaultQuantCacheBytes || cfg.InputCacheBytes != syncer.DefaultInputCacheBytes {
		t.Fatalf("defaults %+v", cfg)
	}
}

func TestConfigFileThenFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, body string }{
		{"node.yaml", "role: trainer\nrpc-addr: 127.0.0.1:9000\nboot-nodes: [/ip4/1.2.3.4/tcp/4001/p2p/x, /ip4/5.6.7.8/tcp/4001/p2p/y]\nmax-request-bytes: 67108864\ndev: true\n"},
		{"node.json", `{"role":"trainer","rpc-addr":"127.0.0.1:9000","boot-nodes":["/ip4/1.2.3.4/tcp/4001/p2p/x","/ip4/5.6.7.8/tcp/4001/p2p/y"],"max-request-bytes":67108864,"dev":true}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name)
			os.WriteFile(path, []byte(c.body), 0o644)
			cfg, code, msg := captured(t, "--config", path, "--rpc-addr", "127.0.0.1:9999", "--data-dir", dir)
			if code != 0 {
				t.Fatal(msg)
			}
			if cfg.Role != "trainer" || cfg.RPCAddr != "127.0.0.1:9999" || len(cfg.BootNodes) != 2 || cfg.MaxRequestBytes != 64<<20 || !cfg.Dev ||
				cfg.NodeKey != filepath.Join(dir, "node.key") {
				t.Fatalf("layered config %+v", cfg)
			}
		})
	}
}

func TestBadConfigAndFlags(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("rpc_addr: 1.2.3.4:1\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--role", "miner"}, "role"},
		{[]string{"--engine", "gpu"}, "engine"},
		{[]string{"--dashboard", "maybe"}, "dashboard"},
		{[]string{"--max-request-bytes", "10"}, "max-request-bytes"},
		{[]string{"--large-min-rate", "0"}, "large-min-rate"},
		{[]string{"--quant-cache-bytes", "-1"}, "quant-cache-bytes -1: want 0 (off) .. 68719476736 bytes (default 268435456)"},
		{[]string{"--input-cache-bytes", "1e9"}, "input-cache-bytes"},
		{[]string{"--input-cache-bytes", "68719476737"}, "input-cache-bytes 68719476737: want 0 (off)"},
		{[]string{"--config", typo}, `unknown key "rpc_addr"`},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"--bogus"}, "unknown flag"},
		{[]string{"extra"}, "unknown command"},
	}
	for _, c := range cases {
		_, code, msg := captured(t, c.args...)
		if code != 2 || !strings.Contains(msg, c.want) {
			t.Errorf("%v: exit %d %q, want usage error containing %q", c.args, code, msg, c.want)
		}
	}
}

// TestRoleLightClient: the seed's --role light-client is accepted and means
// the light role (light stays an alias); --dashboard auto follows --dev.
func TestRoleLightClient(t *testing.T) {
	for _, role := range []string{"light-client", "light"} {
		cfg, code, msg := captured(t, "--role", role)
		if code != 0 || cfg.Role != "light" {
			t.Errorf("--role %s: exit %d %q, role %q", role, code, msg, cfg.Role)
		}
	}
	for _, c := range []struct {
		args []string
		on   bool
	}{{nil, false}, {[]string{"--dev"}, true}, {[]string{"--dev", "--dashboard", "off"}, false}, {[]string{"--dashboard", "on"}, true}} {
		cfg, code, msg := captured(t, c.args...)
		if code != 0 || cfg.dashboardOn() != c.on {
			t.Errorf("%v: exit %d %q, dashboard on %v, want %v", c.args, code, msg, cfg.dashboardOn(), c.on)
		}
	}
}

// TestRoleFullAndLightFlags: --role full (the replica) is a role of its
// own; the light client's flags parse, and out-of-range ones are usage
// errors.
func TestRoleFullAndLightFlags(t *testing.T) {
	cfg, code, msg := captured(t, "--role", "full")
	if code != 0 || cfg.Role != "full" || isHeaderLight(cfg) || !isLight(cfg) {
		t.Fatalf("--role full: exit %d %q, role %q", code, msg, cfg.Role)
	}
	cfg, code, msg = captured(t, "--role", "light-client", "--light-primary", "http://127.0.0.1:26657", "--light-witnesses", "http://127.0.0.1:1,http://127.0.0.1:2",
		"--trust-height", "7", "--trust-hash", strings.Repeat("ab", 32), "--trusting-period", "24h")
	if code != 0 || !isHeaderLight(cfg) || isLight(cfg) || cfg.LightPrimary != "http://127.0.0.1:26657" || len(cfg.LightWitnesses) != 2 || cfg.TrustHeight != 7 || cfg.TrustingPeriod != 24*time.Hour {
		t.Fatalf("light flags: exit %d %q, %+v", code, msg, cfg)
	}
	for _, args := range [][]string{{"--trust-height", "-1"}, {"--trusting-period", "-1h"}, {"--role", "archive"}, {"--role", "light-client", "--home", "/tmp/h"}, {"--role", "light", "--dev"}} {
		if _, code, msg := captured(t, args...); code != 2 {
			t.Errorf("%v: exit %d %q, want a usage error", args, code, msg)
		}
	}
}

func TestBootNodesCommaList(t *testing.T) {
	cfg, code, msg := captured(t, "--boot-nodes", "/ip4/1.2.3.4/tcp/1/p2p/a,/ip4/5.6.7.8/tcp/1/p2p/b")
	if code != 0 || len(cfg.BootNodes) != 2 {
		t.Fatalf("%d %s %+v", code, msg, cfg.BootNodes)
	}
}

func TestNodeKeyCreatedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "node.key")
	k1, created, err := loadOrCreateNodeKey(path)
	if err != nil || !created {
		t.Fatal(err, created)
	}
	k2, created, err := loadOrCreateNodeKey(path)
	if err != nil || created || k1.DID.String() != k2.DID.String() {
		t.Fatal("node key not reused", err, created)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
}

// TestCacheFlags: the syncer's cache sizes pass through (0 turns a cache
// off, which syncer.Config spells negative).
func TestCacheFlags(t *testing.T) {
	cfg, code, msg := captured(t, "--quant-cache-bytes", "0", "--input-cache-bytes", "1048576")
	if code != 0 {
		t.Fatal(msg)
	}
	if cfg.QuantCacheBytes != 0 || cfg.InputCacheBytes != 1<<20 || cacheBytes(cfg.QuantCacheBytes) >= 0 || cacheBytes(cfg.InputCacheBytes) != 1<<20 {
		t.Fatalf("quant %d input %d", cfg.QuantCacheBytes, cfg.InputCacheBytes)
	}
}
