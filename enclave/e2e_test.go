//go:build !production

package enclave

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

func simPolicy(allowSim bool) []byte {
	m := hex.EncodeToString(SimulatedMeasurement)
	s := `{"version":1,"allow_simulated":` + map[bool]string{true: "true", false: "false"}[allowSim] +
		`,"snp":{"measurement":["` + m + `"],"smt_allowed":true,"vmpl":0},"nitro":{"pcr0":["` + m + `"],"max_age":"5m"}` +
		`,"tdx":{"mrtd":["` + m + `"],"rtmr0":["` + hex.EncodeToString(SimulatedRTMR(0)) + `"],"mrseam":["` + hex.EncodeToString(SimulatedMRSEAM()) + `"],"tcb_status":["UpToDate"]}}`
	return []byte(s)
}

func TestVerifiedTierEndToEnd(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, vendor := range []string{"tdx", "snp", "nitro"} {
		t.Run(vendor, func(t *testing.T) {
			prov, err := NewSimulated(vendor, t.TempDir(), clock)
			if err != nil {
				t.Fatal(err)
			}
			checker := attest.NewChecker(attest.Options{Clock: clock})
			nonces := attest.NewNonceStore(nil, time.Minute, clock)
			trainer, _ := did.Generate(did.KindMachine, nil)
			prog, model := wire.SHA256([]byte("prog")), wire.ContentHash([]byte("model"))
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
			if _, err := checker.CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, rd); err == nil || machine.KindOf(err) != machine.KindAttestation {
				t.Fatalf("replay accepted: %v", err)
			}
			if err := nonces.Consume(ctx, "round-1", nonce); err == nil {
				t.Fatal("replayed nonce consumed twice")
			}
			// Wrong binding (other shard).
			other := attest.ReportData(prog, 4, model, trainer.DID.String(), nonce)
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(true), ev, other); err == nil ||
				!strings.Contains(err.Error(), "check binding.report_data failed") {
				t.Fatalf("wrong binding: %v", err)
			}
			// Production policy (no allow_simulated).
			if _, err := attest.NewChecker(attest.Options{Clock: clock}).CheckEvidence(ctx, wire.TierVerified, simPolicy(false), ev, rd); err == nil ||
				!strings.Contains(err.Error(), "check "+vendor+".simulated failed") {
				t.Fatalf("simulated evidence without allow_simulated: %v", err)
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
	for _, vendor := range []string{"tdx", "snp", "nitro"} {
		t.Run(vendor, func(t *testing.T) {
			prov, err := NewSimulated(vendor, t.TempDir(), clock)
			if err != nil {
				t.Fatal(err)
			}
			sk, err := prov.SealingKey(ctx, "broker")
			if err != nil {
				t.Fatal(err)
			}
			recs := &memRecords{m: map[string][]byte{}}
			b, err := NewBroker(attest.NewChecker(attest.Options{Clock: clock}), attest.NewNonceStore(nil, time.Minute, clock), sk, recs.get)
			if err != nil {
				t.Fatal(err)
			}
			key, sealed, err := b.NewDatasetKey("task", wire.TierConfidential, simPolicy(true), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Release(ctx, &KeyRequest{TaskID: "task"}); machine.KindOf(err) != machine.KindNotFound {
				t.Fatalf("release before the record is stored: %v", err)
			}
			recs.m["task"] = sealed
			data := []byte("secret timeseries")
			ct, _ := EncryptDataset(key, "task", data)
			priv, _ := ecdh.X25519().GenerateKey(rand.Reader)
			request := func(bound bool) (*WrappedKey, error) {
				n, _ := b.Nonce(ctx, "task")
				rd := attest.KeyReportData(PurposeDatasetKey, priv.PublicKey().Bytes(), n)
				if !bound {
					rd = wire.SHA256([]byte("unbound"))
				}
				ev, err := prov.Evidence(ctx, rd)
				if err != nil {
					t.Fatal(err)
				}
				return b.Release(ctx, &KeyRequest{TaskID: "task", Evidence: ev, RecipientKey: priv.PublicKey().Bytes(), Nonce: n})
			}
			if _, err := request(false); attest.FailedCheck(err) != "binding.report_data" && !strings.Contains(err.Error(), "binding.report_data") {
				t.Fatalf("key released to evidence not bound to the recipient key: %v", err)
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
			// A broker whose policy does not allow simulated evidence
			// releases nothing to the same enclave.
			strictRecs := &memRecords{m: map[string][]byte{}}
			strict, _ := NewBroker(attest.NewChecker(attest.Options{Clock: clock}), attest.NewNonceStore(nil, time.Minute, clock), sk, strictRecs.get)
			_, strictSealed, err := strict.NewDatasetKey("task", wire.TierConfidential, simPolicy(false), nil)
			if err != nil {
				t.Fatal(err)
			}
			strictRecs.m["task"] = strictSealed
			// A record sealed under another enclave's key does not open.
			other, _ := NewBroker(attest.NewChecker(attest.Options{Clock: clock}), attest.NewNonceStore(nil, time.Minute, clock), make([]byte, 32), strictRecs.get)
			if _, err := other.Release(ctx, &KeyRequest{TaskID: "task"}); err == nil || !strings.Contains(err.Error(), "does not open") {
				t.Fatalf("record opened under a foreign sealing key: %v", err)
			}
			n, _ := strict.Nonce(ctx, "task")
			ev, _ := prov.Evidence(ctx, attest.KeyReportData(PurposeDatasetKey, priv.PublicKey().Bytes(), n))
			if _, err := strict.Release(ctx, &KeyRequest{TaskID: "task", Evidence: ev, RecipientKey: priv.PublicKey().Bytes(), Nonce: n}); err == nil ||
				!strings.Contains(err.Error(), vendor+".simulated") {
				t.Fatalf("strict broker: %v", err)
			}
		})
	}
}

// memRecords stands in for the node's store of sealed key records.
type memRecords struct{ m map[string][]byte }

func (r *memRecords) get(_ context.Context, task string) ([]byte, error) {
	if v, ok := r.m[task]; ok {
		return v, nil
	}
	return nil, machine.ErrNotFound
}
