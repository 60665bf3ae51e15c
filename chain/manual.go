package chain

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Manual is a syncer.Chain that drives an App directly, without CometBFT:
// every Broadcast is checked and committed in a block of its own, and
// Block makes a block when the caller says so, at the time its clock gives.
// It is the real application with a sequencer in place of consensus, for
// tests that need a controllable clock (a --dev node runs CometBFT).
type Manual struct {
	mu     sync.Mutex
	app    *App
	clock  func() time.Time
	height int64
	lastMs int64
}

// ManualOptions configure NewManual.
type ManualOptions struct {
	// Genesis is written when kv holds no chain yet.
	Genesis *GenesisState
	// Clock gives each block's time (time.Now when nil); a block's time is
	// never before the previous block's (equal times are allowed, so a test
	// clock that stands still gives blocks at exactly its time).
	Clock func() time.Time
	App   AppOptions
	// Validators are the genesis consensus validators (ValidatorUpdate):
	// the keys that vote on challenges. The manual sequencer itself needs
	// none.
	Validators []abci.ValidatorUpdate
}

// NewManual opens an App over kv (resuming its chain, or writing the
// genesis at height 0) driven by a manual sequencer.
func NewManual(ctx context.Context, kv machine.KV, opts ManualOptions) (*Manual, error) {
	app, err := NewApp(ctx, kv, opts.App)
	if err != nil {
		return nil, err
	}
	m := &Manual{app: app, clock: opts.Clock}
	if m.clock == nil {
		m.clock = time.Now
	}
	h, _ := app.LastCommit()
	if h > 0 {
		m.height, m.lastMs = h, app.block.TimeMs
		return m, nil
	}
	g := opts.Genesis
	if g == nil {
		g = &GenesisState{}
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	now := m.clock()
	if _, err := app.InitChain(ctx, &abci.RequestInitChain{ChainId: "tenzro-manual", Time: now, InitialHeight: 1, AppStateBytes: raw, Validators: opts.Validators}); err != nil {
		return nil, err
	}
	m.lastMs = now.UnixMilli()
	// Commit the genesis with an empty first block.
	if _, err := m.block(ctx, nil); err != nil {
		return nil, err
	}
	return m, nil
}

// App is the application the sequencer drives.
func (m *Manual) App() *App { return m.app }

// View implements syncer.Chain.
func (m *Manual) View(ctx context.Context, fn func(machine.View) error) error {
	return m.app.View(ctx, fn)
}

// Changed implements syncer.Chain.
func (m *Manual) Changed() <-chan struct{} { return m.app.Changed() }

// Submit implements syncer.Chain: CheckTx, then a block holding only tx.
func (m *Manual) Submit(ctx context.Context, tx []byte) (machine.Pending, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.app.CheckTx(ctx, &abci.RequestCheckTx{Tx: tx, Type: abci.CheckTxType_New})
	if err != nil {
		return nil, err
	}
	if res.Code != CodeOK {
		return nil, Refusal(res.Code, res.Log)
	}
	outs, err := m.block(ctx, [][]byte{tx})
	if err != nil {
		return nil, err
	}
	return done(outs[0]), nil
}

// done is a Pending whose block has committed.
type done TxOutcome

func (d done) Wait(context.Context) (*machine.TxResult, error) {
	if d.Code != CodeOK {
		return nil, Refusal(d.Code, d.Log)
	}
	return &machine.TxResult{Height: d.Height, Data: d.Data}, nil
}

// Block commits a block of txs (none: an empty block, which runs the
// timers at the clock's time) and returns each transaction's outcome.
// Transactions are not checked first: a block may hold anything.
func (m *Manual) Block(ctx context.Context, txs ...[]byte) ([]TxOutcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.block(ctx, txs)
}

func (m *Manual) block(ctx context.Context, txs [][]byte) ([]TxOutcome, error) {
	t := m.clock().UnixMilli()
	if t < m.lastMs {
		t = m.lastMs
	}
	h := m.height + 1
	c := sha256.New()
	c.Write(binary.BigEndian.AppendUint64(nil, uint64(h)))
	c.Write(binary.BigEndian.AppendUint64(nil, uint64(t)))
	for _, tx := range txs {
		x := sha256.Sum256(tx)
		c.Write(x[:])
	}
	res, err := m.app.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: h, Time: time.UnixMilli(t).UTC(), Txs: txs, Hash: c.Sum(nil)})
	if err != nil {
		return nil, fmt.Errorf("manual chain: block %d: %w", h, err)
	}
	if _, err := m.app.Commit(ctx, &abci.RequestCommit{}); err != nil {
		return nil, fmt.Errorf("manual chain: commit %d: %w", h, err)
	}
	m.height, m.lastMs = h, t
	outs := make([]TxOutcome, len(txs))
	for i, r := range res.TxResults {
		outs[i] = TxOutcome{Hash: sha256.Sum256(txs[i]), Height: h, Code: r.Code, Log: r.Log, Data: r.Data}
	}
	return outs, nil
}

// Height is the last committed height.
func (m *Manual) Height() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.height
}

// AppHash is the last committed app hash.
func (m *Manual) AppHash() wire.Hash {
	_, h := m.app.LastCommit()
	return h
}
