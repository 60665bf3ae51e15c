package wire

import "fmt"

// Per-field size caps of a transaction (docs/protocol/chain.md §1). The
// whole transaction is bounded by MaxTxBytes and pays its fee per byte;
// these caps keep any one field of a transaction to what its meaning
// needs, so no field is a free-form bulk store (issue 22, finding 3: a
// 700 KB task_id in a challenge landed in blocks).
const (
	// MaxChainIDLen is CometBFT's limit on a chain id.
	MaxChainIDLen = 50
	// MaxDIDLen bounds a DID (did:tenzro:<kind>:z<base58 key> is under 80).
	MaxDIDLen = 128
	// MaxAmountLen bounds a decimal amount (ParseAmount's own limit).
	MaxAmountLen = 78
	// MaxSignatureLen bounds a signature (Ed25519 is 64 bytes).
	MaxSignatureLen = 128
	// MaxProofLen bounds an election proof (ECVRF proofs are 80 bytes).
	MaxProofLen = 256
	// MaxProviderLen bounds a submission's provider hint.
	MaxProviderLen = 256
	// MaxEngineLen bounds a receipt's engine profile.
	MaxEngineLen = 64 << 10
	// MaxVerdicts bounds a fragment commit's verdicts (one per trainer).
	MaxVerdicts = 4096
)

// CheckLimits refuses a decoded transaction whose fields exceed their
// caps. DecodeTx calls it; it reads no state.
func (t *Tx) CheckLimits() error {
	var fs []field
	switch t.Type {
	case TxTransfer:
		p := t.Transfer
		fs = append(signedFields(p.Signed), did("from", p.From), did("to", p.To), amount("amount", p.Amount))
	case TxFaucet:
		p := t.Faucet
		fs = []field{did("did", p.DID), amount("amount", p.Amount)}
	case TxRegisterCandidate:
		p := t.RegisterCandidate
		fs = append(signedFields(p.Signed), did("did", p.DID), amount("stake", p.Stake))
	case TxUnbond:
		p := t.Unbond
		fs = append(signedFields(p.Signed), did("did", p.DID))
	case TxPublishPlugin:
		p := t.PublishPlugin
		fs = append(signedFields(p.Signed), did("did", p.DID))
	case TxPostTask:
		p := t.PostTask
		fs = append(signedFields(p.Signed), field{"spec", len(p.Spec), MaxSpecBytes})
		if p.Init != nil {
			fs = append(fs, field{"init.fragments", len(p.Init.Fragments), MaxFragments})
		}
		fs = append(fs, field{"verifiers", len(p.Verifiers), 64})
	case TxSetInitWeights:
		p := t.SetInitWeights
		fs = append(signedFields(p.Signed), task(p.TaskID), field{"init.fragments", len(p.Init.Fragments), MaxFragments})
	case TxCancelRun:
		p := t.CancelRun
		fs = append(signedFields(p.Signed), task(p.TaskID))
	case TxElectionProof:
		p := t.ElectionProof
		fs = append(signedFields(p.Signed), task(p.TaskID), did("did", p.DID), field{"proof", len(p.Proof), MaxProofLen})
	case TxEnroll:
		p := t.Enroll
		fs = append(signedFields(p.Signed), task(p.TaskID), did("trainer_did", p.TrainerDID), amount("stake", p.Stake))
	case TxLeave:
		p := t.Leave
		fs = append(signedFields(p.Signed), task(p.TaskID), did("trainer_did", p.TrainerDID))
	case TxSubmission:
		p := t.Submission
		fs = []field{task(p.TaskID), did("trainer_did", p.TrainerDID), {"chain_id", len(p.ChainID), MaxChainIDLen},
			{"signature", len(p.Signature), MaxSignatureLen}, {"provider", len(p.Provider), MaxProviderLen},
			{"metrics", len(p.Metrics), MaxMetrics}}
	case TxCommitFragment:
		p := t.CommitFragment
		fs = append(signedFields(p.Signed), task(p.TaskID), did("syncer_did", p.SyncerDID), field{"verdicts", len(p.Verdicts), MaxVerdicts})
		for _, v := range p.Verdicts {
			fs = append(fs, did("verdicts[].trainer_did", v.TrainerDID), field{"verdicts[].verdict", len(v.Verdict), 32})
		}
	case TxSignReceipt:
		p := t.SignReceipt
		fs = []field{task(p.TaskID), did("syncer_did", p.SyncerDID), {"engine", len(p.Engine), MaxEngineLen},
			{"signature", len(p.Signature), MaxSignatureLen}}
	case TxChallenge:
		p := t.Challenge
		fs = append(signedFields(p.Signed), task(p.TaskID), did("challenger_did", p.ChallengerDID), amount("bond", p.Bond))
	case TxChallengeVote:
		p := t.ChallengeVote
		fs = []field{{"validator", len(p.Validator), 20}, {"signature", len(p.Signature), MaxSignatureLen}}
	}
	for _, f := range fs {
		if f.n > f.max {
			return fmt.Errorf("%w: %s params: %s is %d long, limit %d", ErrDecode, t.Type, f.name, f.n, f.max)
		}
	}
	return nil
}

type field struct {
	name string
	n    int
	max  int
}

func signedFields(s Signed) []field {
	return []field{{"chain_id", len(s.ChainID), MaxChainIDLen}, {"signature", len(s.Signature), MaxSignatureLen}}
}

func task(s string) field         { return field{"task_id", len(s), MaxTaskIDLen} }
func did(name, s string) field    { return field{name, len(s), MaxDIDLen} }
func amount(name, s string) field { return field{name, len(s), MaxAmountLen} }
