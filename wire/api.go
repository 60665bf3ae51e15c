package wire

import "encoding/json"

// Run statuses.
const (
	StatusAwaiting  = "awaiting_enrollment"
	StatusRunning   = "running"
	StatusSealed    = "sealed"
	StatusCancelled = "cancelled"
)

// RPC method names (DESIGN §7). The first seven are the seed's.
const (
	MethodPostTask       = "tenzro_training_postTask"
	MethodListRuns       = "tenzro_training_listRuns"
	MethodGetRun         = "tenzro_training_getRun"
	MethodGetReceipt     = "tenzro_training_getReceipt"
	MethodEnrollTrainer  = "tenzro_training_enrollTrainer"
	MethodSubmitGradient = "tenzro_training_submitOuterGradient"
	MethodFinalizeRound  = "tenzro_training_finalizeRound"
	MethodGetWeights     = "tenzro_training_getWeights"
	MethodSetInitWeights = "tenzro_training_setInitWeights"
	MethodLeaveRun       = "tenzro_training_leaveRun"
	MethodVerifyReceipt  = "tenzro_training_verifyReceipt"
	MethodGetTranscript  = "tenzro_training_getTranscript"
	MethodGetPayload     = "tenzro_training_getPayload"
	MethodGetBalance     = "tenzro_ledger_getBalance"
	MethodFaucet         = "tenzro_ledger_faucet"
	MethodRegisterSyncer = "tenzro_syncer_registerCandidate"
	MethodListSyncers    = "tenzro_syncer_listCandidates"
	MethodElectionProof  = "tenzro_syncer_submitElectionProof"
	MethodNodeInfo       = "tenzro_node_info"
	MethodRequestNonce   = "tenzro_attest_getNonce"
	MethodSubmitEvidence = "tenzro_attest_submitEvidence"
	MethodGetEvidence    = "tenzro_attest_getEvidence"
	MethodGetPolicy      = "tenzro_attest_getPolicy"
	MethodReleaseKey     = "tenzro_attest_releaseDatasetKey"
	MethodPublishPlugin  = "tenzro_plugin_publish"
	MethodListPlugins    = "tenzro_plugin_list"
	MethodGetPlugin      = "tenzro_plugin_get"
)

// Signed is embedded in every signed request.
type Signed struct {
	// ChainID is the chain the request is signed for (the genesis chain
	// id, tenzro_node_info's chain_id): it is the first field of every
	// request preimage, so a signature made for one chain is refused on any
	// other (PROTOCOL §3).
	ChainID   string   `json:"chain_id"`
	Nonce     uint64   `json:"nonce"`
	Signature HexBytes `json:"signature"`
}

// RequestPreimage builds the signing preimage of a signed request (PROTOCOL §3):
// Str(DomainRequest) ‖ Str(chain_id) ‖ Str(method) ‖ Str(signer) ‖ U64(nonce)
// ‖ method fields. fields appends the method-specific fields.
func RequestPreimage(chainID, method, signer string, nonce uint64, fields func(c *Canon)) []byte {
	c := NewCanon(DomainRequest).Str(chainID).Str(method).Str(signer).U64(nonce)
	if fields != nil {
		fields(c)
	}
	return c.Out()
}

// PostTaskParams is tenzro_training_postTask.
type PostTaskParams struct {
	Spec json.RawMessage `json:"spec"`
	// InitWeights is the optional safetensors file (base64 in JSON).
	InitWeights []byte `json:"init_weights,omitempty"`
	// InitWeightsHash names initial weights already uploaded to the node's
	// blob store (PUT /blobs/<hash>) instead of sending InitWeights; with
	// both, it must be InitWeights' ContentHash. It is the hash the
	// preimage signs either way.
	InitWeightsHash Hash `json:"init_weights_hash,omitzero"`
	// DatasetKey is an optional Confidential-tier dataset key (32 bytes,
	// base64 in JSON) chosen by the sponsor, so the dataset can be encrypted
	// and content-addressed (ipfs://) before the spec that names it is posted.
	// The broker seals it like a key of its own; without it the broker makes
	// one. Refused in other tiers. Not part of the signed preimage (PROTOCOL §5).
	DatasetKey []byte `json:"dataset_key,omitempty"`
	// ScoreCorpus is the CSV corpus a scored spec names by content hash
	// (scoring.corpus), inline (base64) for a node that does not take the
	// sponsor's PUT /blobs upload; absent when the node holds it already.
	// Not part of the signed preimage: the signed spec names its hash.
	ScoreCorpus []byte `json:"score_corpus,omitempty"`
	Signed
}

// Preimage is the signing preimage; spec must be canonical JSON.
func (p *PostTaskParams) Preimage(sponsor string, specHash, weightsHash Hash) []byte {
	return RequestPreimage(p.ChainID, MethodPostTask, sponsor, p.Nonce, func(c *Canon) { c.Hash(specHash).Hash(weightsHash) })
}

// PostTaskResult answers postTask.
type PostTaskResult struct {
	TaskID   string `json:"task_id"`
	SpecHash Hash   `json:"spec_hash"`
	Status   string `json:"status"`
	// DatasetKey is the Confidential tier's AES-256-GCM dataset key, returned
	// once to the sponsor who signed the posting.
	DatasetKey []byte `json:"dataset_key,omitempty"`
	// Height is the block in which the transaction was committed.
	Height int64 `json:"height,omitempty"`
}

// SetInitWeightsParams is tenzro_training_setInitWeights.
type SetInitWeightsParams struct {
	TaskID  string `json:"task_id"`
	Weights []byte `json:"weights,omitempty"`
	// WeightsHash names weights already uploaded to the node's blob store
	// (PUT /blobs/<hash>) instead of sending Weights; with both, it must be
	// Weights' ContentHash.
	WeightsHash Hash `json:"weights_hash,omitzero"`
	Signed
}

// Preimage is the signing preimage.
func (p *SetInitWeightsParams) Preimage(sponsor string) []byte {
	if len(p.Weights) == 0 && !p.WeightsHash.IsZero() {
		return p.PreimageFor(sponsor, p.WeightsHash)
	}
	return p.PreimageFor(sponsor, ContentHash(p.Weights))
}

// PreimageFor is Preimage with the weights' ContentHash already computed
// (weightsHash), so that a node hashes the weights once.
func (p *SetInitWeightsParams) PreimageFor(sponsor string, weightsHash Hash) []byte {
	return RequestPreimage(p.ChainID, MethodSetInitWeights, sponsor, p.Nonce, func(c *Canon) { c.Str(p.TaskID).Hash(weightsHash) })
}

// TaskIDParams is for methods that take only a task id.
type TaskIDParams struct {
	TaskID string `json:"task_id"`
}

// ListRunsParams filters listRuns.
type ListRunsParams struct {
	Status string `json:"status,omitempty"`
}

// RunSummary is one row of listRuns.
type RunSummary struct {
	TaskID   string `json:"task_id"`
	Status   string `json:"status"`
	Round    uint64 `json:"round"`
	Tier     string `json:"tier"`
	Trainers int    `json:"trainers"`
	M        int    `json:"trainer_count"`
	K        int    `json:"quorum"`
	Rounds   int    `json:"max_rounds"`
}

// EnrollParams is tenzro_training_enrollTrainer.
type EnrollParams struct {
	TaskID     string `json:"task_id"`
	TrainerDID string `json:"trainer_did"`
	Stake      string `json:"stake"`
	// Attestation is the enrolment evidence (Verified tier and above).
	Attestation json.RawMessage `json:"attestation,omitempty"`
	Signed
}

// EvidenceRef is the evidence digest the enrolment signs: ClaimEvidenceDigest
// of its attestation claim, or all zero without one.
func (p *EnrollParams) EvidenceRef() (Hash, error) {
	if len(p.Attestation) == 0 {
		return Hash{}, nil
	}
	return ClaimEvidenceDigest(p.Attestation)
}

// Preimage is the signing preimage (EnrollPreimage). A claim that does not
// parse counts as no evidence here; the node refuses it before signatures
// matter (EvidenceRef's error).
func (p *EnrollParams) Preimage() []byte {
	ev, _ := p.EvidenceRef()
	return EnrollPreimage(p.ChainID, p.TrainerDID, p.Nonce, p.TaskID, p.Stake, ev)
}

// LeaveParams is tenzro_training_leaveRun.
type LeaveParams struct {
	TaskID     string `json:"task_id"`
	TrainerDID string `json:"trainer_did"`
	Signed
}

// Preimage is the signing preimage.
func (p *LeaveParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodLeaveRun, p.TrainerDID, p.Nonce, func(c *Canon) { c.Str(p.TaskID) })
}

// EnrollResult answers enrol and leave.
type EnrollResult struct {
	TaskID     string `json:"task_id"`
	TrainerDID string `json:"trainer_did"`
	Status     string `json:"status"` // trainer status: active, joining, left
	Shards     []int  `json:"shards"` // alias of ShardAssignments, kept for older clients
	FromRound  uint64 `json:"from_round"`
	RunStatus  string `json:"run_status"`
	// ShardAssignments are the trainer's data shards (the seed's name); they
	// apply from round ShardsFromRound. Empty until the run starts (every
	// shard is dealt when M trainers have enrolled) or, for a late joiner,
	// until the round it becomes active; ShardsNote says so.
	ShardAssignments []int  `json:"shard_assignments"`
	ShardsFromRound  uint64 `json:"shards_from_round"`
	ShardsNote       string `json:"shards_note,omitempty"`
	// Height is the block in which the transaction was committed.
	Height int64 `json:"height,omitempty"`
}

// OuterGradient is tenzro_training_submitOuterGradient.
type OuterGradient struct {
	TaskID        string `json:"task_id"`
	TrainerDID    string `json:"trainer_did"`
	Round         uint64 `json:"round"`
	FragmentIndex uint64 `json:"fragment_index"`
	// GradientPayload is the safetensors payload (base64 in JSON). It may be
	// omitted when the payload was uploaded to the node's blob store first
	// (PUT /blobs/<payload_hash>): the submission then refers to it by
	// PayloadHash, which the preimage signs either way.
	GradientPayload []byte `json:"gradient_payload,omitempty"`
	PayloadHash     Hash   `json:"payload_hash"`
	// ChainID is the chain the submission is signed for (PROTOCOL §4).
	ChainID     string          `json:"chain_id"`
	Signature   HexBytes        `json:"signature"`
	Attestation json.RawMessage `json:"attestation,omitempty"`
	// Metrics is the optional, signed map of what the trainer measured
	// (train_loss, eval_loss, samples, step_time_ms, ...); see SubmissionMetrics.
	Metrics SubmissionMetrics `json:"metrics,omitempty"`

	// hashed records a payload already known to hash to PayloadHash
	// (MarkPayloadHashed), so that an arriving payload is hashed once however
	// many layers check it. Decoding never sets it.
	hashed payloadCheck
}

// payloadCheck names the payload bytes (first byte, length) and the hash
// they were found to have.
type payloadCheck struct {
	hash  Hash
	first *byte
	n     int
}

// CheckPayloadHash reports whether GradientPayload hashes to PayloadHash
// (ContentHash), with the hash it found. A payload marked with
// MarkPayloadHashed (the same slice, the same PayloadHash) is not hashed again.
func (g *OuterGradient) CheckPayloadHash() (Hash, bool) {
	if c := g.hashed; c.n > 0 && c.n == len(g.GradientPayload) && c.first == &g.GradientPayload[0] && c.hash == g.PayloadHash {
		return g.PayloadHash, true
	}
	got := ContentHash(g.GradientPayload)
	return got, got == g.PayloadHash
}

// MarkPayloadHashed records that GradientPayload is known to hash to
// PayloadHash because the caller has just checked it, as a blob fetch by
// hash does (rpc/gossip's Receiver): later CheckPayloadHash calls on g then
// skip the hashing. Call it only on a gradient whose payload was checked
// against exactly this PayloadHash and is not modified afterwards.
func (g *OuterGradient) MarkPayloadHashed() {
	if len(g.GradientPayload) > 0 {
		g.hashed = payloadCheck{hash: g.PayloadHash, first: &g.GradientPayload[0], n: len(g.GradientPayload)}
	}
}

// Preimage is the submission's signing preimage (PROTOCOL §4): the v1
// fields, then the metrics when there are any.
func (g *OuterGradient) Preimage() []byte {
	return SubmissionPreimageWithMetrics(g.ChainID, g.TaskID, g.TrainerDID, g.Round, g.FragmentIndex, g.PayloadHash, g.Metrics)
}

// SubmissionPreimageWithMetrics is SubmissionPreimage followed by the
// metrics' canonical encoding (nothing when m is empty).
func SubmissionPreimageWithMetrics(chainID, taskID, trainer string, round, fragment uint64, payloadHash Hash, m SubmissionMetrics) []byte {
	c := NewCanon(DomainSubmission).Str(chainID).Str(taskID).Str(trainer).U64(round).U64(fragment).Hash(payloadHash)
	m.appendCanon(c)
	return c.Out()
}

// SubmissionPreimage is PROTOCOL §4: Str(DomainSubmission) ‖ Str(chain_id) ‖
// Str(task_id) ‖ Str(trainer_did) ‖ U64(round) ‖ U64(fragment) ‖
// Hash(payload_hash).
func SubmissionPreimage(chainID, taskID, trainer string, round, fragment uint64, payloadHash Hash) []byte {
	return NewCanon(DomainSubmission).Str(chainID).Str(taskID).Str(trainer).U64(round).U64(fragment).Hash(payloadHash).Out()
}

// SubmitResult answers a submission.
type SubmitResult struct {
	Accepted      bool   `json:"accepted"`
	Round         uint64 `json:"round"`
	FragmentIndex uint64 `json:"fragment_index"`
	PayloadHash   Hash   `json:"payload_hash"`
	// AcceptedCount is the number of accepted submissions for the fragment so far.
	AcceptedCount int `json:"accepted_count"`
	// Finalized is true when this submission completed the fragment.
	Finalized bool `json:"finalized"`
	// Forwarded is true when a light node relayed the submission to the
	// syncer over gossip instead of judging it (Accepted is then false:
	// watch the syncer's run for the outcome).
	Forwarded bool `json:"forwarded,omitempty"`
	// EquivocationClaim is set (Accepted false) when the chain recorded this
	// submission as an equivocation claim against the trainer's first one.
	EquivocationClaim *Hash `json:"equivocation_claim,omitempty"`
	// Height is the block in which the record was committed.
	Height int64 `json:"height,omitempty"`
}

// CommitFragmentResult answers a commitFragment transaction.
type CommitFragmentResult struct {
	TaskID   string `json:"task_id"`
	Round    uint64 `json:"round"`
	Fragment uint64 `json:"fragment"`
	Status   string `json:"status"`
	// RoundClosed is true when this commit closed the round (or sealed the run).
	RoundClosed bool   `json:"round_closed"`
	RunStatus   string `json:"run_status"`
	Height      int64  `json:"height,omitempty"`
}

// SignReceiptResult answers a signReceipt transaction.
type SignReceiptResult struct {
	TaskID    string `json:"task_id"`
	RunRoot   Hash   `json:"run_root"`
	SyncerDID string `json:"syncer_did"`
	Height    int64  `json:"height,omitempty"`
}

// FinalizeParams is tenzro_training_finalizeRound, signed by the run's
// elected syncer. Round is the round the syncer means to close; a request
// for another round is refused, so a delayed request cannot close a later one.
type FinalizeParams struct {
	TaskID    string `json:"task_id"`
	SyncerDID string `json:"syncer_did"`
	Round     uint64 `json:"round"`
	Signed
}

// Preimage is the signing preimage (PROTOCOL §3).
func (p *FinalizeParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodFinalizeRound, p.SyncerDID, p.Nonce, func(c *Canon) { c.Str(p.TaskID).U64(p.Round) })
}

// FinalizeResult answers finalizeRound.
type FinalizeResult struct {
	TaskID    string           `json:"task_id"`
	Round     uint64           `json:"round"`
	Fragments []FragmentStatus `json:"fragments"`
	// Advanced is true when the round closed and the run moved on (or sealed).
	Advanced bool   `json:"advanced"`
	Status   string `json:"status"`
	// Height is the last block this node had committed when it answered.
	Height int64 `json:"height,omitempty"`
}

// FragmentStatus says where one fragment stands in the current round.
type FragmentStatus struct {
	Index     int    `json:"index"`
	Accepted  int    `json:"accepted"`
	Committed bool   `json:"committed"`
	Reason    string `json:"reason,omitempty"`
	// WindowClosesMs is, for a fragment with K accepted whose grace window
	// is still open for active trainers, when it closes (Unix ms).
	WindowClosesMs int64 `json:"window_closes_ms,omitempty"`
}

// GetWeightsParams is tenzro_training_getWeights.
type GetWeightsParams struct {
	TaskID        string `json:"task_id"`
	FragmentIndex uint64 `json:"fragment_index"`
}

// Weights answers getWeights: the fragment's committed weights as safetensors.
type Weights struct {
	TaskID        string `json:"task_id"`
	Round         uint64 `json:"round"`
	FragmentIndex uint64 `json:"fragment_index"`
	WeightsHash   Hash   `json:"weights_hash"`
	Payload       []byte `json:"payload"`
}

// VerifyReceiptParams is tenzro_training_verifyReceipt: a receipt and a
// claimed run root; without root the node checks against the run root
// committed on chain for the receipt's task.
type VerifyReceiptParams struct {
	Receipt json.RawMessage `json:"receipt"`
	Root    string          `json:"root,omitempty"`
}

// VerifyReceiptResult mirrors the 0x1008 precompile: Valid is 1 or 0. When
// the node read the chain (root omitted), Root is the run root committed
// there and Height the height it was read at.
type VerifyReceiptResult struct {
	Valid  byte   `json:"valid"`
	Reason string `json:"reason,omitempty"`
	Root   *Hash  `json:"root,omitempty"`
	Height int64  `json:"height,omitempty"`
}

// BalanceParams is tenzro_ledger_getBalance.
type BalanceParams struct {
	DID string `json:"did"`
}

// Balance answers getBalance and faucet.
type Balance struct {
	DID     string `json:"did"`
	Balance string `json:"balance"`
	// Height is the block of the read (getBalance) or of the committed
	// transaction (faucet).
	Height int64 `json:"height,omitempty"`
}

// FaucetParams is tenzro_ledger_faucet (only with --dev).
type FaucetParams struct {
	DID    string `json:"did"`
	Amount string `json:"amount"`
}

// RegisterSyncerParams is tenzro_syncer_registerCandidate.
type RegisterSyncerParams struct {
	DID   string `json:"did"`
	Stake string `json:"stake"`
	// VRFKey is the candidate's ECVRF public key (hex, 32 bytes); the DID's
	// Ed25519 key is used when empty.
	Signed
}

// Preimage is the signing preimage.
func (p *RegisterSyncerParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodRegisterSyncer, p.DID, p.Nonce, func(c *Canon) { c.Str(p.Stake) })
}

// SyncerCandidate is one registered candidate.
type SyncerCandidate struct {
	DID   string `json:"did"`
	Stake string `json:"stake"`
	// Unbonding is set once the candidate asked to withdraw: it is no
	// longer elected, and its stake returns at ReleaseMs (Unix ms).
	Unbonding bool  `json:"unbonding,omitempty"`
	ReleaseMs int64 `json:"release_ms,omitempty"`
	// Height is the block in which a registration or unbonding was committed.
	Height int64 `json:"height,omitempty"`
}

// NodeInfo answers tenzro_node_info.
type NodeInfo struct {
	Version string `json:"version"`
	NodeDID string `json:"node_did"`
	// ChainID is the chain every request and submission through this node
	// must be signed for (Signed.ChainID, OuterGradient.ChainID).
	ChainID string        `json:"chain_id"`
	Dev     bool          `json:"dev"`
	Role    string        `json:"role"`
	Engine  EngineSummary `json:"engine"`
	PeerID  string        `json:"peer_id,omitempty"`
	Listen  []string      `json:"listen_addrs,omitempty"`
	// Chain says which chain the node follows and how another node joins
	// it (tenzro-node init --peers <peer> --genesis …).
	Chain *ChainInfo `json:"chain,omitempty"`
}

// ChainInfo identifies a node's chain and the node on it.
type ChainInfo struct {
	ChainID string `json:"chain_id"`
	// NodeID is the CometBFT node id, P2PAddr and RPCAddr its listen
	// addresses, Peer the persistent-peer form id@host:port.
	NodeID  string `json:"node_id"`
	P2PAddr string `json:"p2p_addr"`
	RPCAddr string `json:"rpc_addr"`
	Peer    string `json:"peer"`
	// Height is the last committed height when the node answered.
	Height int64 `json:"height"`
	// Validator says whether this node votes (its key is in the genesis
	// validator set).
	Validator bool `json:"validator,omitempty"`
	// GenesisHash identifies the network: SHA-256 of its genesis document
	// in canonical JSON (chain.GenesisHash), what a light client pins with
	// --genesis-hash.
	GenesisHash *Hash `json:"genesis_hash,omitempty"`
}

// EngineSummary names the aggregation engine in use.
type EngineSummary struct {
	Engine string `json:"engine"`
	Hash   Hash   `json:"hash"`
}

// PluginInfo describes a registered plugin.
type PluginInfo struct {
	Hash             Hash            `json:"hash"`
	InstrumentedHash Hash            `json:"instrumented_hash"`
	CostTableHash    Hash            `json:"cost_table_hash"`
	Name             string          `json:"name"`
	Version          string          `json:"version"`
	Kind             string          `json:"kind"` // aggregate, verify, outer
	Builtin          bool            `json:"builtin"`
	Size             int             `json:"size"`
	Manifest         json.RawMessage `json:"manifest"`
}

// PublishPluginParams is tenzro_plugin_publish.
type PublishPluginParams struct {
	DID    string `json:"did"`
	Module []byte `json:"module"`
	Signed
}

// Preimage is the signing preimage.
func (p *PublishPluginParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodPublishPlugin, p.DID, p.Nonce, func(c *Canon) { c.Hash(SHA256(p.Module)) })
}

// AttestationClaim is the `attestation` member of enrolments and submissions
// in Verified and Confidential tiers. The evidence's report data must equal
// AttestReportData(ProgramHash, shard, model, trainer DID, Nonce, payload),
// where the shard is the trainer's first shard this round (0 at enrolment),
// the model is the model hash at the start of the round (the initial model
// at enrolment), Nonce is from tenzro_attest_getNonce and payload is the
// payload_hash of the submission the claim goes with (zero at enrolment).
type AttestationClaim struct {
	Envelope    json.RawMessage `json:"envelope"`
	Nonce       []byte          `json:"nonce"`
	ProgramHash Hash            `json:"program_hash"`
}

// NonceParams is tenzro_attest_getNonce.
type NonceParams struct {
	TaskID string `json:"task_id"`
	DID    string `json:"did"`
}

// NonceResult answers getNonce.
type NonceResult struct {
	Nonce []byte `json:"nonce"`
	// Shard and ModelHash are what the evidence must bind this round.
	Shard     uint64 `json:"shard"`
	ModelHash Hash   `json:"model_hash"`
	Round     uint64 `json:"round"`
}

// ElectionProofParams is tenzro_syncer_submitElectionProof: a registered
// candidate's RFC 9381 proof over the run's election alpha
// (election.Alpha(task_id, spec_hash)), computed with the candidate's own key.
type ElectionProofParams struct {
	TaskID string   `json:"task_id"`
	DID    string   `json:"did"`
	Proof  HexBytes `json:"proof"`
	Signed
}

// Preimage is the signing preimage.
func (p *ElectionProofParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodElectionProof, p.DID, p.Nonce, func(c *Canon) { c.Str(p.TaskID).Bytes(p.Proof) })
}

// ElectionProofResult answers submitElectionProof.
type ElectionProofResult struct {
	TaskID string   `json:"task_id"`
	DID    string   `json:"did"`
	Output HexBytes `json:"output"`
	Height int64    `json:"height,omitempty"`
}

// RPC methods added for run cancellation and syncer unbonding (issue 8).
const (
	MethodCancelRun    = "tenzro_training_cancelRun"
	MethodUnbondSyncer = "tenzro_syncer_unbond"
)

// CancelRunParams is tenzro_training_cancelRun: the sponsor cancels a run
// that has not started; the escrow and every enrolled trainer's stake are
// refunded.
type CancelRunParams struct {
	TaskID string `json:"task_id"`
	Signed
}

// Preimage is the signing preimage (signer: the spec's sponsor_did).
func (p *CancelRunParams) Preimage(sponsor string) []byte {
	return RequestPreimage(p.ChainID, MethodCancelRun, sponsor, p.Nonce, func(c *Canon) { c.Str(p.TaskID) })
}

// CancelRunResult answers cancelRun.
type CancelRunResult struct {
	TaskID string `json:"task_id"`
	Status string `json:"status"`
	// Refunded is the escrow returned to the sponsor (attoTNZO).
	Refunded string `json:"refunded"`
	// StakesRefunded is the number of trainers whose stake was returned.
	StakesRefunded int   `json:"stakes_refunded"`
	Height         int64 `json:"height,omitempty"`
}

// UnbondParams is tenzro_syncer_unbond: a candidate withdraws its whole
// syncer stake. The stake moves to an unbonding account at once, the
// candidate is no longer elected, and the stake returns to the DID after the
// node's unbonding delay.
type UnbondParams struct {
	DID string `json:"did"`
	Signed
}

// Preimage is the signing preimage.
func (p *UnbondParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodUnbondSyncer, p.DID, p.Nonce, nil)
}
