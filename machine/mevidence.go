package machine

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/tenzro/train/wire"
)

// EvidenceVerifier verifies an attestation envelope for the machine: it
// must pass the run's policy for tier, bind reportData and be valid at the
// time given (the block's time), using only collateral the envelope itself
// carries (no network, no node-local cache, no wall clock), and it returns
// the evidence digest. The rules live in one place, attest.Checker; the
// chain wires attest.ConsensusVerifier in (the machine cannot import attest,
// which imports it). An error is a refusal of the evidence.
type EvidenceVerifier interface {
	VerifyEvidence(ctx context.Context, tier string, policy, envelope []byte, at time.Time, reportData wire.Hash) (wire.Hash, error)
}

// evidenceUsedKey marks a report data accepted on chain (KSEvidence
// "attrd/<task>/<hex>"): evidence binds a single-use round nonce, so the
// same report data is refused the second time (check binding.replay).
func evidenceUsedKey(task string, rd wire.Hash) []byte {
	return []byte("attrd/" + task + "/" + hex.EncodeToString(rd[:]))
}

// verifyEvidence is the consensus check of a Verified/Confidential
// enrolment (payload zero, shard 0, the run's initial model) or submission
// (its payload, the trainer's first shard, the round's model): the claim
// travels inline in the transaction, its nonce must be the round's
// (AttestNonce), the envelope must verify at the block's time under the
// run's policy and bind AttestReportData, its digest must be the one the
// transaction names, and its report data must not have been used on chain
// before. Only then is the digest counted in the receipt's attestations.
func (x *mtx) verifyEvidence(r *Run, e *wire.EvidenceRef, trainer string, shard uint64, model, payload wire.Hash) error {
	if err := r.checkEvidenceRef(e); err != nil || e == nil {
		return err
	}
	if len(e.Claim) == 0 {
		return Errf(KindAttestation, "evidence: the transaction names evidence %s but does not carry its claim (evidence.claim): validators verify evidence bytes, not references", e.Hash)
	}
	if len(e.Claim) > wire.MaxClaimBytes {
		return Errf(KindInvalid, "evidence: claim is %d bytes, limit %d", len(e.Claim), wire.MaxClaimBytes)
	}
	if uint64(len(e.Claim)) != e.Size || wire.ContentHash(e.Claim) != e.Hash {
		return Errf(KindInvalid, "evidence: hash %s and size %d do not match the claim carried (%d bytes, hash %s)", e.Hash, e.Size, len(e.Claim), wire.ContentHash(e.Claim))
	}
	var claim wire.AttestationClaim
	dec := json.NewDecoder(bytes.NewReader(e.Claim))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&claim); err != nil {
		return Errf(KindInvalid, "evidence: claim: %v", err)
	}
	if dec.More() {
		return Errf(KindInvalid, "evidence: claim: trailing data")
	}
	task := r.spec.TaskID
	if want := AttestNonce(task, trainer, r.Round, r.RoundAnchor); !bytes.Equal(claim.Nonce, want) {
		return Errf(KindAttestation, "attestation refused: check binding.nonce failed: the claim's nonce is not round %d's for %s", r.Round, trainer)
	}
	if x.m.evidence == nil {
		return Errf(KindAttestation, "attestation refused: this machine has no evidence verifier")
	}
	rd := wire.AttestReportData(claim.ProgramHash, shard, model, trainer, claim.Nonce, payload)
	at := time.UnixMilli(x.blk.TimeMs).UTC()
	dg, err := x.m.evidence.VerifyEvidence(x.ctx, r.spec.Tier, r.spec.AttestationPolicy, claim.Envelope, at, rd)
	if err != nil {
		if x.ctx.Err() != nil {
			return x.ctx.Err()
		}
		if KindOf(err) == KindAttestation {
			return err
		}
		return Errf(KindAttestation, "attestation refused at block time %s: %v", at.Format(time.RFC3339), err)
	}
	if dg != e.Digest {
		return Errf(KindAttestation, "attestation refused: the evidence's digest is %s, the transaction says %s", dg, e.Digest)
	}
	key := evidenceUsedKey(task, rd)
	if _, err := x.kv.Get(x.ctx, KSEvidence, key); err == nil {
		return Errf(KindAttestation, "attestation refused: check binding.replay failed: report data %s was already used on chain (replayed evidence)", rd)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	x.set(KSEvidence, key, []byte{1})
	return nil
}
