package syncer

import (
	"context"

	"github.com/tenzro/train/wire"
)

// Service is what the node offers over JSON-RPC. *Node implements it; the
// rpc package serves it and never holds business rules of its own.
type Service interface {
	PostTask(ctx context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error)
	SetInitWeights(ctx context.Context, p *wire.SetInitWeightsParams) (*wire.PostTaskResult, error)
	ListRuns(ctx context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error)
	GetRun(ctx context.Context, taskID string) (*wire.RunView, error)
	GetReceipt(ctx context.Context, taskID string) (*wire.Receipt, error)
	GetTranscript(ctx context.Context, taskID string) ([]wire.RoundCommit, error)
	GetPayload(ctx context.Context, hash wire.Hash) ([]byte, error)
	Enroll(ctx context.Context, p *wire.EnrollParams) (*wire.EnrollResult, error)
	Leave(ctx context.Context, p *wire.LeaveParams) (*wire.EnrollResult, error)
	Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error)
	// FinalizeRound is signed by the run's elected syncer; it commits what
	// the timers would (never before τ for active trainers).
	FinalizeRound(ctx context.Context, p *wire.FinalizeParams) (*wire.FinalizeResult, error)
	GetWeights(ctx context.Context, p wire.GetWeightsParams) (*wire.Weights, error)
	Balance(ctx context.Context, did string) (*wire.Balance, error)
	Faucet(ctx context.Context, p wire.FaucetParams) (*wire.Balance, error)
	Transfer(ctx context.Context, p *wire.TransferParams) (*wire.Balance, error)
	RegisterSyncer(ctx context.Context, p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error)
	ListSyncers(ctx context.Context) ([]wire.SyncerCandidate, error)
	// SubmitElectionProof records a remote candidate's VRF proof for a run
	// that has not started; the election at start includes it.
	SubmitElectionProof(ctx context.Context, p *wire.ElectionProofParams) (*wire.ElectionProofResult, error)
	// CancelRun is the sponsor's signed cancellation of a run that has not
	// started: escrow and stakes are refunded.
	CancelRun(ctx context.Context, p *wire.CancelRunParams) (*wire.CancelRunResult, error)
	// Unbond withdraws a syncer candidate's stake after the unbonding delay.
	Unbond(ctx context.Context, p *wire.UnbondParams) (*wire.SyncerCandidate, error)
	Info(ctx context.Context) wire.NodeInfo
	// AttestNonce issues the single-use nonce a trainer's next evidence binds.
	AttestNonce(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error)
}

// Attestor is the seam to the attestation subsystem (attest/ and enclave/).
// The round engine calls it for Verified and Confidential tiers.
type Attestor interface {
	// CheckEvidence verifies evidence (vendor-tagged JSON envelope) against
	// the run's attestation policy and checks that its report data binds
	// reportData. It returns a digest of the evidence for the receipt, or
	// an error naming the failed check.
	CheckEvidence(ctx context.Context, tier string, policy []byte, evidence []byte, reportData wire.Hash) (wire.Hash, error)
}
