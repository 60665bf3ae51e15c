package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// fakeService is an in-test syncer.Service. Task ids steer refusals:
// "missing" → NotFound, "taken" → Conflict, "boom" → an internal fault,
// "panic" → a panic.
type fakeService struct {
	mu       sync.Mutex
	calls    []string
	lastSub  *wire.OuterGradient
	lastPost *wire.PostTaskParams
}

func (f *fakeService) record(m string) {
	f.mu.Lock()
	f.calls = append(f.calls, m)
	f.mu.Unlock()
}

func steer(task string) error {
	switch task {
	case "missing":
		return machine.Errf(machine.KindNotFound, "run %q not found", task)
	case "taken":
		return machine.Errf(machine.KindConflict, "round 3 is closed")
	case "boom":
		return errors.New("pebble: disk on fire at /secret/path")
	case "panic":
		panic("handler exploded")
	}
	return nil
}

func (f *fakeService) PostTask(_ context.Context, p *wire.PostTaskParams) (*wire.PostTaskResult, error) {
	f.record("PostTask")
	f.mu.Lock()
	f.lastPost = p
	f.mu.Unlock()
	s, canon, err := wire.ParseSpec(p.Spec)
	if err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	if err := s.Validate(); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "%v", err)
	}
	return &wire.PostTaskResult{TaskID: s.TaskID, SpecHash: wire.SpecHash(canon), Status: wire.StatusAwaiting}, nil
}

func (f *fakeService) SetInitWeights(_ context.Context, p *wire.SetInitWeightsParams) (*wire.PostTaskResult, error) {
	f.record("SetInitWeights")
	if err := steer(p.TaskID); err != nil {
		return nil, err
	}
	return &wire.PostTaskResult{TaskID: p.TaskID, Status: wire.StatusAwaiting}, nil
}

func (f *fakeService) ListRuns(_ context.Context, p wire.ListRunsParams) ([]wire.RunSummary, error) {
	f.record("ListRuns")
	if p.Status == "none" {
		return nil, nil
	}
	return []wire.RunSummary{{TaskID: "t1", Status: wire.StatusRunning, Round: 2, M: 8, K: 6}}, nil
}

func (f *fakeService) GetRun(_ context.Context, task string) (*wire.RunView, error) {
	f.record("GetRun")
	if err := steer(task); err != nil {
		return nil, err
	}
	return &wire.RunView{TaskID: task, TaskSpec: json.RawMessage(`{"trainer_count":8,"quorum":6}`), Status: wire.StatusRunning, Round: 2,
		TrainerMetrics: map[string]wire.TrainerMetrics{"did:tenzro:machine:zX": {Submitted: 3, Accepted: 2, CurrentReward: "0"}}}, nil
}

func (f *fakeService) GetReceipt(_ context.Context, task string) (*wire.Receipt, error) {
	f.record("GetReceipt")
	if err := steer(task); err != nil {
		return nil, err
	}
	return &wire.Receipt{Version: 1, TaskID: task, RunRoot: wire.SHA256([]byte(task)), TaskSpec: json.RawMessage(`{}`), Engine: json.RawMessage(`{}`)}, nil
}

func (f *fakeService) GetTranscript(_ context.Context, task string) ([]wire.RoundCommit, error) {
	f.record("GetTranscript")
	return nil, steer(task)
}

func (f *fakeService) GetPayload(_ context.Context, h wire.Hash) ([]byte, error) {
	f.record("GetPayload")
	if h == wire.ContentHash([]byte("payload")) {
		return []byte("payload"), nil
	}
	return nil, machine.Errf(machine.KindNotFound, "payload %s not stored", h)
}

func (f *fakeService) Enroll(_ context.Context, p *wire.EnrollParams) (*wire.EnrollResult, error) {
	f.record("Enroll")
	if err := steer(p.TaskID); err != nil {
		return nil, err
	}
	if p.Stake == "999999" {
		return nil, machine.Errf(machine.KindFunds, "stake 999999 above balance 0")
	}
	return &wire.EnrollResult{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Status: wire.TrainerActive, Shards: []int{0}, RunStatus: wire.StatusAwaiting}, nil
}

func (f *fakeService) Leave(_ context.Context, p *wire.LeaveParams) (*wire.EnrollResult, error) {
	f.record("Leave")
	if err := steer(p.TaskID); err != nil {
		return nil, err
	}
	return &wire.EnrollResult{TaskID: p.TaskID, TrainerDID: p.TrainerDID, Status: wire.TrainerLeft}, nil
}

func (f *fakeService) Submit(_ context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	f.record("Submit")
	f.mu.Lock()
	f.lastSub = g
	f.mu.Unlock()
	if err := steer(g.TaskID); err != nil {
		return nil, err
	}
	if wire.ContentHash(g.GradientPayload) != g.PayloadHash {
		return nil, machine.Errf(machine.KindInvalid, "payload_hash does not match the payload")
	}
	return &wire.SubmitResult{Accepted: true, Round: g.Round, FragmentIndex: g.FragmentIndex, PayloadHash: g.PayloadHash, AcceptedCount: 1}, nil
}

func (f *fakeService) FinalizeRound(_ context.Context, p *wire.FinalizeParams) (*wire.FinalizeResult, error) {
	f.record("FinalizeRound")
	task := p.TaskID
	if err := steer(task); err != nil {
		return nil, err
	}
	return &wire.FinalizeResult{TaskID: task, Round: 2, Fragments: []wire.FragmentStatus{{Index: 0, Accepted: 2, Reason: "2 of K=6 accepted"}}, Status: wire.StatusRunning}, nil
}

func (f *fakeService) CancelRun(_ context.Context, p *wire.CancelRunParams) (*wire.CancelRunResult, error) {
	f.record("CancelRun")
	if err := steer(p.TaskID); err != nil {
		return nil, err
	}
	return &wire.CancelRunResult{TaskID: p.TaskID, Status: wire.StatusCancelled, Refunded: "1000", StakesRefunded: 2}, nil
}

func (f *fakeService) Unbond(_ context.Context, p *wire.UnbondParams) (*wire.SyncerCandidate, error) {
	f.record("Unbond")
	return &wire.SyncerCandidate{DID: p.DID, Stake: "5", Unbonding: true, ReleaseMs: 1}, nil
}

func (f *fakeService) GetWeights(_ context.Context, p wire.GetWeightsParams) (*wire.Weights, error) {
	f.record("GetWeights")
	if err := steer(p.TaskID); err != nil {
		return nil, err
	}
	return &wire.Weights{TaskID: p.TaskID, FragmentIndex: p.FragmentIndex, Payload: []byte("weights")}, nil
}

func (f *fakeService) Balance(_ context.Context, did string) (*wire.Balance, error) {
	f.record("Balance")
	return &wire.Balance{DID: did, Balance: "42"}, nil
}

func (f *fakeService) Faucet(_ context.Context, p wire.FaucetParams) (*wire.Balance, error) {
	f.record("Faucet")
	if p.Amount == "0" {
		return nil, machine.Errf(machine.KindDisabled, "faucet is off: start the node with --dev")
	}
	return &wire.Balance{DID: p.DID, Balance: p.Amount}, nil
}

func (f *fakeService) Transfer(_ context.Context, p *wire.TransferParams) (*wire.Balance, error) {
	f.record("Transfer")
	return &wire.Balance{DID: p.From, Balance: "1"}, nil
}

func (f *fakeService) RegisterSyncer(_ context.Context, p *wire.RegisterSyncerParams) (*wire.SyncerCandidate, error) {
	f.record("RegisterSyncer")
	if p.Nonce == 1 {
		return nil, machine.Errf(machine.KindUnauthorized, "nonce 1 is not above the last accepted nonce 5")
	}
	return &wire.SyncerCandidate{DID: p.DID, Stake: p.Stake}, nil
}

func (f *fakeService) ListSyncers(context.Context) ([]wire.SyncerCandidate, error) {
	f.record("ListSyncers")
	return nil, nil
}

func (f *fakeService) SubmitElectionProof(_ context.Context, p *wire.ElectionProofParams) (*wire.ElectionProofResult, error) {
	f.record("SubmitElectionProof")
	return &wire.ElectionProofResult{TaskID: p.TaskID, DID: p.DID}, nil
}

func (f *fakeService) Info(context.Context) wire.NodeInfo {
	f.record("Info")
	return wire.NodeInfo{Version: "test", NodeDID: "did:tenzro:machine:zNode", Dev: true, Role: "syncer"}
}

func (f *fakeService) AttestNonce(_ context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
	f.record("AttestNonce")
	if err := steer(p.TaskID); err != nil {
		return nil, err
	}
	return &wire.NonceResult{Nonce: []byte{1, 2, 3}, Round: 4}, nil
}

var _ syncer.Service = (*fakeService)(nil)

type fakePlugins struct{}

func (fakePlugins) Publish(_ context.Context, p *wire.PublishPluginParams) (*wire.PluginInfo, error) {
	return &wire.PluginInfo{Hash: wire.SHA256(p.Module), Name: "x", Kind: "aggregate", Size: len(p.Module), Manifest: json.RawMessage(`{}`)}, nil
}
func (fakePlugins) List(context.Context) ([]wire.PluginInfo, error) { return nil, nil }
func (fakePlugins) Get(_ context.Context, h wire.Hash) (*wire.PluginInfo, []byte, error) {
	return &wire.PluginInfo{Hash: h, Name: "x", Manifest: json.RawMessage(`{}`)}, []byte{0, 'a', 's', 'm'}, nil
}

type fakeAttest struct{}

func echo(_ context.Context, p json.RawMessage) (json.RawMessage, error) {
	if p == nil {
		return json.RawMessage(`{"params":null}`), nil
	}
	return json.RawMessage(`{"params":` + string(p) + `}`), nil
}
func (fakeAttest) SubmitEvidence(context.Context, json.RawMessage) (json.RawMessage, error) {
	return nil, machine.Errf(machine.KindAttestation, "TDX quote: debug attribute set")
}
func (fakeAttest) GetEvidence(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
	return echo(ctx, p)
}
func (fakeAttest) GetPolicy(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
	return echo(ctx, p)
}
func (fakeAttest) ReleaseKey(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
	return echo(ctx, p)
}

func fakeVerify(_ context.Context, receipt, root []byte) *wire.VerifyReceiptResult {
	var r wire.Receipt
	if err := json.Unmarshal(receipt, &r); err != nil {
		return &wire.VerifyReceiptResult{Valid: 0, Reason: "receipt is not JSON: " + err.Error()}
	}
	if root != nil && string(root) != string(r.RunRoot[:]) {
		return &wire.VerifyReceiptResult{Valid: 0, Reason: "run root differs from the claimed root"}
	}
	return &wire.VerifyReceiptResult{Valid: 1}
}

type fakeChallenges struct{}

func (fakeChallenges) SubmitChallenge(_ context.Context, p *wire.ChallengeTx) (*wire.ChallengeResult, error) {
	return &wire.ChallengeResult{TaskID: p.TaskID, Round: p.Round, Fragment: p.Fragment}, nil
}

func (fakeChallenges) Challenges(context.Context, string) ([]wire.ChallengeRecord, error) {
	return nil, nil
}

func (fakeChallenges) ReplayFragment(_ context.Context, p *wire.ReplayFragmentParams) (*wire.ReplayFragmentResult, error) {
	return &wire.ReplayFragmentResult{TaskID: p.TaskID, Round: p.Round, Fragment: p.Fragment}, nil
}

func (fakeChallenges) FragmentState(context.Context, *wire.ReplayFragmentParams) (*wire.FragmentState, error) {
	return &wire.FragmentState{Entries: []wire.StateEntry{}}, nil
}
