package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Transactions of the replicated state machine (docs/protocol/chain.md §1).
// A transaction is JSON {"type": <type>, "params": {...}}, at most MaxTxBytes,
// decoded strictly. Signed types carry today's request preimages and per-DID
// nonces (PROTOCOL §3), so one key signs once for the JSON-RPC request and
// the transaction it becomes.

// MaxTxBytes bounds one transaction (CometBFT's mempool default is the same
// 1 MiB). A fragment commit with many inputs is the largest transaction.
const MaxTxBytes = 1 << 20

// Transaction types. Most are the JSON-RPC method whose signed request the
// transaction carries; commitFragment and signReceipt exist only as
// transactions (the elected syncer's node sends them).
const (
	TxTransfer          = MethodTransfer
	TxFaucet            = MethodFaucet
	TxRegisterCandidate = MethodRegisterSyncer
	TxUnbond            = MethodUnbondSyncer
	TxPublishPlugin     = MethodPublishPlugin
	TxPostTask          = MethodPostTask
	TxSetInitWeights    = MethodSetInitWeights
	TxCancelRun         = MethodCancelRun
	TxElectionProof     = MethodElectionProof
	TxEnroll            = MethodEnrollTrainer
	TxLeave             = MethodLeaveRun
	TxSubmission        = MethodSubmitGradient
	TxCommitFragment    = "tenzro_training_commitFragment"
	TxSignReceipt       = "tenzro_training_signReceipt"
)

// TxTypes lists every transaction type.
var TxTypes = []string{TxTransfer, TxFaucet, TxRegisterCandidate, TxUnbond, TxPublishPlugin, TxPostTask, TxSetInitWeights,
	TxCancelRun, TxElectionProof, TxEnroll, TxLeave, TxSubmission, TxCommitFragment, TxSignReceipt, TxChallenge, TxChallengeVote}

// Envelope is a transaction on the wire.
type Envelope struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params"`
}

// FaucetTx mints Amount to DID on a chain whose genesis enables the faucet
// (the --dev chain). Unsigned; Salt makes two equal requests two different
// transactions (CometBFT refuses a transaction it has seen).
type FaucetTx struct {
	DID    string `json:"did"`
	Amount string `json:"amount"`
	Salt   uint64 `json:"salt"`
}

// PublishPluginTx is the on-chain record of a plugin publication: the
// module's SHA-256 and size (the bytes stay in the publisher's node), signed
// with tenzro_plugin_publish's preimage. The publication fee is burned.
type PublishPluginTx struct {
	DID  string `json:"did"`
	Hash Hash   `json:"hash"`
	Size uint64 `json:"size"`
	Signed
}

// Preimage is tenzro_plugin_publish's signing preimage over the module hash.
func (p *PublishPluginTx) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodPublishPlugin, p.DID, p.Nonce, func(c *Canon) { c.Hash(p.Hash) })
}

// FragmentLayout is one fragment of a model as the chain keeps it: its
// tensors (in the fragment's order), element type, value count and the hash
// of its weights (the canonical safetensors encoding of the fragment).
type FragmentLayout struct {
	Tensors     []TensorInfo `json:"tensors"`
	Dtype       string       `json:"dtype"`
	N           int64        `json:"n"`
	WeightsHash Hash         `json:"weights_hash"`
}

// InitLayout is what the chain learns of a run's initial weights: the hash
// of the safetensors file the sponsor signed, the model hash and each
// fragment's layout. The receiving node derives it from the file
// (PROTOCOL §5); the bytes stay in its blob store.
type InitLayout struct {
	File      Hash             `json:"file"`
	Model     Hash             `json:"model"`
	Fragments []FragmentLayout `json:"fragments"`
}

// PostTaskTx is a posting: the spec (canonical JSON), the hash of the
// initial weights the sponsor signed (zero when none), their layout when
// given, and the resolved rule references. Signed with postTask's preimage.
type PostTaskTx struct {
	Spec            json.RawMessage `json:"spec"`
	InitWeightsHash Hash            `json:"init_weights_hash"`
	Init            *InitLayout     `json:"init,omitempty"`
	Rule            RuleRef         `json:"rule"`
	Verifiers       []RuleRef       `json:"verifiers"`
	Outer           RuleRef         `json:"outer"`
	Codec           *RuleRef        `json:"codec,omitempty"`
	// Scorer is the resolved evaluator of a spec with scoring (absent
	// otherwise).
	Scorer *RuleRef `json:"scorer,omitempty"`
	Signed
}

// SetInitWeightsTx supplies a posted run's initial weights: the file hash
// (signed with setInitWeights's preimage) and the layout.
type SetInitWeightsTx struct {
	TaskID string     `json:"task_id"`
	Init   InitLayout `json:"init"`
	Signed
}

// Preimage is setInitWeights's signing preimage over the file hash.
func (p *SetInitWeightsTx) Preimage(sponsor string) []byte {
	return RequestPreimage(p.ChainID, MethodSetInitWeights, sponsor, p.Nonce, func(c *Canon) { c.Str(p.TaskID).Hash(p.Init.File) })
}

// EvidenceRef carries attestation evidence in a transaction: the claim's
// bytes inline (an AttestationClaim, at most MaxClaimBytes, paid by the
// per-byte fee) so every validator verifies them at the block's time, their
// content hash and size, and the evidence digest (ClaimEvidenceDigest) the
// validators' verification must return.
type EvidenceRef struct {
	Hash   Hash   `json:"hash"`
	Size   uint64 `json:"size"`
	Digest Hash   `json:"digest"`
	Claim  []byte `json:"claim,omitempty"`
}

// EnrollTx is an enrolment (enrollTrainer's fields without the evidence
// bytes, which become an EvidenceRef).
type EnrollTx struct {
	TaskID     string       `json:"task_id"`
	TrainerDID string       `json:"trainer_did"`
	Stake      string       `json:"stake"`
	Evidence   *EvidenceRef `json:"evidence,omitempty"`
	Signed
}

// Preimage is enrollTrainer's signing preimage.
func (p *EnrollTx) Preimage() []byte {
	var ev Hash
	if p.Evidence != nil {
		ev = p.Evidence.Digest
	}
	return EnrollPreimage(p.ChainID, p.TrainerDID, p.Nonce, p.TaskID, p.Stake, ev)
}

// SubmissionTx is the record of one outer-gradient submission: everything
// of submitOuterGradient but the payload bytes, plus the payload's size, the
// evidence reference (Verified and Confidential tiers) and the receiving
// node's libp2p peer id (a hint of where the bytes are; not signed).
type SubmissionTx struct {
	TaskID        string            `json:"task_id"`
	TrainerDID    string            `json:"trainer_did"`
	Round         uint64            `json:"round"`
	FragmentIndex uint64            `json:"fragment_index"`
	PayloadHash   Hash              `json:"payload_hash"`
	PayloadSize   uint64            `json:"payload_size"`
	ChainID       string            `json:"chain_id"`
	Signature     HexBytes          `json:"signature"`
	Metrics       SubmissionMetrics `json:"metrics,omitempty"`
	Evidence      *EvidenceRef      `json:"evidence,omitempty"`
	Provider      string            `json:"provider,omitempty"`
}

// Preimage is the trainer's submission preimage (PROTOCOL §4).
func (s *SubmissionTx) Preimage() []byte {
	return SubmissionPreimageWithMetrics(s.ChainID, s.TaskID, s.TrainerDID, s.Round, s.FragmentIndex, s.PayloadHash, s.Metrics)
}

// Equivocation verdicts a fragment commit gives on a claim (PROTOCOL §6).
const (
	VerdictEquivocation = "equivocation" // the two payloads decode to different values: slashed
	VerdictDuplicate    = "duplicate"    // the same values in another encoding: nothing
	VerdictUnavailable  = "unavailable"  // the syncer could not fetch both payloads: nothing
)

// Verdict is the syncer's decision on one equivocation claim.
type Verdict struct {
	TrainerDID string `json:"trainer_did"`
	Verdict    string `json:"verdict"`
}

// CommitFragmentTx is the current syncer's commit of one fragment of the
// current round: the transcript entry and its verdicts on the fragment's
// equivocation claims (in DID order).
type CommitFragmentTx struct {
	TaskID    string         `json:"task_id"`
	Round     uint64         `json:"round"`
	Fragment  uint64         `json:"fragment"`
	Commit    FragmentCommit `json:"commit"`
	Verdicts  []Verdict      `json:"verdicts"`
	SyncerDID string         `json:"syncer_did"`
	Signed
}

// Preimage is the syncer's signing preimage: PROTOCOL §3 with method fields
// Str(task_id) ‖ U64(round) ‖ U64(fragment) ‖ Bytes(JCS(commit)) ‖
// U64(len(verdicts)) ‖ for each Str(trainer_did) ‖ Str(verdict).
func (p *CommitFragmentTx) Preimage(commitJCS []byte) []byte {
	return RequestPreimage(p.ChainID, TxCommitFragment, p.SyncerDID, p.Nonce, func(c *Canon) {
		c.Str(p.TaskID).U64(p.Round).U64(p.Fragment).Bytes(commitJCS).U64(uint64(len(p.Verdicts)))
		for _, v := range p.Verdicts {
			c.Str(v.TrainerDID).Str(v.Verdict)
		}
	})
}

// SignReceiptTx is a sealed run's receipt signature. The chain builds the
// receipt from its state, the signer's engine profile and (when the signer
// runs in an enclave) the digest of its key's evidence, and checks the
// signature over its preimage.
type SignReceiptTx struct {
	TaskID         string          `json:"task_id"`
	SyncerDID      string          `json:"syncer_did"`
	Engine         json.RawMessage `json:"engine"`
	EvidenceDigest *Hash           `json:"evidence_digest,omitempty"`
	Signature      HexBytes        `json:"signature"`
}

// Tx is a decoded transaction: Type and exactly one of the pointers.
type Tx struct {
	Type string
	// Size is the encoded transaction's length in bytes (DecodeTx sets
	// it): what its per-byte fee is charged on.
	Size              int
	Transfer          *TransferParams
	Faucet            *FaucetTx
	RegisterCandidate *RegisterSyncerParams
	Unbond            *UnbondParams
	PublishPlugin     *PublishPluginTx
	PostTask          *PostTaskTx
	SetInitWeights    *SetInitWeightsTx
	CancelRun         *CancelRunParams
	ElectionProof     *ElectionProofParams
	Enroll            *EnrollTx
	Leave             *LeaveParams
	Submission        *SubmissionTx
	CommitFragment    *CommitFragmentTx
	SignReceipt       *SignReceiptTx
	Challenge         *ChallengeTx
	ChallengeVote     *ChallengeVoteTx
}

// Params returns the transaction's params value (the set pointer).
func (t *Tx) Params() any {
	switch t.Type {
	case TxTransfer:
		return t.Transfer
	case TxFaucet:
		return t.Faucet
	case TxRegisterCandidate:
		return t.RegisterCandidate
	case TxUnbond:
		return t.Unbond
	case TxPublishPlugin:
		return t.PublishPlugin
	case TxPostTask:
		return t.PostTask
	case TxSetInitWeights:
		return t.SetInitWeights
	case TxCancelRun:
		return t.CancelRun
	case TxElectionProof:
		return t.ElectionProof
	case TxEnroll:
		return t.Enroll
	case TxLeave:
		return t.Leave
	case TxSubmission:
		return t.Submission
	case TxCommitFragment:
		return t.CommitFragment
	case TxSignReceipt:
		return t.SignReceipt
	case TxChallenge:
		return t.Challenge
	case TxChallengeVote:
		return t.ChallengeVote
	}
	return nil
}

// ErrDecode marks a transaction that is not well-formed.
var ErrDecode = errors.New("malformed transaction")

// DecodeTx parses a transaction strictly: size limit, known type, unknown
// members, duplicate members and trailing data refused. It checks no
// signature and no state.
func DecodeTx(b []byte) (*Tx, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrDecode)
	}
	if len(b) > MaxTxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrDecode, len(b), MaxTxBytes)
	}
	var env Envelope
	if err := decodeStrictTx(b, &env); err != nil {
		return nil, fmt.Errorf("%w: envelope: %v", ErrDecode, err)
	}
	if len(env.Params) == 0 || bytes.Equal(env.Params, []byte("null")) {
		return nil, fmt.Errorf("%w: %q has no params", ErrDecode, env.Type)
	}
	tx := &Tx{Type: env.Type}
	switch env.Type {
	case TxTransfer:
		tx.Transfer = new(TransferParams)
	case TxFaucet:
		tx.Faucet = new(FaucetTx)
	case TxRegisterCandidate:
		tx.RegisterCandidate = new(RegisterSyncerParams)
	case TxUnbond:
		tx.Unbond = new(UnbondParams)
	case TxPublishPlugin:
		tx.PublishPlugin = new(PublishPluginTx)
	case TxPostTask:
		tx.PostTask = new(PostTaskTx)
	case TxSetInitWeights:
		tx.SetInitWeights = new(SetInitWeightsTx)
	case TxCancelRun:
		tx.CancelRun = new(CancelRunParams)
	case TxElectionProof:
		tx.ElectionProof = new(ElectionProofParams)
	case TxEnroll:
		tx.Enroll = new(EnrollTx)
	case TxLeave:
		tx.Leave = new(LeaveParams)
	case TxSubmission:
		tx.Submission = new(SubmissionTx)
	case TxCommitFragment:
		tx.CommitFragment = new(CommitFragmentTx)
	case TxSignReceipt:
		tx.SignReceipt = new(SignReceiptTx)
	case TxChallenge:
		tx.Challenge = new(ChallengeTx)
	case TxChallengeVote:
		tx.ChallengeVote = new(ChallengeVoteTx)
	default:
		return nil, fmt.Errorf("%w: unknown type %q", ErrDecode, env.Type)
	}
	if err := decodeStrictTx(env.Params, tx.Params()); err != nil {
		return nil, fmt.Errorf("%w: %s params: %v", ErrDecode, env.Type, err)
	}
	if err := tx.CheckLimits(); err != nil {
		return nil, err
	}
	tx.Size = len(b)
	return tx, nil
}

func decodeStrictTx(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return CheckStrictJSON(b, StrictJSONOptions{})
}

// EncodeTx renders a transaction of the given type from its params.
func EncodeTx(typ string, params any) ([]byte, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s params: %w", typ, err)
	}
	b, err := json.Marshal(Envelope{Type: typ, Params: p})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", typ, err)
	}
	if len(b) > MaxTxBytes {
		return nil, fmt.Errorf("encode %s: %d bytes, limit %d", typ, len(b), MaxTxBytes)
	}
	return b, nil
}
