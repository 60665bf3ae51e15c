package chain

import (
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Transaction builders for clients: each signs the method's preimage with
// key (PROTOCOL §3/§4) and returns the encoded transaction.

// TransferTx sends amount attoTNZO from key's DID to to.
func TransferTx(key *did.Key, to, amount string, nonce uint64) ([]byte, error) {
	p := wire.TransferParams{From: key.DID.String(), To: to, Amount: amount, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return EncodeTx(TxTransfer, p)
}

// RegisterSyncerTx locks stake as a syncer candidate.
func RegisterSyncerTx(key *did.Key, stake string, nonce uint64) ([]byte, error) {
	p := wire.RegisterSyncerParams{DID: key.DID.String(), Stake: stake, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return EncodeTx(TxRegisterSyncer, p)
}

// PostTaskTx posts spec (signed by its sponsor, key) with the hash of the
// initial weights (zero when none).
func PostTaskTx(key *did.Key, spec []byte, initWeights wire.Hash, nonce uint64) ([]byte, error) {
	s, canon, err := wire.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if s.SponsorDID != key.DID.String() {
		return nil, fmt.Errorf("spec sponsor_did %s is not the signing key's %s", s.SponsorDID, key.DID)
	}
	req := wire.PostTaskParams{Signed: wire.Signed{Nonce: nonce}}
	req.Signature = key.Sign(req.Preimage(s.SponsorDID, wire.SpecHash(canon), initWeights))
	return EncodeTx(TxPostTask, PostTask{Spec: json.RawMessage(canon), InitWeightsHash: initWeights, Signed: req.Signed})
}

// EnrollTx enrols key's DID as a trainer of task with stake.
func EnrollTx(key *did.Key, task, stake string, nonce uint64) ([]byte, error) {
	p := wire.EnrollParams{TaskID: task, TrainerDID: key.DID.String(), Stake: stake, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return EncodeTx(TxEnroll, p)
}

// ElectionProofTx enters key's DID (a registered candidate) into task's
// election with its VRF proof over the run's alpha.
func ElectionProofTx(key *did.Key, task string, proof []byte, nonce uint64) ([]byte, error) {
	p := wire.ElectionProofParams{TaskID: task, DID: key.DID.String(), Proof: proof, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return EncodeTx(TxElectionProof, p)
}

// SubmissionTx is the record of a submission of a payload with the given
// hash and size, signed by the trainer (key).
func SubmissionTx(key *did.Key, task string, round, fragment uint64, payloadHash wire.Hash, size uint64) ([]byte, error) {
	s := Submission{TaskID: task, TrainerDID: key.DID.String(), Round: round, FragmentIndex: fragment, PayloadHash: payloadHash, PayloadSize: size}
	s.Signature = key.Sign(wire.SubmissionPreimage(task, s.TrainerDID, round, fragment, payloadHash))
	return EncodeTx(TxSubmission, s)
}

// SealTx carries a signed receipt.
func SealTx(receipt []byte) ([]byte, error) {
	return EncodeTx(TxSeal, Seal{Receipt: json.RawMessage(receipt)})
}

// CommitRoundTx signs a round commit as the run's syncer (key).
func CommitRoundTx(key *did.Key, c wire.RoundCommit, nonce uint64) ([]byte, error) {
	p := CommitRound{TaskID: c.TaskID, SyncerDID: key.DID.String(), Commit: c, Signed: wire.Signed{Nonce: nonce}}
	h, err := syncer.RoundCommitHash(&c)
	if err != nil {
		return nil, err
	}
	p.Signature = key.Sign(p.Preimage(h))
	return EncodeTx(TxCommitRound, p)
}

// LeaveTx withdraws key's DID from task (its stake is refunded at once).
func LeaveTx(key *did.Key, task string, nonce uint64) ([]byte, error) {
	p := wire.LeaveParams{TaskID: task, TrainerDID: key.DID.String(), Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return EncodeTx(TxLeave, p)
}
