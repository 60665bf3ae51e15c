package main

// trust.go wires the trust tiers: where the syncer's signing key lives
// (an enclave when one is found or asked for), the attestation checker, the
// single-use round nonces, the Confidential tier's key broker, and the
// tenzro_attest_* RPC methods.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// trust holds what the node needs for Verified and Confidential runs.
type trust struct {
	signer  syncer.Signer
	checker *attest.Checker
	nonces  *attest.NonceStore
	broker  *enclave.Broker
	service *attestRPC
}

// setupTrust chooses the syncer key's home per --enclave:
//   - auto: a TEE found on this machine (key generated and sealed inside),
//     else the node key file, with a warning;
//   - none: the node key file;
//   - simulated-snp|simulated-tdx|simulated-nitro: a labelled simulated
//     enclave (non-production builds only; for development and tests).
func setupTrust(ctx context.Context, cfg Config, key *did.Key, kv machine.KV, log *slog.Logger) (*trust, error) {
	t := &trust{}
	t.checker = attest.NewChecker(attest.Options{CollateralDir: cfg.TDXCollateral, Logger: log.With("component", "attest"), Replay: perRound{}})
	t.nonces = attest.NewNonceStore(nil, 10*time.Minute, nil)
	t.service = &attestRPC{svc: attest.NewService(t.nonces, attest.KVEvidence{KV: kv}, nil)}
	sealed := filepath.Join(cfg.DataDir, "syncer-key.sealed")
	var prov enclave.Provider
	switch cfg.Enclave {
	case "none":
	case "auto":
		p, err := enclave.Detect(ctx)
		if errors.Is(err, enclave.ErrNoTEE) {
			log.Warn("no TEE on this machine: the syncer key is the node key file, not enclave-protected (Verified/Confidential sponsors may refuse this syncer)", "key_file", cfg.NodeKey)
			break
		}
		if err != nil {
			return nil, fmt.Errorf("enclave detection: %w", err)
		}
		prov = p
	default:
		p, err := simulatedProvider(cfg.Enclave, filepath.Join(cfg.DataDir, "simulated-enclave"))
		if err != nil {
			return nil, err
		}
		log.Warn("SIMULATED enclave: evidence is signed by test roots and accepted only by policies with allow_simulated", "vendor", p.Vendor())
		prov = p
	}
	if prov == nil {
		t.signer = syncer.KeySigner{Key: key}
		return t, nil
	}
	// The last syncer DID is remembered so that an ephemeral key (TEEs without
	// local sealing) changing at a restart is logged as such.
	didFile := filepath.Join(cfg.DataDir, "syncer.did")
	prev, _ := os.ReadFile(didFile)
	kc, err := enclave.NewKeyCustodyWith(ctx, prov, sealed, enclave.CustodyOptions{Logger: log.With("component", "enclave"), PreviousDID: strings.TrimSpace(string(prev))})
	if err != nil {
		return nil, fmt.Errorf("syncer key in the %s enclave: %w (run with --enclave none to use the node key file)", prov.Vendor(), err)
	}
	if err := os.WriteFile(didFile, []byte(kc.DID()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("record syncer DID: %w", err)
	}
	where := "sealed to the enclave at " + sealed
	if !kc.Sealed() {
		where = "ephemeral: in enclave memory only, a new key at each start"
	}
	log.Info("syncer key held in enclave", "vendor", prov.Vendor(), "simulated", prov.Simulated(), "did", kc.DID(), "custody", where)
	t.signer = kc
	// The Confidential tier's key broker runs only in an enclave: its records
	// are sealed under the enclave's sealing key.
	sk, err := prov.SealingKey(ctx, "tenzro/train/key-broker/v1")
	if err != nil {
		log.Warn("no sealing key for the key broker: Confidential runs are refused on this node", "err", err)
		return t, nil
	}
	t.broker, err = enclave.NewBroker(t.checker, attest.NewNonceStore(nil, 10*time.Minute, nil), sk,
		func(ctx context.Context, task string) ([]byte, error) { return syncer.DatasetKeyRecord(ctx, kv, task) })
	if err != nil {
		return nil, err
	}
	t.service.broker = t.broker
	return t, nil
}

// perRound is the attestation checker's replay guard on a chain node:
// evidence binds the round's deterministic nonce (PROTOCOL §8), so one
// trainer's evidence is checked again for each fragment of the round and by
// the syncer that aggregates it; its freshness is the round, which the
// nonce already enforces.
type perRound struct{}

func (perRound) MarkUsed(context.Context, wire.Hash) (bool, error) { return true, nil }

// attestRPC adapts attest.Service and the key broker to rpc.AttestService.
type attestRPC struct {
	svc    *attest.Service
	broker *enclave.Broker
}

func decodeStrict(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return machine.Errf(machine.KindInvalid, "params are required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return machine.Errf(machine.KindInvalid, "params: %v", err)
	}
	return nil
}

func (a *attestRPC) SubmitEvidence(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p wire.SubmitEvidenceParams
	if err := decodeStrict(raw, &p); err != nil {
		return nil, err
	}
	dg, err := a.svc.SubmitEvidence(ctx, p.TaskID, p.DID, p.Envelope)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wire.SubmitEvidenceResult{Digest: dg})
}

func (a *attestRPC) GetEvidence(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p wire.GetEvidenceParams
	if err := decodeStrict(raw, &p); err != nil {
		return nil, err
	}
	ev, err := a.svc.GetEvidence(ctx, p.Digest)
	if err != nil {
		return nil, err
	}
	return json.Marshal(wire.GetEvidenceResult{Envelope: ev})
}

func (a *attestRPC) GetPolicy(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	var p wire.GetPolicyParams
	if err := decodeStrict(raw, &p); err != nil {
		return nil, err
	}
	return a.svc.Policy(ctx, p.Tier, p.Vendor)
}

// ReleaseKey is two-step: without evidence it issues the broker nonce the
// evidence must bind; with evidence it returns the wrapped dataset key.
func (a *attestRPC) ReleaseKey(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	if a.broker == nil {
		return nil, machine.Errf(machine.KindDisabled, "this node runs no key broker (it needs an enclave: --enclave)")
	}
	var p enclave.KeyRequest
	if err := decodeStrict(raw, &p); err != nil {
		return nil, err
	}
	if len(p.Evidence) == 0 {
		n, err := a.broker.Nonce(ctx, p.TaskID)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string][]byte{"nonce": n})
	}
	w, err := a.broker.Release(ctx, &p)
	if err != nil {
		return nil, err
	}
	return json.Marshal(w)
}

// datasetKeys is the broker as the syncer's seam, or nil without one (a nil
// *Broker inside a non-nil interface would look configured).
func (t *trust) datasetKeys() syncer.DatasetKeys {
	if t.broker == nil {
		return nil
	}
	return t.broker
}
