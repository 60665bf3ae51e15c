//go:build !production

package enclave

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
)

func TestKeyCustodyEphemeral(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, vendor := range []string{"tdx", "nitro", "snp"} {
		t.Run(vendor, func(t *testing.T) {
			provDir, dataDir := t.TempDir(), t.TempDir()
			prov, err := NewSimulatedWith(vendor, provDir, clock, SimulatedOptions{NoSealing: true})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			path := filepath.Join(dataDir, "syncer.sealed")
			kc, err := NewKeyCustodyWith(ctx, prov, path, CustodyOptions{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			if kc.Sealed() {
				t.Fatal("custody without a sealing key says sealed")
			}
			// Signs and proves with the key its DID names.
			sig, err := kc.Sign(ctx, []byte("receipt"))
			if err != nil || !ed25519.Verify(kc.PublicKey(), []byte("receipt"), sig) {
				t.Fatalf("signature: %v", err)
			}
			proof, err := kc.Prove(ctx, []byte("alpha"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := vrf.Verify(kc.PublicKey(), proof, []byte("alpha")); err != nil {
				t.Fatalf("vrf proof: %v", err)
			}
			// Its evidence binds the public key.
			krd := attest.KeyReportData(PurposeSyncerKey, kc.PublicKey(), nil)
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), kc.Evidence(), krd); err != nil {
				t.Fatalf("syncer key evidence: %v", err)
			}
			// Nothing was written: no sealed key, no sealing-key file.
			for _, dir := range []string{provDir, dataDir} {
				if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
					t.Fatalf("%s holds %v (%v)", dir, ents, err)
				}
			}
			if !strings.Contains(logs.String(), "ephemeral syncer key") {
				t.Fatalf("mode not logged: %s", logs.String())
			}
			// A restart births another key, and the node is told its DID changed.
			logs.Reset()
			kc2, err := NewKeyCustodyWith(ctx, prov, path, CustodyOptions{Logger: log, PreviousDID: kc.DID()})
			if err != nil {
				t.Fatal(err)
			}
			if kc2.DID() == kc.DID() || bytes.Equal(kc2.PublicKey(), kc.PublicKey()) {
				t.Fatal("second ephemeral custody has the same key")
			}
			if !strings.Contains(logs.String(), "syncer DID changed") || !strings.Contains(logs.String(), kc.DID()) {
				t.Fatalf("DID change not logged: %s", logs.String())
			}
			// The first key's evidence does not vouch for the second key.
			krd2 := attest.KeyReportData(PurposeSyncerKey, kc2.PublicKey(), nil)
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), kc.Evidence(), krd2); !refusedAs(err, "binding.report_data") {
				t.Fatalf("old evidence for the new key: %v", err)
			}
		})
	}
}

func TestKeyCustodyModes(t *testing.T) {
	ctx := context.Background()
	t.Run("sealed", func(t *testing.T) {
		prov, err := NewSimulated("tdx", t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "syncer.sealed")
		kc, err := NewKeyCustody(ctx, prov, path)
		if err != nil {
			t.Fatal(err)
		}
		blob, err := os.ReadFile(path)
		if err != nil || !kc.Sealed() {
			t.Fatalf("sealed custody: sealed=%v, %v", kc.Sealed(), err)
		}
		if bytes.Contains(blob, kc.priv.Seed()) {
			t.Fatal("seed written in clear")
		}
	})
	t.Run("an existing sealed key is left untouched", func(t *testing.T) {
		prov, _ := NewSimulatedWith("nitro", t.TempDir(), nil, SimulatedOptions{NoSealing: true})
		path := filepath.Join(t.TempDir(), "syncer.sealed")
		if err := os.WriteFile(path, []byte("sealed elsewhere"), 0o600); err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		kc, err := NewKeyCustodyWith(ctx, prov, path, CustodyOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil || kc.Sealed() {
			t.Fatalf("ephemeral custody: %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "sealed elsewhere" || !strings.Contains(logs.String(), "left untouched") {
			t.Fatalf("sealed file %q, logs %s", b, logs.String())
		}
	})
	t.Run("other sealing failures are errors", func(t *testing.T) {
		sim, _ := NewSimulated("snp", t.TempDir(), nil)
		prov := failingSeal{Provider: sim, err: errors.New("MSG_KEY_REQ: firmware busy")}
		path := filepath.Join(t.TempDir(), "syncer.sealed")
		if _, err := NewKeyCustody(ctx, prov, path); err == nil || !strings.Contains(err.Error(), "firmware busy") {
			t.Fatalf("got %v", err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("sealed path touched: %v", err)
		}
	})
}

// failingSeal is a provider whose sealing fails with err.
type failingSeal struct {
	Provider
	err error
}

func (f failingSeal) SealingKey(context.Context, string) ([]byte, error) { return nil, f.err }

// refusedAs reports whether err is the Checker's refusal naming check.
func refusedAs(err error, check string) bool {
	return err != nil && strings.Contains(err.Error(), "check "+check+" failed")
}
