package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/tenzro/train/dataset"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// maxConfigBytes bounds a --config file.
const maxConfigBytes = 1 << 20

// Config is the daemon's configuration: defaults, then the --config file
// (JSON or YAML, keys as the flag names), then flags given on the command
// line.
type Config struct {
	Role       string   `koanf:"role"`
	DataDir    string   `koanf:"data-dir"`
	ListenAddr string   `koanf:"listen-addr"`
	RPCAddr    string   `koanf:"rpc-addr"`
	BootNodes  []string `koanf:"boot-nodes"`
	Dev        bool     `koanf:"dev"`
	Home       string   `koanf:"home"`
	// Genesis and GenesisHash pin the network a light client joins (a
	// genesis file, or the hex GenesisHash of one).
	Genesis         string `koanf:"genesis"`
	GenesisHash     string `koanf:"genesis-hash"`
	NodeKey         string `koanf:"node-key"`
	Engine          string `koanf:"engine"`
	MaxRequestBytes int64  `koanf:"max-request-bytes"`
	// MaxBlobBytes caps one blob uploaded with PUT /blobs (0: MaxRequestBytes).
	MaxBlobBytes    int64  `koanf:"max-blob-bytes"`
	MetricsAddr     string `koanf:"metrics-addr"`
	LogLevel        string `koanf:"log-level"`
	LogFormat       string `koanf:"log-format"`
	Enclave         string `koanf:"enclave"`
	TDXCollateral   string `koanf:"tdx-collateral"`
	Dashboard       string `koanf:"dashboard"`
	DatasetMaxBytes int64  `koanf:"dataset-max-bytes"`
	IPFSDHT         bool   `koanf:"ipfs-dht"`
	// DatasetStall fails a dataset fetch when no block arrives for this long.
	DatasetStall time.Duration `koanf:"dataset-stall-timeout"`
	// DatasetDIDCount and DatasetDIDBytes bound what one DID pins through
	// signed imports and fetches (datasets, bytes of blocks).
	DatasetDIDCount int   `koanf:"dataset-did-count"`
	DatasetDIDBytes int64 `koanf:"dataset-did-bytes"`
	// LargeMinRate and LargeGraceMs set the minimum transfer rate of large
	// request bodies (rpc.Options.LargeMinRate, LargeGrace).
	LargeMinRate int64 `koanf:"large-min-rate"`
	LargeGraceMs int64 `koanf:"large-grace-ms"`
	// Watch re-executes every challengeable commit and challenges those
	// that differ (syncer.Config.Watch); WatchConcurrency bounds it.
	Watch            bool `koanf:"watch"`
	WatchConcurrency int  `koanf:"watch-concurrency"`
	// RPCAllowOrigins are browser origins allowed to make state-changing
	// requests to the RPC port besides its own (rpc.Options.AllowedOrigins).
	RPCAllowOrigins []string `koanf:"rpc-allow-origin"`
	// Blob pricing and collection (blobpolicy.go, docs/protocol/blobs.md).
	BlobDiskCap          int64         `koanf:"blob-disk-cap"`
	BlobDIDQuota         int64         `koanf:"blob-did-quota"`
	BlobPrice            string        `koanf:"blob-price"`
	BlobTTL              time.Duration `koanf:"blob-ttl"`
	BlobPeerBytesPerHour int64         `koanf:"blob-peer-bytes-per-hour"`
	// Archive keeps every blob a run references, final rounds' payloads
	// included, for replays of old runs (blobpolicy.go).
	Archive bool `koanf:"archive"`
	// HeavyMemoryBytes bounds heavy reads (rpc.Options.HeavyMemoryBytes).
	HeavyMemoryBytes int64 `koanf:"heavy-memory-bytes"`
	// QuantCacheBytes and InputCacheBytes bound the syncer's two
	// speed-only caches (syncer.Config; 0: off).
	QuantCacheBytes int64 `koanf:"quant-cache-bytes"`
	InputCacheBytes int64 `koanf:"input-cache-bytes"`

	// SnapshotInterval and SnapshotKeep: state-sync snapshots every this
	// many heights, this many kept (0: the home's tenzro-chain.json).
	SnapshotInterval int64 `koanf:"snapshot-interval"`
	SnapshotKeep     int   `koanf:"snapshot-keep"`
	// StateKeepHeights: state tree versions kept (0: the home's, -1: all).
	StateKeepHeights int64 `koanf:"state-keep-heights"`
	// MempoolSenderLimit: transactions one signer may have waiting in
	// this node's mempool (0: chain.DefaultMempoolSenderLimit, -1: none).
	MempoolSenderLimit int `koanf:"mempool-sender-limit"`

	// A light client's full nodes (CometBFT RPC URLs; default: what its
	// boot nodes said) and trust root (default: the primary's latest header
	// signed by the genesis validators).
	LightPrimary   string        `koanf:"light-primary"`
	LightWitnesses []string      `koanf:"light-witnesses"`
	TrustHeight    int64         `koanf:"trust-height"`
	TrustHash      string        `koanf:"trust-hash"`
	TrustingPeriod time.Duration `koanf:"trusting-period"`

	// fault is set by the faultinject build's flags only (fault_inject.go).
	fault *syncer.Fault
	// holdWrites holds the blob store's deferred writes (faultinject
	// builds' --fault-hold-state-writes only: the crash tests' window).
	holdWrites func(wire.Hash)

	// rpcSet and listenSet say whether --rpc-addr and --listen-addr were
	// given (else a home's own addresses apply).
	rpcSet, listenSet, bootSet bool
}

// configKeys are the keys a config file may set (the flag names).
var configKeys = map[string]bool{
	"role": true, "data-dir": true, "home": true, "genesis": true, "genesis-hash": true, "listen-addr": true, "rpc-addr": true, "boot-nodes": true, "dev": true,
	"node-key": true, "engine": true, "max-request-bytes": true, "metrics-addr": true, "log-level": true, "log-format": true,
	"enclave": true, "tdx-collateral": true, "dashboard": true, "dataset-max-bytes": true, "ipfs-dht": true, "dataset-stall-timeout": true,
	"dataset-did-count": true, "dataset-did-bytes": true,
	"large-min-rate": true, "large-grace-ms": true, "max-blob-bytes": true, "watch": true, "watch-concurrency": true,
	"rpc-allow-origin": true, "blob-disk-cap": true, "blob-did-quota": true, "blob-price": true, "blob-ttl": true,
	"blob-peer-bytes-per-hour": true, "heavy-memory-bytes": true, "archive": true, "quant-cache-bytes": true, "input-cache-bytes": true,

	"snapshot-interval": true, "snapshot-keep": true, "state-keep-heights": true, "mempool-sender-limit": true,
	"light-primary": true, "light-witnesses": true, "trust-height": true, "trust-hash": true, "trusting-period": true,
}

// fileProvider reads a config file with a size limit (koanf.Provider).
type fileProvider struct{ path string }

func (p fileProvider) ReadBytes() ([]byte, error) {
	f, err := os.Open(p.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxConfigBytes)
	}
	return b, nil
}

func (fileProvider) Read() (map[string]any, error) {
	return nil, errors.New("fileProvider: use ReadBytes")
}

// strictParser decodes JSON or YAML into a flat map and refuses unknown
// keys, so a typo in a config file is an error, not a silent default
// (koanf.Parser).
type strictParser struct{ yaml bool }

func (p strictParser) Unmarshal(b []byte) (map[string]any, error) {
	m := map[string]any{}
	if p.yaml {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&m); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, err
		}
		if dec.More() {
			return nil, errors.New("trailing data after the JSON object")
		}
		for k, v := range m {
			if n, ok := v.(json.Number); ok {
				i, err := n.Int64()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
				m[k] = i
			}
		}
	}
	for k := range m {
		if !configKeys[k] {
			return nil, fmt.Errorf("unknown key %q (keys are the flag names, e.g. rpc-addr)", k)
		}
	}
	return m, nil
}

func (strictParser) Marshal(map[string]any) ([]byte, error) { return nil, errors.New("not supported") }

// flagProvider yields the flags set on the command line (koanf.Provider).
type flagProvider struct{ fs *pflag.FlagSet }

func (p flagProvider) ReadBytes() ([]byte, error) { return nil, errors.New("flagProvider: use Read") }

func (p flagProvider) Read() (map[string]any, error) {
	m := map[string]any{}
	var err error
	p.fs.Visit(func(f *pflag.Flag) {
		if f.Name == "config" || err != nil {
			return
		}
		switch f.Value.Type() {
		case "bool":
			m[f.Name], err = p.fs.GetBool(f.Name)
		case "int64":
			m[f.Name], err = p.fs.GetInt64(f.Name)
		case "stringSlice":
			m[f.Name], err = p.fs.GetStringSlice(f.Name)
		default:
			m[f.Name] = f.Value.String()
		}
	})
	return m, err
}

// defaults returns the built-in configuration.
func defaults() Config {
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return Config{
		Role:                 "syncer",
		DataDir:              filepath.Join(home, ".tenzro", "node"),
		ListenAddr:           "/ip4/0.0.0.0/tcp/4001",
		RPCAddr:              "127.0.0.1:8545",
		Engine:               defaultEngine,
		MaxRequestBytes:      256 << 20,
		MaxBlobBytes:         DefaultMaxBlobBytes,
		LogLevel:             "info",
		LogFormat:            "text",
		Enclave:              "auto",
		Dashboard:            "auto",
		LargeMinRate:         rpc.DefaultLargeMinRate,
		LargeGraceMs:         rpc.DefaultLargeGrace.Milliseconds(),
		BlobDiskCap:          DefaultBlobDiskCap,
		BlobDIDQuota:         DefaultBlobDIDQuota,
		BlobPrice:            DefaultBlobPrice,
		BlobTTL:              DefaultBlobTTL,
		BlobPeerBytesPerHour: rpc.DefaultBlobPeerBytesPerHour,
		HeavyMemoryBytes:     rpc.DefaultHeavyMemoryBytes,
		QuantCacheBytes:      syncer.DefaultQuantCacheBytes,
		InputCacheBytes:      syncer.DefaultInputCacheBytes,
		DatasetDIDCount:      dataset.DefaultQuotaCount,
		DatasetDIDBytes:      dataset.DefaultQuotaBytes,
	}
}

// maxCacheBytes bounds --quant-cache-bytes and --input-cache-bytes (64 GiB):
// more is a typo, not a cache (each entry is a fraction of a MiB).
const maxCacheBytes = 64 << 30

// Blob pricing defaults (RATIONALE "Who may upload a blob").
const (
	// DefaultMaxBlobBytes caps one uploaded blob (1 GiB): the seed's 200M
	// spec posts ≈ 800 MB of F32 initial weights (400 MB in BF16), more
	// than a JSON request may carry. Uploads are signed, funded intents
	// paid per byte, so the larger cap costs the uploader, not the node.
	DefaultMaxBlobBytes = 1 << 30
	// DefaultBlobDiskCap bounds the blob store (100 GiB).
	DefaultBlobDiskCap = 100 << 30
	// DefaultBlobDIDQuota bounds one DID's unreferenced uploads (4 GiB:
	// more than one submission of the largest payload, 1 GiB per blob).
	DefaultBlobDIDQuota = 4 << 30
	// DefaultBlobPrice is the balance each unreferenced byte needs: 10^9
	// attoTNZO, so 1 TNZO per GB.
	DefaultBlobPrice = "1000000000"
	// DefaultBlobTTL is how long an upload may stay unreferenced, and how
	// long a final round's payloads stay after their round became final.
	DefaultBlobTTL = 24 * time.Hour
)

// loadConfig layers defaults, the --config file and the set flags.
func loadConfig(fs *pflag.FlagSet, path string) (Config, error) {
	k := koanf.New(".")
	cfg := defaults()
	if path != "" {
		yamlFile := strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")
		if err := k.Load(fileProvider{path}, strictParser{yaml: yamlFile}); err != nil {
			return cfg, fmt.Errorf("--config %s: %w", path, err)
		}
	}
	if err := k.Load(flagProvider{fs}, nil); err != nil {
		return cfg, fmt.Errorf("flags: %w", err)
	}
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return cfg, err
	}
	cfg.rpcSet, cfg.listenSet, cfg.bootSet = k.Exists("rpc-addr"), k.Exists("listen-addr"), k.Exists("boot-nodes")
	fault, err := faultFromFlags(fs)
	if err != nil {
		return cfg, err
	}
	cfg.fault = fault
	if cfg.holdWrites, err = holdWritesFromFlags(fs); err != nil {
		return cfg, err
	}
	if cfg.Home != "" && !k.Exists("data-dir") {
		// A home's node keeps its store, blobs and key beside the chain.
		cfg.DataDir = filepath.Join(cfg.Home, "node")
	}
	if cfg.NodeKey == "" {
		cfg.NodeKey = filepath.Join(cfg.DataDir, "node.key")
	}
	return cfg, nil
}

func (c *Config) validate() error {
	if c.Role == "light-client" { // the seed's name; "light" is the short form
		c.Role = "light"
	}
	switch {
	case c.Role != "syncer" && c.Role != "trainer" && c.Role != "light" && c.Role != "full":
		return fmt.Errorf("role %q: want syncer, trainer, full or light-client (alias light)", c.Role)
	case c.Role == "light" && (c.Home != "" || c.Dev):
		return errors.New("a light client keeps no chain home and runs no chain: drop --home/--dev (it joins through --boot-nodes), or run a home as a replica with --role full")
	case c.TrustHeight < 0 || c.TrustingPeriod < 0:
		return fmt.Errorf("trust-height %d / trusting-period %s: want 0 or more", c.TrustHeight, c.TrustingPeriod)
	case c.Engine != "native" && c.Engine != "wasm":
		return fmt.Errorf("engine %q: want native or wasm", c.Engine)
	case c.DataDir == "":
		return errors.New("data-dir is empty")
	case c.RPCAddr == "":
		return errors.New("rpc-addr is empty")
	case c.MaxRequestBytes < 1<<20 || c.MaxRequestBytes > 4<<30:
		return fmt.Errorf("max-request-bytes %d: want 1 MiB .. 4 GiB", c.MaxRequestBytes)
	case c.MaxBlobBytes < 0 || c.MaxBlobBytes > machine.MaxInitWeights:
		return fmt.Errorf("max-blob-bytes %d: want 0 (same as max-request-bytes) .. %d", c.MaxBlobBytes, int64(machine.MaxInitWeights))
	case c.Dashboard != "auto" && c.Dashboard != "on" && c.Dashboard != "off":
		return fmt.Errorf("dashboard %q: want auto, on or off", c.Dashboard)
	case c.LargeMinRate < 1 || c.LargeGraceMs < 0:
		return fmt.Errorf("large-min-rate %d / large-grace-ms %d: want a rate ≥ 1 byte/s and a grace ≥ 0", c.LargeMinRate, c.LargeGraceMs)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("log-format %q: want text or json", c.LogFormat)
	case c.DatasetMaxBytes < 0:
		return fmt.Errorf("dataset-max-bytes %d: want a positive size (0: the default, 4 GiB)", c.DatasetMaxBytes)
	case c.DatasetStall < 0:
		return fmt.Errorf("dataset-stall-timeout %s: want a positive duration", c.DatasetStall)
	case c.DatasetDIDCount < 1 || c.DatasetDIDBytes < 1:
		return fmt.Errorf("dataset-did-count %d / dataset-did-bytes %d: want at least 1 dataset and 1 byte per DID", c.DatasetDIDCount, c.DatasetDIDBytes)
	case c.BlobDiskCap < 0 || c.BlobDIDQuota < 1 || c.BlobPeerBytesPerHour < 1 || c.HeavyMemoryBytes < 1<<20:
		return fmt.Errorf("blob-disk-cap %d (≥ 0, 0: none), blob-did-quota %d, blob-peer-bytes-per-hour %d (≥ 1) or heavy-memory-bytes %d (≥ 1 MiB) out of range",
			c.BlobDiskCap, c.BlobDIDQuota, c.BlobPeerBytesPerHour, c.HeavyMemoryBytes)
	case c.QuantCacheBytes < 0 || c.QuantCacheBytes > maxCacheBytes:
		return fmt.Errorf("quant-cache-bytes %d: want 0 (off) .. %d bytes (default %d)", c.QuantCacheBytes, int64(maxCacheBytes), int64(syncer.DefaultQuantCacheBytes))
	case c.InputCacheBytes < 0 || c.InputCacheBytes > maxCacheBytes:
		return fmt.Errorf("input-cache-bytes %d: want 0 (off) .. %d bytes (default %d)", c.InputCacheBytes, int64(maxCacheBytes), int64(syncer.DefaultInputCacheBytes))
	case c.BlobTTL < time.Second:
		return fmt.Errorf("blob-ttl %s: want at least 1s", c.BlobTTL)
	case c.Dev && (c.Genesis != "" || c.GenesisHash != ""):
		return errors.New("--genesis and --genesis-hash pin the network a node joins; --dev makes its own")
	}
	if c.GenesisHash != "" {
		if _, err := wire.ParseHash(c.GenesisHash); err != nil {
			return fmt.Errorf("genesis-hash %q: %w", c.GenesisHash, err)
		}
	}
	var lvl slogLevel
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("log-level %q: %w", c.LogLevel, err)
	}
	if p, ok := new(big.Int).SetString(c.BlobPrice, 10); !ok || p.Sign() <= 0 || c.BlobPrice[0] == '0' {
		return fmt.Errorf("blob-price %q: want a positive decimal amount of attoTNZO per byte", c.BlobPrice)
	}
	for _, o := range c.RPCAllowOrigins {
		if o == "*" {
			continue
		}
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return fmt.Errorf("rpc-allow-origin %q: want scheme://host[:port] (http or https) or *", o)
		}
	}
	cleaned := c.BootNodes[:0]
	for _, b := range c.BootNodes {
		if b = strings.TrimSpace(b); b != "" {
			cleaned = append(cleaned, b)
		}
	}
	c.BootNodes = cleaned
	return nil
}
