package client

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

// maxBlobDownload bounds a blob read into memory (the node's own limit on
// initial weights files).
const maxBlobDownload = 4 << 30

// PostTask posts a task spec (signed by its sponsor).
func (c *Client) PostTask(ctx context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error) {
	var r wire.PostTaskResult
	return &r, c.Call(ctx, wire.MethodPostTask, p, &r)
}

// SetInitWeights supplies a run's initial weights after posting.
func (c *Client) SetInitWeights(ctx context.Context, p *wire.SetInitWeightsParams) (*wire.PostTaskResult, error) {
	var r wire.PostTaskResult
	return &r, c.Call(ctx, wire.MethodSetInitWeights, p, &r)
}

// ListRuns lists runs, optionally filtered by status.
func (c *Client) ListRuns(ctx context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error) {
	var r []wire.RunSummary
	return r, c.Call(ctx, wire.MethodListRuns, p, &r)
}

// GetRun returns one run.
func (c *Client) GetRun(ctx context.Context, taskID string) (*wire.RunView, error) {
	var r wire.RunView
	return &r, c.Call(ctx, wire.MethodGetRun, wire.TaskIDParams{TaskID: taskID}, &r)
}

// GetReceipt returns a sealed run's receipt.
func (c *Client) GetReceipt(ctx context.Context, taskID string) (*wire.Receipt, error) {
	var r wire.Receipt
	return &r, c.Call(ctx, wire.MethodGetReceipt, wire.TaskIDParams{TaskID: taskID}, &r)
}

// GetReceiptRaw returns the receipt's JSON exactly as the node sent it.
func (c *Client) GetReceiptRaw(ctx context.Context, taskID string) (json.RawMessage, error) {
	return c.CallRaw(ctx, wire.MethodGetReceipt, wire.TaskIDParams{TaskID: taskID})
}

// GetTranscript returns a run's round commits so far.
func (c *Client) GetTranscript(ctx context.Context, taskID string) ([]wire.RoundCommit, error) {
	var r []wire.RoundCommit
	return r, c.Call(ctx, wire.MethodGetTranscript, wire.TaskIDParams{TaskID: taskID}, &r)
}

// GetPayload returns a stored payload by its content hash (wire.ContentHash):
// raw over GET /blobs/<hash> (checked against the hash), or base64 over
// tenzro_training_getPayload from a node without that endpoint.
func (c *Client) GetPayload(ctx context.Context, h wire.Hash) ([]byte, error) {
	var buf bytes.Buffer
	_, err := c.GetBlob(ctx, h, &buf, maxBlobDownload)
	if err == nil {
		return buf.Bytes(), nil
	}
	if !noBlob(err) {
		return nil, err
	}
	var r rpc.Payload
	if err := c.Call(ctx, wire.MethodGetPayload, rpc.GetPayloadParams{Hash: h}, &r); err != nil {
		return nil, err
	}
	return r.Payload, nil
}

// Enroll enrols a trainer (signed by the trainer).
func (c *Client) Enroll(ctx context.Context, p *wire.EnrollParams) (*wire.EnrollResult, error) {
	var r wire.EnrollResult
	return &r, c.Call(ctx, wire.MethodEnrollTrainer, p, &r)
}

// Leave takes a trainer out of a run (signed by the trainer).
func (c *Client) Leave(ctx context.Context, p *wire.LeaveParams) (*wire.EnrollResult, error) {
	var r wire.EnrollResult
	return &r, c.Call(ctx, wire.MethodLeaveRun, p, &r)
}

// Submit submits one outer gradient.
func (c *Client) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	var r wire.SubmitResult
	return &r, c.Call(ctx, wire.MethodSubmitGradient, g, &r)
}

// FinalizeRound asks the node to commit what the round's rules allow now
// (signed by the run's elected syncer), and says per fragment why not
// otherwise. A refusal still returns the per-fragment result.
func (c *Client) FinalizeRound(ctx context.Context, p *wire.FinalizeParams) (*wire.FinalizeResult, error) {
	var r wire.FinalizeResult
	return &r, c.Call(ctx, wire.MethodFinalizeRound, p, &r)
}

// CancelRun cancels a run that has not started (signed by its sponsor).
func (c *Client) CancelRun(ctx context.Context, p *wire.CancelRunParams) (*wire.CancelRunResult, error) {
	var r wire.CancelRunResult
	return &r, c.Call(ctx, wire.MethodCancelRun, p, &r)
}

// Unbond withdraws a syncer candidate's stake (signed by the candidate).
func (c *Client) Unbond(ctx context.Context, p *wire.UnbondParams) (*wire.SyncerCandidate, error) {
	var r wire.SyncerCandidate
	return &r, c.Call(ctx, wire.MethodUnbondSyncer, p, &r)
}

// GetWeights returns a fragment's current weights (safetensors).
func (c *Client) GetWeights(ctx context.Context, p wire.GetWeightsParams) (*wire.Weights, error) {
	var r wire.Weights
	return &r, c.Call(ctx, wire.MethodGetWeights, p, &r)
}

// VerifyReceipt asks the node to check a receipt (root "" = its own root).
func (c *Client) VerifyReceipt(ctx context.Context, p wire.VerifyReceiptParams) (*wire.VerifyReceiptResult, error) {
	var r wire.VerifyReceiptResult
	return &r, c.Call(ctx, wire.MethodVerifyReceipt, p, &r)
}

// Balance returns a DID's balance in attoTNZO.
func (c *Client) Balance(ctx context.Context, did string) (*wire.Balance, error) {
	var r wire.Balance
	return &r, c.Call(ctx, wire.MethodGetBalance, wire.BalanceParams{DID: did}, &r)
}

// Faucet mints to a DID (dev nodes only).
func (c *Client) Faucet(ctx context.Context, p wire.FaucetParams) (*wire.Balance, error) {
	var r wire.Balance
	return &r, c.Call(ctx, wire.MethodFaucet, p, &r)
}

// Transfer sends attoTNZO between two DIDs (signed by the sender).
func (c *Client) Transfer(ctx context.Context, p *wire.TransferParams) (*wire.Balance, error) {
	var r wire.Balance
	return &r, c.Call(ctx, wire.MethodTransfer, p, &r)
}

// RegisterSyncer registers a syncer candidate (signed by it).
func (c *Client) RegisterSyncer(ctx context.Context, p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error) {
	var r wire.SyncerCandidate
	return &r, c.Call(ctx, wire.MethodRegisterSyncer, p, &r)
}

// ListSyncers lists the syncer candidates.
func (c *Client) ListSyncers(ctx context.Context) ([]wire.SyncerCandidate, error) {
	var r []wire.SyncerCandidate
	return r, c.Call(ctx, wire.MethodListSyncers, nil, &r)
}

// Info describes the node.
func (c *Client) Info(ctx context.Context) (*wire.NodeInfo, error) {
	var r wire.NodeInfo
	return &r, c.Call(ctx, wire.MethodNodeInfo, nil, &r)
}

// Discover returns the node's OpenRPC document.
func (c *Client) Discover(ctx context.Context) (json.RawMessage, error) {
	return c.CallRaw(ctx, rpc.MethodDiscover, nil)
}

// PublishPlugin publishes a plugin module (signed by its author).
func (c *Client) PublishPlugin(ctx context.Context, p *wire.PublishPluginParams) (*wire.PluginInfo, error) {
	var r wire.PluginInfo
	return &r, c.Call(ctx, wire.MethodPublishPlugin, p, &r)
}

// ListPlugins lists registered plugins.
func (c *Client) ListPlugins(ctx context.Context) ([]wire.PluginInfo, error) {
	var r []wire.PluginInfo
	return r, c.Call(ctx, wire.MethodListPlugins, nil, &r)
}

// GetPlugin returns a plugin's info and module bytes.
func (c *Client) GetPlugin(ctx context.Context, h wire.Hash) (*wire.PluginInfo, []byte, error) {
	var r rpc.PluginModule
	if err := c.Call(ctx, wire.MethodGetPlugin, rpc.GetPluginParams{Hash: h}, &r); err != nil {
		return nil, nil, err
	}
	return &r.PluginInfo, r.Module, nil
}

// Attest calls one of the tenzro_attest_* methods with raw params.
func (c *Client) Attest(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	var p any
	if len(params) > 0 {
		p = params
	}
	return c.CallRaw(ctx, method, p)
}

// AttestNonce asks for a single-use attestation nonce.
func (c *Client) AttestNonce(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
	var r wire.NonceResult
	return &r, c.Call(ctx, wire.MethodRequestNonce, p, &r)
}

// SubmitElectionProof calls tenzro_syncer_submitElectionProof.
func (c *Client) SubmitElectionProof(ctx context.Context, p *wire.ElectionProofParams) (*wire.ElectionProofResult, error) {
	var r wire.ElectionProofResult
	return &r, c.Call(ctx, wire.MethodElectionProof, p, &r)
}

// Challenge sends a challenge of a fragment commit (signed by the challenger).
func (c *Client) Challenge(ctx context.Context, p *wire.ChallengeTx) (*wire.ChallengeResult, error) {
	var r wire.ChallengeResult
	return &r, c.Call(ctx, wire.MethodChallenge, p, &r)
}

// Challenges lists a run's challenges.
func (c *Client) Challenges(ctx context.Context, task string) ([]wire.ChallengeRecord, error) {
	var r []wire.ChallengeRecord
	return r, c.Call(ctx, wire.MethodGetChallenges, wire.TaskIDParams{TaskID: task}, &r)
}

// ReplayFragment has the node re-execute a fragment commit that can still be
// challenged and return its FragmentResultHash.
func (c *Client) ReplayFragment(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.ReplayFragmentResult, error) {
	var r wire.ReplayFragmentResult
	return &r, c.Call(ctx, wire.MethodReplayFragment, p, &r)
}

// FragmentState is the committed state re-executing a commit reads.
func (c *Client) FragmentState(ctx context.Context, p *wire.ReplayFragmentParams) (*wire.FragmentState, error) {
	var r wire.FragmentState
	return &r, c.Call(ctx, wire.MethodGetFragmentState, p, &r)
}
