package machine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"strings"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Block is the context a transition runs in: the height, the block time in
// Unix milliseconds, the previous block's time and the block's hash. It is
// all the machine knows of the world: no wall clock ever enters a
// transition.
type Block struct {
	Height int64
	TimeMs int64
	// PrevTimeMs is the time of the previous block (0: unknown, then
	// TimeMs counts).
	PrevTimeMs int64
	Hash       []byte
}

// ArrivalMs is the time a transaction of this block is judged to have
// arrived for a grace window: the previous block's time, the last moment
// the chain is known to have been live before it. A transaction sent
// during a halt lands in the first block after it, whose own time is
// stretched by the halt; judged at the previous block's time, a submission
// sent inside its window before the halt is not lost to it (issue 22).
// Nodes judge at their last committed block, which is the same time.
func (b Block) ArrivalMs() int64 {
	if b.PrevTimeMs > 0 && b.PrevTimeMs < b.TimeMs {
		return b.PrevTimeMs
	}
	return b.TimeMs
}

// MachineConfig configures a Machine. Every validator of a network must
// run the same configuration (it is part of the binary, not of a node's
// flags).
type MachineConfig struct {
	// Builtins maps the module hashes of the built-in plugins (and of the
	// native engine's implementations) to their rule names: a posting's rule
	// references must name one of these or a plugin published on chain.
	Builtins map[wire.Hash]string
	Logger   *slog.Logger
	// Evidence verifies Verified/Confidential evidence in enrolments and
	// submissions (mevidence.go); without one such evidence is refused.
	Evidence EvidenceVerifier
}

// Machine is the run state machine's deterministic transitions (post →
// elect → enrol → submission records → fragment commits → round close →
// seal, plus the ledger, syncer candidates, plugin records, cancellation,
// expiry and fees) over a KV and a Block. It is the one place for
// admission and settlement rules: it never reads a wall clock, never runs
// a plugin, never sees payload bytes, never iterates a map into state and
// never uses floats. Each Apply and each run's timers in BeginBlock are
// all or nothing on their KV.
type Machine struct {
	builtins map[wire.Hash]string
	log      *slog.Logger
	evidence EvidenceVerifier
	// timers remembers what deciding a run's timers decoded (a cache of a
	// pure function of stored bytes; timermemo.go).
	timers timerMemo
}

// NewMachine returns a machine.
func NewMachine(cfg MachineConfig) *Machine {
	m := &Machine{builtins: map[wire.Hash]string{}, log: cfg.Logger, evidence: cfg.Evidence}
	for h, n := range cfg.Builtins {
		m.builtins[h] = n
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return m
}

// Params are the chain's economic parameters, fixed at genesis (KSMeta
// "params").
type Params struct {
	// PostingFee and PublishFee are burned per posting and per plugin
	// publication (attoTNZO, decimal).
	PostingFee string `json:"posting_fee"`
	PublishFee string `json:"publish_fee"`
	// UnbondingDelayMs is how long a withdrawn syncer stake stays locked.
	UnbondingDelayMs int64 `json:"unbonding_delay_ms"`
	// Faucet mints on request (the --dev chain only).
	Faucet bool `json:"faucet"`
	// ChallengeWindowBlocks is the challenge window of runs whose spec sets
	// none (absent: ChallengeWindow's default).
	ChallengeWindowBlocks *int64 `json:"challenge_window_blocks,omitempty"`
	// Transaction fees (mante.go), burned: every transaction but the
	// faucet and validators' challenge votes pays TxFeeBase + TxFeeKind[type]
	// + TxFeeByte × its size in bytes, whether or not it then succeeds.
	TxFeeBase string            `json:"tx_fee_base,omitempty"`
	TxFeeByte string            `json:"tx_fee_byte,omitempty"`
	TxFeeKind map[string]string `json:"tx_fee_kind,omitempty"`
	// Economic floors (mfloors.go): the smallest reward pool a posting
	// escrows, stake a trainer locks and challenge bond a spec sets, and
	// the bond per payload byte of a fragment's K inputs that pays the
	// validators' re-execution when a challenge is wrong.
	MinRewardPool    string `json:"min_reward_pool,omitempty"`
	MinStake         string `json:"min_stake,omitempty"`
	MinChallengeBond string `json:"min_challenge_bond,omitempty"`
	ReexecBondByte   string `json:"reexec_bond_byte,omitempty"`
	// HaltGapMs: a block more than this after the previous one follows a
	// halt; every running round's clock (Run.RoundMs) then moves forward by
	// the gap less HaltGapMs, so round deadlines and syncer turns count only
	// time the chain was live (0: off, a deadline counts every millisecond
	// of block time).
	HaltGapMs int64 `json:"halt_gap_ms,omitempty"`
}

// MinHaltGapMs and MaxHaltGapMs bound Params.HaltGapMs when it is on: a
// gap has to be well above any block interval to mean a halt.
const (
	MinHaltGapMs = 5_000
	MaxHaltGapMs = 86_400_000
)

// haltShift is how far a block moves running rounds' clocks: its gap from
// the previous block less HaltGapMs, 0 when it is not after a halt.
func (p *Params) haltShift(blk Block) int64 {
	if p.HaltGapMs <= 0 || blk.PrevTimeMs <= 0 {
		return 0
	}
	return max(0, blk.TimeMs-blk.PrevTimeMs-p.HaltGapMs)
}

// ChallengeWindow is the default challenge window of this chain's runs: the
// genesis's, else 0 on a chain with a faucet (the one-validator --dev chain,
// where its own node would decide any challenge: commits are final at once,
// as before challenges existed) and wire.DefaultChallengeWindowBlocks on a
// network.
func (p *Params) ChallengeWindow() int64 {
	switch {
	case p.ChallengeWindowBlocks != nil:
		return *p.ChallengeWindowBlocks
	case p.Faucet:
		return 0
	}
	return wire.DefaultChallengeWindowBlocks
}

// DefaultParams are the parameters of a genesis that sets none.
func DefaultParams() Params {
	return Params{PostingFee: DefaultPostingFee.String(), PublishFee: DefaultPublishFee.String(),
		UnbondingDelayMs: DefaultUnbondingDelay.Milliseconds(),
		TxFeeBase:        DefaultTxFeeBase.String(), TxFeeByte: DefaultTxFeeByte.String(),
		MinRewardPool: DefaultMinRewardPool.String(), MinStake: DefaultMinStake.String(),
		MinChallengeBond: DefaultMinChallengeBond.String(), ReexecBondByte: DefaultReexecBondByte.String()}
}

// Genesis is the application's part of a genesis file (app_state).
type Genesis struct {
	// Accounts are the genesis allocations: the only way funds exist on a
	// chain without a faucet.
	Accounts []GenesisAccount `json:"accounts"`
	// Candidates are syncer candidates registered at genesis, their stake
	// minted into their syncer-stake accounts.
	Candidates []GenesisAccount `json:"candidates,omitempty"`
	// Faucet enables tenzro_ledger_faucet (the --dev chain).
	Faucet bool `json:"faucet,omitempty"`
	// Params overrides the default fees and unbonding delay.
	Params *GenesisParams `json:"params,omitempty"`
	// Validators is the consensus validator set (from CometBFT's
	// InitChain, not app_state): the keys and voting power that decide
	// challenges. The application never changes it.
	Validators []Validator `json:"-"`
	// ChainID is the genesis chain id (from InitChain): every signed
	// transaction must be signed for it.
	ChainID string `json:"-"`
}

// Validator is a consensus validator as the machine keeps it (KSMeta
// "val/<hex address>"): its 20-byte address, Ed25519 public key and voting
// power.
type Validator struct {
	Address wire.HexBytes `json:"address"`
	PubKey  wire.HexBytes `json:"pub_key"`
	Power   int64         `json:"power"`
}

// GenesisParams are a genesis's optional parameters.
type GenesisParams struct {
	PostingFee       string `json:"posting_fee,omitempty"`
	PublishFee       string `json:"publish_fee,omitempty"`
	UnbondingDelayMs int64  `json:"unbonding_delay_ms,omitempty"`
	// ChallengeWindowBlocks sets Params.ChallengeWindowBlocks.
	ChallengeWindowBlocks *int64 `json:"challenge_window_blocks,omitempty"`
	// Fees and floors set the Params of the same names (decimal attoTNZO;
	// empty: the default). TxFeeKind replaces the default per-kind table.
	TxFeeBase        string            `json:"tx_fee_base,omitempty"`
	TxFeeByte        string            `json:"tx_fee_byte,omitempty"`
	TxFeeKind        map[string]string `json:"tx_fee_kind,omitempty"`
	MinRewardPool    string            `json:"min_reward_pool,omitempty"`
	MinStake         string            `json:"min_stake,omitempty"`
	MinChallengeBond string            `json:"min_challenge_bond,omitempty"`
	ReexecBondByte   string            `json:"reexec_bond_byte,omitempty"`
	// HaltGapMs sets Params.HaltGapMs (0: off; else MinHaltGapMs..MaxHaltGapMs).
	HaltGapMs int64 `json:"halt_gap_ms,omitempty"`
}

// GenesisAccount is one allocation (or candidate stake): Balance attoTNZO
// to DID.
type GenesisAccount struct {
	DID     string `json:"did"`
	Balance string `json:"balance"`
}

// MaxGenesisAccounts bounds a genesis's allocations and candidates.
const MaxGenesisAccounts = 100000

// ParseGenesis decodes app_state strictly: known members only, no
// duplicate members, valid DIDs and amounts, no DID allocated twice or a
// candidate twice. Empty input is the empty genesis.
func ParseGenesis(b []byte) (*Genesis, error) {
	g := &Genesis{}
	if len(strings.TrimSpace(string(b))) == 0 {
		return g, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(g); err != nil {
		return nil, fmt.Errorf("genesis app_state: %w", err)
	}
	if dec.More() {
		return nil, errors.New("genesis app_state: trailing data after the JSON object")
	}
	if err := wire.CheckStrictJSON(b, wire.StrictJSONOptions{}); err != nil {
		return nil, fmt.Errorf("genesis app_state: %w", err)
	}
	if len(g.Accounts) > MaxGenesisAccounts || len(g.Candidates) > MaxGenesisAccounts {
		return nil, fmt.Errorf("genesis app_state: %d accounts and %d candidates, limit %d each", len(g.Accounts), len(g.Candidates), MaxGenesisAccounts)
	}
	for _, list := range []struct {
		name string
		v    []GenesisAccount
	}{{"accounts", g.Accounts}, {"candidates", g.Candidates}} {
		seen := map[string]bool{}
		for i, acc := range list.v {
			if _, err := did.Parse(acc.DID); err != nil {
				return nil, fmt.Errorf("genesis app_state: %s[%d].did: %v", list.name, i, err)
			}
			amt, err := wire.ParseAmount(acc.Balance)
			if err != nil {
				return nil, fmt.Errorf("genesis app_state: %s[%d].balance: %w", list.name, i, err)
			}
			if list.name == "candidates" && amt.Sign() == 0 {
				return nil, fmt.Errorf("genesis app_state: candidates[%d]: stake must be positive", i)
			}
			if seen[acc.DID] {
				return nil, fmt.Errorf("genesis app_state: %s lists %s twice", list.name, acc.DID)
			}
			seen[acc.DID] = true
		}
	}
	if p := g.Params; p != nil {
		if err := checkFeeKinds(p.TxFeeKind); err != nil {
			return nil, fmt.Errorf("genesis app_state: %w", err)
		}
		for name, v := range map[string]string{"posting_fee": p.PostingFee, "publish_fee": p.PublishFee,
			"tx_fee_base": p.TxFeeBase, "tx_fee_byte": p.TxFeeByte, "min_reward_pool": p.MinRewardPool,
			"min_stake": p.MinStake, "min_challenge_bond": p.MinChallengeBond, "reexec_bond_byte": p.ReexecBondByte} {
			if v == "" {
				continue
			}
			if _, err := wire.ParseAmount(v); err != nil {
				return nil, fmt.Errorf("genesis app_state: params.%s: %w", name, err)
			}
		}
		if p.UnbondingDelayMs < 0 {
			return nil, fmt.Errorf("genesis app_state: params.unbonding_delay_ms %d", p.UnbondingDelayMs)
		}
		if w := p.ChallengeWindowBlocks; w != nil && (*w < 0 || *w > wire.MaxChallengeWindowBlocks) {
			return nil, fmt.Errorf("genesis app_state: params.challenge_window_blocks %d, want 0..%d", *w, wire.MaxChallengeWindowBlocks)
		}
		if v := p.HaltGapMs; v != 0 && (v < MinHaltGapMs || v > MaxHaltGapMs) {
			return nil, fmt.Errorf("genesis app_state: params.halt_gap_ms %d, want 0 (off) or %d..%d", v, MinHaltGapMs, MaxHaltGapMs)
		}
	}
	return g, nil
}

// InitGenesis writes the genesis state: the parameters, then each
// allocation minted from the issuer account in the order listed, then each
// candidate's stake, so the sum of every balance stays 0.
func (m *Machine) InitGenesis(ctx context.Context, kv KV, blk Block, g *Genesis) error {
	x := m.begin(ctx, kv, blk)
	p := DefaultParams()
	if gp := g.Params; gp != nil {
		if gp.PostingFee != "" {
			p.PostingFee = gp.PostingFee
		}
		if gp.PublishFee != "" {
			p.PublishFee = gp.PublishFee
		}
		if gp.UnbondingDelayMs > 0 {
			p.UnbondingDelayMs = gp.UnbondingDelayMs
		}
		p.ChallengeWindowBlocks = gp.ChallengeWindowBlocks
		p.HaltGapMs = gp.HaltGapMs
		gp.applyFees(&p)
	}
	p.Faucet = g.Faucet
	if err := x.putJSON(KSMeta, keyParams, p); err != nil {
		return err
	}
	if g.ChainID != "" {
		x.set(KSMeta, keyChainID, []byte(g.ChainID))
	}
	for _, acc := range g.Accounts {
		amt, err := wire.ParseAmount(acc.Balance)
		if err != nil {
			return err
		}
		if err := x.lt.transfer(acctIssuer, AcctDID(acc.DID), amt, "genesis allocation"); err != nil {
			return fmt.Errorf("genesis allocation to %s: %w", acc.DID, err)
		}
	}
	if err := x.putValidators(g.Validators); err != nil {
		return err
	}
	for _, c := range g.Candidates {
		amt, err := wire.ParseAmount(c.Balance)
		if err != nil {
			return err
		}
		if err := x.lt.transfer(acctIssuer, acctSyncerStake(c.DID), amt, "genesis syncer candidacy"); err != nil {
			return err
		}
		if err := x.putJSON(KSMeta, CandKey(c.DID), wire.SyncerCandidate{DID: c.DID, Stake: amt.String()}); err != nil {
			return err
		}
	}
	return x.finish()
}

// mtx is one transition in progress: its writes go to an overlay that
// reaches the caller's KV only at finish.
type mtx struct {
	m   *Machine
	ctx context.Context
	kv  *Overlay
	blk Block
	lt  *ledgerTx
	p   *Params
	cid *string
}

func (m *Machine) begin(ctx context.Context, kv KV, blk Block) *mtx {
	o := NewOverlay(kv)
	return &mtx{m: m, ctx: ctx, kv: o, blk: blk, lt: newLedgerTx(ctx, o)}
}

// finish stages the ledger's entries and writes everything to the caller's KV.
func (x *mtx) finish() error {
	var b Batch
	if err := x.lt.flush(&b); err != nil {
		return err
	}
	if err := x.kv.Commit(x.ctx, &b); err != nil {
		return err
	}
	return x.kv.Flush(x.ctx)
}

func (x *mtx) set(ks Keyspace, key, val []byte) {
	var b Batch
	b.Set(ks, key, val)
	_ = x.kv.Commit(x.ctx, &b) // an overlay buffers; it cannot fail
}

func (x *mtx) del(ks Keyspace, key []byte) {
	var b Batch
	b.Delete(ks, key)
	_ = x.kv.Commit(x.ctx, &b)
}

func (x *mtx) putJSON(ks Keyspace, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%q: %w", ks, key, err)
	}
	x.set(ks, key, raw)
	return nil
}

func (x *mtx) getJSON(ks Keyspace, key []byte, v any) (bool, error) {
	raw, err := x.kv.Get(x.ctx, ks, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("state %s/%q is corrupt: %w", ks, key, err)
	}
	return true, nil
}

// params reads the chain's parameters (defaults when genesis wrote none).
func (x *mtx) params() (*Params, error) {
	if x.p != nil {
		return x.p, nil
	}
	raw, err := x.kv.Get(x.ctx, KSMeta, keyParams)
	if errors.Is(err, ErrNotFound) {
		raw, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := decodeParams(raw)
	if err != nil {
		return nil, fmt.Errorf("state %s/%q is corrupt: %w", KSMeta, keyParams, err)
	}
	x.p = p
	return x.p, nil
}

// LoadParams reads the chain's parameters from a committed state (the
// defaults where the genesis set none).
func LoadParams(ctx context.Context, kv KV) (*Params, error) {
	return (&mtx{ctx: ctx, kv: NewOverlay(kv)}).params()
}

// Fee is the fee the machine charges for which ("posting" or "publish") in
// a committed state: the node's early refusal reads the same number the
// transition burns.
func Fee(ctx context.Context, kv KV, which string) (*big.Int, error) {
	return (&mtx{ctx: ctx, kv: NewOverlay(kv)}).fee(which)
}

func (x *mtx) fee(which string) (*big.Int, error) {
	p, err := x.params()
	if err != nil {
		return nil, err
	}
	v := p.PostingFee
	if which == "publish" {
		v = p.PublishFee
	}
	return wire.ParseAmount(v)
}

// verifySig checks a signature by signer's DID key.
func verifySig(signer string, pre, sig []byte) error {
	k := sigKey(signer, pre, sig)
	if verifiedBefore(k) {
		return nil // this exact signature verified before (caches.go)
	}
	if err := did.Verify(signer, pre, sig); err != nil {
		if errors.Is(err, did.ErrBadSignature) {
			return Errf(KindUnauthorized, "bad signature: does not verify against %s", signer)
		}
		return Errf(KindUnauthorized, "signer: %v", err)
	}
	noteVerified(k)
	return nil
}

// ErrStaleNonce marks the nonce refusal (the chain reports it with its own
// result code).
var ErrStaleNonce = errors.New("stale nonce")

// nonceError is a KindUnauthorized refusal that also matches ErrStaleNonce.
type nonceError struct{ e *Error }

func (e nonceError) Error() string   { return e.e.Msg }
func (e nonceError) Unwrap() []error { return []error{e.e, ErrStaleNonce} }

// LastNonce is the last nonce the chain accepted from d (0, false when none).
func LastNonce(ctx context.Context, kv KV, d string) (uint64, bool, error) {
	raw, err := kv.Get(ctx, KSLedger, nonceKey(d))
	if errors.Is(err, ErrNotFound) {
		return 0, false, nil
	}
	if err != nil || len(raw) != 8 {
		return 0, false, fmt.Errorf("nonce of %s: %v (%d bytes)", d, err, len(raw))
	}
	return binary.BigEndian.Uint64(raw), true, nil
}

// Apply runs one transaction at blk, all or nothing on kv, and returns its
// result (JSON) or a refusal (*Error; anything else is an internal fault).
//
// The ante (chain id, signature, nonce, fee) runs first as its own step:
// when it passes, its writes stay even if the transaction's own rules then
// refuse it (the nonce is used up and the fee paid).
func (m *Machine) Apply(ctx context.Context, kv KV, blk Block, tx *wire.Tx) ([]byte, error) {
	a := m.begin(ctx, kv, blk)
	ai, err := a.ante(tx)
	if err != nil {
		return nil, err
	}
	if err := a.finish(); err != nil {
		return nil, fmt.Errorf("apply %s: ante: %w", tx.Type, err)
	}
	// The ante verified the signer that txSigners (signer.go) names for
	// this kind and used its nonce: the handlers do not check either again.
	x := m.begin(ctx, kv, blk)
	var out any
	switch tx.Type {
	case wire.TxTransfer:
		out, err = x.transfer(tx.Transfer)
	case wire.TxFaucet:
		out, err = x.faucet(tx.Faucet)
	case wire.TxRegisterCandidate:
		out, err = x.registerCandidate(tx.RegisterCandidate)
	case wire.TxUnbond:
		out, err = x.unbond(tx.Unbond)
	case wire.TxPublishPlugin:
		out, err = x.publishPlugin(tx.PublishPlugin)
	case wire.TxPostTask:
		out, err = x.postTask(tx.PostTask)
	case wire.TxSetInitWeights:
		out, err = x.setInitWeights(tx.SetInitWeights)
	case wire.TxCancelRun:
		out, err = x.cancelRun(tx.CancelRun)
	case wire.TxElectionProof:
		out, err = x.electionProof(tx.ElectionProof)
	case wire.TxEnroll:
		out, err = x.enroll(tx.Enroll)
	case wire.TxLeave:
		out, err = x.leave(tx.Leave)
	case wire.TxSubmission:
		out, err = x.submission(tx.Submission)
	case wire.TxCommitFragment:
		out, err = x.commitFragment(tx.CommitFragment)
	case wire.TxSignReceipt:
		out, err = x.signReceipt(tx.SignReceipt, ai.receipt)
	case wire.TxChallenge:
		out, err = x.challenge(tx.Challenge)
	case wire.TxChallengeVote:
		out, err = x.challengeVote(tx.ChallengeVote)
	default:
		err = Errf(KindInvalid, "unknown transaction type %q", tx.Type)
	}
	if err != nil {
		return nil, err
	}
	if err := x.finish(); err != nil {
		return nil, fmt.Errorf("apply %s: %w", tx.Type, err)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode the result of %s: %w", tx.Type, err)
	}
	return raw, nil
}

// Check does a transaction's ante checks (Ante) against kv (the committed
// state) and writes nothing. State rules wait for Apply.
func (m *Machine) Check(ctx context.Context, kv KV, tx *wire.Tx) error {
	x := m.begin(ctx, ReadOnly(kv), Block{})
	_, err := x.ante(tx)
	return err
}

// BeginBlock runs the timers at blk: unstarted runs expire after their
// enrolment window, the round deadline closes the fragments that have fewer
// than K records (no quorum) and so maybe the round, and unbonded syncer
// stakes whose delay has passed are released. Grace windows need no timer:
// they are evaluated when transactions arrive. Each run's timers are all or
// nothing; a run that cannot be read is logged and skipped (every validator
// skips it alike).
func (m *Machine) BeginBlock(ctx context.Context, kv KV, blk Block) error {
	tasks, err := ActiveTasks(ctx, kv)
	if err != nil {
		return fmt.Errorf("timers: %w", err)
	}
	// A block after a halt moves running rounds' clocks (Params.HaltGapMs).
	var shift int64
	if len(tasks) > 0 && blk.PrevTimeMs > 0 {
		x := m.begin(ctx, kv, blk)
		p, err := x.params()
		if err != nil {
			return fmt.Errorf("timers: %w", err)
		}
		shift = p.haltShift(blk)
	}
	for _, task := range tasks {
		x := m.begin(ctx, kv, blk)
		changed, err := x.timers(task, shift)
		if err == nil && changed {
			err = x.finish()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.log.Error("timers of a run failed; skipped at this block", "task", task, "height", blk.Height, "err", err)
		}
	}
	x := m.begin(ctx, kv, blk)
	if n, err := x.releaseUnbonded(); err != nil {
		return fmt.Errorf("unbonding: %w", err)
	} else if n > 0 {
		return x.finish()
	}
	return nil
}

// timers applies the clock to one run; changed says whether it wrote.
// shift (> 0 only in the first block after a halt) moves a running round's
// clock forward before any deadline is checked.
func (x *mtx) timers(task string, shift int64) (bool, error) {
	// Most blocks fire no timer of a run: decide that from the header and
	// the fragments' states alone, without reading its enrolments and
	// records (whose number grows with the run).
	var r *Run
	if shift == 0 {
		due, seeds, err := timersMayFire(x.ctx, x.kv, task, x.blk, &x.m.timers)
		if err != nil || !due {
			return false, err
		}
		if !alwaysWholeRun {
			r = seeds // only scoring seeds to draw: the header and fragment states suffice
		}
	}
	if r == nil {
		var err error
		if r, err = LoadRun(x.ctx, x.kv, task); err != nil {
			return false, err
		}
	}
	now := x.blk.TimeMs
	switch r.Status {
	case wire.StatusAwaiting:
		if now < r.PostedMs+r.spec.EnrollWindow() {
			return false, nil
		}
		if _, err := x.endUnstarted(r, CancelExpired); err != nil {
			return false, err
		}
		x.m.log.Info("run expired before it started", "task", task)
		return true, nil
	case wire.StatusRunning:
		// After a halt, the round's clock skips the time the chain was not
		// live: its deadline and the syncer turns move by the same amount.
		halted := shift > 0
		if halted {
			r.RoundMs += shift
		}
		// Challenges whose vote window passed end undecided.
		changed, err := x.expireChallenges(r)
		if err != nil {
			return false, err
		}
		changed = changed || halted
		// A scored run's fragments get their scoring randomness at the
		// first block at which they are due: after every record that can
		// be scored is in, so no trainer knows its batches when it submits.
		if r.Scorer != nil {
			for i, fs := range r.Fragments {
				if fs.ScoreSeed == nil && r.Due(fs, now) {
					seed := wire.ScoreSeed(x.blk.Hash, x.blk.Height, task, r.Round, uint64(i))
					fs.ScoreSeed = &seed
					changed = true
				}
			}
		}
		if now >= r.RoundMs+r.spec.RoundDeadline() && !r.AwaitingFinal {
			closed := false
			for i, fs := range r.Fragments {
				if fs.Closed || len(fs.Records) >= r.spec.Quorum {
					continue
				}
				fc := BaseCommit(r, i)
				// The chain closes it; the commit names the syncer whose turn it
				// was (a receipt lists every committer with its election entry).
				who, k := r.SyncerAt(now)
				fc.Syncer, fc.Ticket = who, uint64(k)
				fc.Status = wire.FragNoQuorum
				fc.Reason = fmt.Sprintf("round deadline passed with %d of K=%d submissions accepted", len(fs.Records), r.spec.Quorum)
				fc.Inputs = RecordInputs(fs.Records)
				momentum := fs.MomentumHash
				if err := x.closeFragment(r, i, fc); err != nil {
					return false, err
				}
				if err := x.recordCommit(r, i, fc, momentum, true, nil, nil); err != nil {
					return false, err
				}
				closed = true
			}
			if closed {
				if err := x.maybeCloseRound(r); err != nil {
					return false, err
				}
				changed = true
			}
		}
		// Rounds past their window with no challenge open become final.
		final, err := x.advanceFinality(r)
		if err != nil {
			return false, err
		}
		if !changed && !final {
			return false, nil
		}
		return true, x.putRun(r)
	default:
		// Not active any more: drop it from the index.
		x.del(KSMeta, activeKey(task))
		return true, nil
	}
}
