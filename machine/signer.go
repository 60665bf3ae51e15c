package machine

import (
	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/wire"
)

// Who signs each transaction kind, and over what, is said here and only
// here (issue 21, Deliver 6). The ante reads this table in CheckTx and at
// the head of every delivery; it verifies the signature, uses the nonce and
// charges the fee before any kind's own transition runs, and the
// transitions (Apply's handlers) are reached only through it, so they do
// not check a signature or a nonce again.

// txAuth is a transaction's authorization as its kind defines it.
type txAuth struct {
	signer  string // the DID whose key must verify sig; it pays the fee
	chainID string // the chain the signer signed for
	pre     []byte // the signed preimage
	sig     []byte
	nonce   uint64
	nonced  bool // the kind carries a nonce (all but a submission)
	// receipt is what a sign_receipt's entry built to name pre: the run,
	// the chain receipt and its preimage. The ante hands it to the handler,
	// which would otherwise build the same bytes again: the ante's writes
	// (the fee; a sign_receipt carries no nonce) touch only ledger keys,
	// never the run, transcript or challenge keys the receipt is built
	// from (TestSignReceiptAnteLeavesReceiptInputs).
	receipt *builtReceipt
}

// builtReceipt is a sealed run (not signed yet) and its unsigned chain
// receipt for the transaction's signer, as the ante built them; the ante
// verified the signature over the receipt's preimage.
type builtReceipt struct {
	run *Run
	rc  *wire.Receipt
}

// signedBy is the authorization of a request signed by signer with its
// common fields s over pre.
func signedBy(s wire.Signed, signer string, pre []byte) *txAuth {
	return &txAuth{signer: signer, chainID: s.ChainID, pre: pre, sig: s.Signature, nonce: s.Nonce, nonced: true}
}

// txSigning is one kind's entry: exactly one of the two is set.
type txSigning struct {
	// did derives the signer of a kind signed by a DID that pays the fee.
	// own is this chain's id. Its refusals are *Error.
	did func(x *mtx, tx *wire.Tx, own string) (*txAuth, error)
	// exempt checks a kind no DID signs or pays for.
	exempt func(x *mtx, tx *wire.Tx) error
}

// txSigners is the table of every transaction kind (wire.TxTypes).
var txSigners = map[string]txSigning{
	// The --dev chain's unsigned faucet pays nothing.
	wire.TxFaucet: {exempt: func(x *mtx, _ *wire.Tx) error {
		p, err := x.params()
		if err != nil {
			return err
		}
		if !p.Faucet {
			return Errf(KindDisabled, noFaucet)
		}
		return nil
	}},
	// A validator's vote, signed by its consensus key over a challenge id
	// that names the block that took the challenge (so unique to this
	// chain). Validators do not pay to decide challenges.
	wire.TxChallengeVote: {exempt: func(x *mtx, tx *wire.Tx) error {
		return x.checkVoteSignature(tx.ChallengeVote)
	}},
	wire.TxTransfer: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.Transfer
		return signedBy(p.Signed, p.From, p.Preimage()), nil
	}},
	wire.TxRegisterCandidate: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.RegisterCandidate
		return signedBy(p.Signed, p.DID, p.Preimage()), nil
	}},
	wire.TxUnbond: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.Unbond
		return signedBy(p.Signed, p.DID, p.Preimage()), nil
	}},
	wire.TxPublishPlugin: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.PublishPlugin
		return signedBy(p.Signed, p.DID, p.Preimage()), nil
	}},
	// The run's sponsor, named in the spec, signs its posting.
	wire.TxPostTask: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		spec, canon, err := wire.ParseSpec(tx.PostTask.Spec)
		if err != nil {
			return nil, Errf(KindInvalid, "%v", err)
		}
		req := wire.PostTaskParams{Signed: tx.PostTask.Signed}
		return signedBy(req.Signed, spec.SponsorDID, req.Preimage(spec.SponsorDID, wire.SpecHash(canon), tx.PostTask.InitWeightsHash)), nil
	}},
	// The sponsor of the run on chain signs its initial weights and its
	// cancellation.
	wire.TxSetInitWeights: {did: func(x *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.SetInitWeights
		sponsor, err := x.sponsorOf(p.TaskID)
		if err != nil {
			return nil, err
		}
		return signedBy(p.Signed, sponsor, p.Preimage(sponsor)), nil
	}},
	wire.TxCancelRun: {did: func(x *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.CancelRun
		sponsor, err := x.sponsorOf(p.TaskID)
		if err != nil {
			return nil, err
		}
		return signedBy(p.Signed, sponsor, p.Preimage(sponsor)), nil
	}},
	wire.TxElectionProof: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.ElectionProof
		return signedBy(p.Signed, p.DID, p.Preimage()), nil
	}},
	wire.TxEnroll: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.Enroll
		return signedBy(p.Signed, p.TrainerDID, p.Preimage()), nil
	}},
	wire.TxLeave: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.Leave
		return signedBy(p.Signed, p.TrainerDID, p.Preimage()), nil
	}},
	wire.TxChallenge: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.Challenge
		return signedBy(p.Signed, p.ChallengerDID, p.Preimage()), nil
	}},
	wire.TxCommitFragment: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		p := tx.CommitFragment
		c, err := CommitJCS(&p.Commit)
		if err != nil {
			return nil, Errf(KindInvalid, "commit: %v", err)
		}
		return signedBy(p.Signed, p.SyncerDID, p.Preimage(c)), nil
	}},
	// No nonce: a submission is unique by its preimage, which the ante
	// marks as used when it enters a block, so its bytes are not accepted
	// (nor charged) twice.
	wire.TxSubmission: {did: func(_ *mtx, tx *wire.Tx, _ string) (*txAuth, error) {
		s := tx.Submission
		return &txAuth{signer: s.TrainerDID, chainID: s.ChainID, pre: s.Preimage(), sig: s.Signature}, nil
	}},
	// The signature is over the receipt the chain builds from its state:
	// only a sealed run's unsigned receipt can be signed, and the receipt
	// names the chain's run (so the chain id is this chain's).
	wire.TxSignReceipt: {did: func(x *mtx, tx *wire.Tx, own string) (*txAuth, error) {
		p := tx.SignReceipt
		r, err := x.unsignedSealedRun(p.TaskID)
		if err != nil {
			return nil, err
		}
		if err := parseDIDField("syncer_did", p.SyncerDID); err != nil {
			return nil, err
		}
		rc, _, _, err := chainReceipt(x.ctx, x.kv, r, p.SyncerDID, p.Engine, p.EvidenceDigest)
		if err != nil {
			return nil, err
		}
		pre, err := audit.ReceiptPreimage(rc)
		if err != nil {
			return nil, err
		}
		return &txAuth{signer: p.SyncerDID, chainID: own, pre: pre, sig: p.Signature, receipt: &builtReceipt{run: r, rc: rc}}, nil
	}},
}

// sponsorOf is the sponsor DID of the run task on chain (from its header).
func (x *mtx) sponsorOf(task string) (string, error) {
	r, err := LoadRunHeader(x.ctx, x.kv, task, false)
	if err != nil {
		return "", err
	}
	return r.spec.SponsorDID, nil
}
