//go:build !production

package enclave

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

func simPolicy(allowSim bool) []byte {
	m := hex.EncodeToString(SimulatedMeasurement)
	s := `{"version":1,"allow_simulated":` + map[bool]string{true: "true", false: "false"}[allowSim] +
		`,"snp":{"measurement":["` + m + `"],"smt_allowed":true,"vmpl":0},"nitro":{"pcr0":["` + m + `"],"max_age":"5m"}}`
	return []byte(s)
}

func TestVerifiedTierEndToEnd(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, vendor := range []string{"snp", "nitro"} {
		t.Run(vendor, func(t *testing.T) {
			prov, err := NewSimulated(vendor, t.TempDir(), clock)
			if err != nil {
				t.Fatal(err)
			}
			checker := attest.NewChecker(attest.Options{Clock: clock})
			nonces := attest.NewNonceStore(nil, time.Minute, clock)
			trainer, _ := did.Generate(did.KindMachine, nil)
			prog, model := wire.SumBytes([]byte("prog")), wire.SumBytes([]byte("model"))
			nonce, _ := nonces.Issue(ctx, "round-1")
			rd := attest.ReportData(prog, 3, model, trainer.DID.String(), nonce)
			ev, err := prov.Evidence(ctx, rd)
			if err != nil {
				t.Fatal(err)
			}
			if err := nonces.Consume(ctx, "round-1", nonce); err != nil {
				t.Fatal(err)
			}
			d, err := checker.CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, rd)
			if err != nil {
				t.Fatalf("accept: %v", err)
			}
			if d.IsZero() {
				t.Fatal("zero digest")
			}
			// Replay: same evidence, same binding.
			if _, err := checker.CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, rd); err == nil || syncer.KindOf(err) != syncer.KindAttestation {
				t.Fatalf("replay accepted: %v", err)
			}
			if err := nonces.Consume(ctx, "round-1", nonce); err == nil {
				t.Fatal("replayed nonce consumed twice")
			}
			// Wrong binding (other shard).
			other := attest.ReportData(prog, 4, model, trainer.DID.String(), nonce)
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, other); err == nil {
				t.Fatal("wrong binding accepted")
			}
			// Production policy (no allow_simulated).
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(false), ev, rd); err == nil {
				t.Fatal("simulated evidence accepted without allow_simulated")
			} else {
				t.Logf("production policy: %v", err)
			}
			// Key custody: sealed, reloaded, evidence binds the key.
			path := filepath.Join(t.TempDir(), "syncer.sealed")
			kc, err := NewKeyCustody(ctx, prov, path)
			if err != nil {
				t.Fatal(err)
			}
			kc2, err := NewKeyCustody(ctx, prov, path)
			if err != nil || kc2.DID() != kc.DID() {
				t.Fatalf("reload: %v", err)
			}
			sig, _ := kc.Sign(ctx, []byte("m"))
			if !ed25519.Verify(kc.PublicKey(), []byte("m"), sig) {
				t.Fatal("signature")
			}
			krd := attest.KeyReportData(PurposeSyncerKey, kc.PublicKey(), nil)
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), kc.Evidence(), krd); err != nil {
				t.Fatalf("syncer key evidence: %v", err)
			}
		})
	}
}

func TestConfidentialTier(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	prov, _ := NewSimulated("snp", t.TempDir(), clock)
	b := NewBroker(attest.NewChecker(attest.Options{Clock: clock}), attest.NewNonceStore(nil, time.Minute, clock))
	key, err := b.NewDatasetKey("task", wire.TierConfidential, simPolicy(true))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("secret timeseries")
	ct, _ := EncryptDataset(key, "task", data)
	priv, _ := ecdh.X25519().GenerateKey(rand.Reader)
	request := func(policyOK bool) (*WrappedKey, error) {
		n, _ := b.Nonce(ctx, "task")
		rd := attest.KeyReportData(PurposeDatasetKey, priv.PublicKey().Bytes(), n)
		if !policyOK {
			rd = wire.SumBytes([]byte("unbound"))
		}
		ev, _ := prov.Evidence(ctx, rd)
		return b.Release(ctx, &KeyRequest{TaskID: "task", Evidence: ev, RecipientKey: priv.PublicKey().Bytes(), Nonce: n})
	}
	if _, err := request(false); err == nil {
		t.Fatal("key released to evidence not bound to the recipient key")
	} else {
		t.Logf("refused: %v", err)
	}
	w, err := request(true)
	if err != nil {
		t.Fatal(err)
	}
	k, err := Unwrap(priv, "task", w)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := DecryptDataset(k, "task", ct)
	if err != nil || string(pt) != string(data) {
		t.Fatalf("decrypt: %v", err)
	}
}
