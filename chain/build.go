package chain

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/plugins/builtin"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Transaction builders for clients and tests: each signs the method's
// preimage with key (PROTOCOL §3/§4) and returns the encoded transaction.

// TransferTx sends amount attoTNZO from key's DID to to.
func TransferTx(key *did.Key, to, amount string, nonce uint64) ([]byte, error) {
	p := wire.TransferParams{From: key.DID.String(), To: to, Amount: amount, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxTransfer, p)
}

// FaucetTx mints amount to d (a chain whose genesis has the faucet).
func FaucetTx(d, amount string, salt uint64) ([]byte, error) {
	return wire.EncodeTx(wire.TxFaucet, wire.FaucetTx{DID: d, Amount: amount, Salt: salt})
}

// RegisterSyncerTx locks stake as a syncer candidate.
func RegisterSyncerTx(key *did.Key, stake string, nonce uint64) ([]byte, error) {
	p := wire.RegisterSyncerParams{DID: key.DID.String(), Stake: stake, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxRegisterCandidate, p)
}

// UnbondTx withdraws key's candidacy and stake.
func UnbondTx(key *did.Key, nonce uint64) ([]byte, error) {
	p := wire.UnbondParams{DID: key.DID.String(), Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxUnbond, p)
}

// PublishPluginTx records the publication of a module with the given
// SHA-256 and size.
func PublishPluginTx(key *did.Key, hash wire.Hash, size uint64, nonce uint64) ([]byte, error) {
	p := wire.PublishPluginTx{DID: key.DID.String(), Hash: hash, Size: size, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxPublishPlugin, p)
}

// Rules are a posting's resolved rule references.
type Rules struct {
	Rule      wire.RuleRef
	Verifiers []wire.RuleRef
	Outer     wire.RuleRef
	Codec     *wire.RuleRef
}

// BuiltinRef is the built-in Wasm module with the given rule name (its
// hash and no parameters).
func BuiltinRef(name string) (wire.RuleRef, error) {
	for _, stem := range builtin.Names() {
		mod, err := builtin.Module(stem)
		if err != nil {
			return wire.RuleRef{}, err
		}
		raw, ok, err := abi.FindCustomSection(mod, abi.ManifestSection)
		if err != nil || !ok {
			continue
		}
		m, err := abi.ParseManifest(raw)
		if err != nil || m.ID != name {
			continue
		}
		return wire.RuleRef{Name: name, Hash: sha256.Sum256(mod), Params: json.RawMessage(`{}`), RoundLevel: m.RoundLevel}, nil
	}
	return wire.RuleRef{}, fmt.Errorf("no built-in rule %q", name)
}

// MeanRules are the references of a plain run: Mean, the Finite verifier
// and the Nesterov outer step, all built-in modules without parameters.
func MeanRules() (Rules, error) {
	var r Rules
	var err error
	if r.Rule, err = BuiltinRef("Mean"); err != nil {
		return r, err
	}
	fin, err := BuiltinRef(machine.FiniteVerifier)
	if err != nil {
		return r, err
	}
	r.Verifiers = []wire.RuleRef{fin}
	r.Outer, err = BuiltinRef("Nesterov")
	return r, err
}

// PostTaskTx posts spec (signed by its sponsor, key) with the initial
// weights' layout (nil when none) and the resolved rules.
func PostTaskTx(key *did.Key, spec []byte, init *wire.InitLayout, rules Rules, nonce uint64) ([]byte, error) {
	s, canon, err := wire.ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if s.SponsorDID != key.DID.String() {
		return nil, fmt.Errorf("spec sponsor_did %s is not the signing key's %s", s.SponsorDID, key.DID)
	}
	p := wire.PostTaskTx{Spec: json.RawMessage(canon), Init: init, Rule: rules.Rule, Verifiers: rules.Verifiers, Outer: rules.Outer,
		Codec: rules.Codec, Signed: wire.Signed{Nonce: nonce}}
	if p.Verifiers == nil {
		p.Verifiers = []wire.RuleRef{}
	}
	if init != nil {
		p.InitWeightsHash = init.File
	}
	req := wire.PostTaskParams{Signed: p.Signed}
	p.Signature = key.Sign(req.Preimage(s.SponsorDID, wire.SpecHash(canon), p.InitWeightsHash))
	return wire.EncodeTx(wire.TxPostTask, p)
}

// SetInitWeightsTx supplies a run's initial weights (their layout and file hash).
func SetInitWeightsTx(key *did.Key, task string, init wire.InitLayout, nonce uint64) ([]byte, error) {
	p := wire.SetInitWeightsTx{TaskID: task, Init: init, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage(key.DID.String()))
	return wire.EncodeTx(wire.TxSetInitWeights, p)
}

// CancelRunTx cancels key's unstarted run.
func CancelRunTx(key *did.Key, task string, nonce uint64) ([]byte, error) {
	p := wire.CancelRunParams{TaskID: task, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage(key.DID.String()))
	return wire.EncodeTx(wire.TxCancelRun, p)
}

// EnrollTx enrols key's DID as a trainer of task with stake.
func EnrollTx(key *did.Key, task, stake string, nonce uint64) ([]byte, error) {
	p := wire.EnrollTx{TaskID: task, TrainerDID: key.DID.String(), Stake: stake, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxEnroll, p)
}

// ElectionProofTx enters key's DID (a registered candidate) into task's
// election with its VRF proof over the run's alpha.
func ElectionProofTx(key *did.Key, task string, proof []byte, nonce uint64) ([]byte, error) {
	p := wire.ElectionProofParams{TaskID: task, DID: key.DID.String(), Proof: proof, Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxElectionProof, p)
}

// SubmissionTx is the record of a submission of a payload with the given
// hash and size, signed by the trainer (key).
func SubmissionTx(key *did.Key, task string, round, fragment uint64, payloadHash wire.Hash, size uint64) ([]byte, error) {
	s := wire.SubmissionTx{TaskID: task, TrainerDID: key.DID.String(), Round: round, FragmentIndex: fragment, PayloadHash: payloadHash, PayloadSize: size}
	s.Signature = key.Sign(s.Preimage())
	return wire.EncodeTx(wire.TxSubmission, s)
}

// LeaveTx withdraws key's DID from task (its stake is refunded at once).
func LeaveTx(key *did.Key, task string, nonce uint64) ([]byte, error) {
	p := wire.LeaveParams{TaskID: task, TrainerDID: key.DID.String(), Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxLeave, p)
}

// CommitFragmentTx signs p (its syncer is key's DID) and encodes it.
func CommitFragmentTx(key *did.Key, p wire.CommitFragmentTx) ([]byte, error) {
	p.SyncerDID = key.DID.String()
	if p.Verdicts == nil {
		p.Verdicts = []wire.Verdict{}
	}
	canon, err := machine.CommitJCS(&p.Commit)
	if err != nil {
		return nil, err
	}
	p.Signature = key.Sign(p.Preimage(canon))
	return wire.EncodeTx(wire.TxCommitFragment, p)
}

// SignReceiptTx signs rc (built by syncer.BuildReceipt for key's DID with
// engine) and encodes the signature transaction.
func SignReceiptTx(key *did.Key, rc *wire.Receipt, evidenceDigest *wire.Hash) ([]byte, error) {
	pre, err := audit.ReceiptPreimage(rc)
	if err != nil {
		return nil, err
	}
	p := wire.SignReceiptTx{TaskID: rc.TaskID, SyncerDID: key.DID.String(), Engine: rc.Engine, EvidenceDigest: evidenceDigest, Signature: key.Sign(pre)}
	return wire.EncodeTx(wire.TxSignReceipt, p)
}

// ChallengeTx disputes the commit of (task, round, fragment), claiming
// result is its FragmentResultHash (zero: its inputs are unavailable), with
// bond (the run's challenge_bond), signed by the challenger (key).
func ChallengeTx(key *did.Key, task string, round, fragment uint64, result wire.Hash, bond string, nonce uint64) ([]byte, error) {
	p := wire.ChallengeTx{TaskID: task, Round: round, Fragment: fragment, ChallengerDID: key.DID.String(), ResultHash: result, Bond: bond,
		Signed: wire.Signed{Nonce: nonce}}
	p.Signature = key.Sign(p.Preimage())
	return wire.EncodeTx(wire.TxChallenge, p)
}

// VoteSigner signs challenge votes with a validator's consensus key.
type VoteSigner interface {
	// Address is the validator's 20-byte consensus address.
	Address() []byte
	Sign(msg []byte) ([]byte, error)
}

// ChallengeVoteTx is validator v's vote on challenge id: result (the
// FragmentResultHash its node computed) or, with unavailable, that its node
// could not fetch the commit's inputs.
func ChallengeVoteTx(v VoteSigner, id, result wire.Hash, unavailable bool) ([]byte, error) {
	p := wire.ChallengeVoteTx{Challenge: id, ResultHash: result, Unavailable: unavailable, Validator: append(wire.HexBytes{}, v.Address()...)}
	if unavailable {
		p.ResultHash = wire.Hash{}
	}
	sig, err := v.Sign(p.Preimage())
	if err != nil {
		return nil, err
	}
	p.Signature = sig
	return wire.EncodeTx(wire.TxChallengeVote, p)
}
