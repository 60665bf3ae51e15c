package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenzro/train/dataset"
)

// TestDatasetFlags: the dataset limits come from flags or the config file.
func TestDatasetFlags(t *testing.T) {
	cfg, code, msg := captured(t)
	if code != 0 || cfg.DatasetDIDCount != dataset.DefaultQuotaCount || cfg.DatasetDIDBytes != dataset.DefaultQuotaBytes {
		t.Fatalf("defaults: %d %s %+v", code, msg, cfg)
	}
	cfg, code, msg = captured(t, "--dataset-max-bytes", "1048576", "--dataset-stall-timeout", "3s", "--ipfs-dht", "--dataset-did-count", "3", "--dataset-did-bytes", "4096")
	if code != 0 {
		t.Fatal(msg)
	}
	if cfg.DatasetMaxBytes != 1<<20 || cfg.DatasetStall != 3*time.Second || !cfg.IPFSDHT || cfg.DatasetDIDCount != 3 || cfg.DatasetDIDBytes != 4096 {
		t.Fatalf("flags: %+v", cfg)
	}
	p := filepath.Join(t.TempDir(), "node.yaml")
	_ = os.WriteFile(p, []byte("dataset-max-bytes: 2048\ndataset-stall-timeout: 90s\ndataset-did-count: 5\n"), 0o644)
	cfg, code, msg = captured(t, "--config", p)
	if code != 0 {
		t.Fatal(msg)
	}
	if cfg.DatasetMaxBytes != 2048 || cfg.DatasetStall != 90*time.Second || cfg.IPFSDHT || cfg.DatasetDIDCount != 5 {
		t.Fatalf("config file: %+v", cfg)
	}
	for _, bad := range [][]string{{"--dataset-stall-timeout", "soon"}, {"--dataset-stall-timeout", "-1s"}, {"--dataset-max-bytes", "-5"},
		{"--dataset-did-count", "0"}, {"--dataset-did-bytes", "-1"}} {
		if _, code, _ := captured(t, bad...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", bad, code)
		}
	}
}
