package chain

// light.go: a light client's chain (syncer.Chain without a replica). It
// follows headers with CometBFT's light package (skipping verification,
// trusting period, a primary and witnesses: full nodes' CometBFT RPC), reads
// state by proven queries checked against the app hash of a verified header,
// and writes by broadcasting transactions to the primary, taking each
// result only once the block results hash of a verified header proves it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dbm "github.com/cometbft/cometbft-db"
	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	"github.com/cometbft/cometbft/light"
	"github.com/cometbft/cometbft/light/provider"
	lighthttp "github.com/cometbft/cometbft/light/provider/http"
	lightdb "github.com/cometbft/cometbft/light/store/db"
	cmtcrypto "github.com/cometbft/cometbft/proto/tendermint/crypto"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	rpchttp "github.com/cometbft/cometbft/rpc/client/http"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	"github.com/cometbft/cometbft/types"
	ics23 "github.com/cosmos/ics23/go"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Light client defaults.
const (
	// DefaultTrustingPeriod is how long a verified header is trusted to
	// verify later ones (CometBFT's light client: well under the unbonding
	// period of a chain whose validators can change; ours never do).
	DefaultTrustingPeriod = 168 * time.Hour
	// maxScanKeys bounds a proven scan (one proven query per key).
	maxScanKeys = 100_000
	// lightPoll is how often the light client asks its primary for a new
	// header.
	lightPoll = 500 * time.Millisecond
	// lightWitnessRetry is how long the light client runs without
	// witnesses before it asks them again.
	lightWitnessRetry = 30 * time.Second
	// lightPrimaryRetry is how long header updates may keep failing before
	// the light client rebuilds its providers around a primary that answers
	// (the configured primary may be down for good).
	lightPrimaryRetry = 5 * time.Second
)

// LightOptions configure StartLight.
type LightOptions struct {
	// Genesis is the network's genesis (pinned or trusted by the caller):
	// its chain id and, without a trust height, its validator set are the
	// trust root.
	Genesis *types.GenesisDoc
	// Primary is a full node's CometBFT RPC (http://host:port): headers,
	// proofs and broadcasts go to it.
	Primary string
	// Witnesses are other full nodes' CometBFT RPCs that every header the
	// primary gives is cross-checked with. None: the primary is its own
	// witness (logged: a lying primary is then caught only by signatures).
	Witnesses []string
	// TrustHeight and TrustHash are an operator's trust root (a header the
	// operator knows). Zero: the primary's latest header, accepted only if
	// more than two thirds of the genesis validator set signed it (the
	// chain's application never changes its validators).
	TrustHeight int64
	TrustHash   []byte
	// TrustingPeriod: 0 is DefaultTrustingPeriod.
	TrustingPeriod time.Duration
	// CommitTimeout bounds how long a transaction's Wait waits for its
	// block (0: one minute).
	CommitTimeout time.Duration
	// Store is the directory of the trusted headers (LightStoreFile): a
	// start resumes from the last stored header still within the trusting
	// period instead of re-deriving trust. Empty: headers are kept in
	// memory only.
	Store string
	// StoreKeep is how many trusted headers the store keeps (0:
	// DefaultLightStoreKeep).
	StoreKeep int
	// GenesisHash is the network's genesis hash (GenesisHash of the
	// genesis file) the store is bound to; zero: that of Genesis encoded.
	GenesisHash wire.Hash
	Log         *slog.Logger

	// providers replace Primary/Witnesses (tests).
	primary   provider.Provider
	witnesses []provider.Provider
	rpc       lightRPC
}

// lightRPC is what the light client asks its primary besides headers.
type lightRPC interface {
	ABCIQueryWithOptions(ctx context.Context, path string, data cmtbytes.HexBytes, opts rpcclient.ABCIQueryOptions) (*ctypes.ResultABCIQuery, error)
	Broadcast(ctx context.Context, tx []byte) (code uint32, log string, err error)
	Tx(ctx context.Context, hash []byte) (*rpcTx, error)
	BlockTxs(ctx context.Context, height int64) (types.Txs, error)
	BlockResults(ctx context.Context, height int64) ([]*abci.ExecTxResult, error)
}

type rpcTx struct {
	Height int64
	Index  uint32
}

// httpRPC is lightRPC over a CometBFT RPC client.
type httpRPC struct{ *rpchttp.HTTP }

func (h httpRPC) Broadcast(ctx context.Context, tx []byte) (uint32, string, error) {
	r, err := h.HTTP.BroadcastTxSync(ctx, tx)
	if err != nil {
		return 0, "", err
	}
	return r.Code, r.Log, nil
}

func (h httpRPC) Tx(ctx context.Context, hash []byte) (*rpcTx, error) {
	r, err := h.HTTP.Tx(ctx, hash, false)
	if err != nil {
		return nil, err
	}
	return &rpcTx{Height: r.Height, Index: r.Index}, nil
}

func (h httpRPC) BlockTxs(ctx context.Context, height int64) (types.Txs, error) {
	r, err := h.HTTP.Block(ctx, &height)
	if err != nil {
		return nil, fmt.Errorf("block %d: %w", height, err)
	}
	if r.Block == nil {
		return nil, fmt.Errorf("block %d: none in the answer", height)
	}
	return r.Block.Txs, nil
}

func (h httpRPC) BlockResults(ctx context.Context, height int64) ([]*abci.ExecTxResult, error) {
	r, err := h.HTTP.BlockResults(ctx, &height)
	if err != nil {
		return nil, fmt.Errorf("block results %d: %w", height, err)
	}
	return r.TxsResults, nil
}

// failoverRPC asks the primary, and the witnesses in turn when it cannot be
// reached: every answer is checked against verified headers, so any full
// node serves as well as another.
type failoverRPC struct {
	log  *slog.Logger
	urls []string
	rpcs []lightRPC
	cur  atomic.Int32
}

// unreachable says whether err is a transport failure (the node is down),
// not an answer.
func unreachable(err error) bool {
	var ue *url.Error
	var ne net.Error
	return err != nil && (errors.As(err, &ue) || errors.As(err, &ne) || strings.Contains(err.Error(), "post failed"))
}

func failover[T any](f *failoverRPC, call func(lightRPC) (T, error)) (T, error) {
	var zero T
	var err error
	start := int(f.cur.Load())
	for i := range f.rpcs {
		k := (start + i) % len(f.rpcs)
		var v T
		if v, err = call(f.rpcs[k]); !unreachable(err) {
			if k != start && f.cur.CompareAndSwap(int32(start), int32(k)) {
				f.log.Warn("light client: reading from another full node", "was", f.urls[start], "now", f.urls[k])
			}
			return v, err
		}
	}
	return zero, err
}

func (f *failoverRPC) ABCIQueryWithOptions(ctx context.Context, path string, data cmtbytes.HexBytes, opts rpcclient.ABCIQueryOptions) (*ctypes.ResultABCIQuery, error) {
	return failover(f, func(r lightRPC) (*ctypes.ResultABCIQuery, error) {
		return r.ABCIQueryWithOptions(ctx, path, data, opts)
	})
}

func (f *failoverRPC) Broadcast(ctx context.Context, tx []byte) (uint32, string, error) {
	type res struct {
		code uint32
		log  string
	}
	r, err := failover(f, func(r lightRPC) (res, error) {
		c, l, err := r.Broadcast(ctx, tx)
		return res{c, l}, err
	})
	return r.code, r.log, err
}

func (f *failoverRPC) Tx(ctx context.Context, hash []byte) (*rpcTx, error) {
	return failover(f, func(r lightRPC) (*rpcTx, error) { return r.Tx(ctx, hash) })
}

func (f *failoverRPC) BlockTxs(ctx context.Context, height int64) (types.Txs, error) {
	return failover(f, func(r lightRPC) (types.Txs, error) { return r.BlockTxs(ctx, height) })
}

func (f *failoverRPC) BlockResults(ctx context.Context, height int64) ([]*abci.ExecTxResult, error) {
	return failover(f, func(r lightRPC) ([]*abci.ExecTxResult, error) { return r.BlockResults(ctx, height) })
}

// lightState is the state a light client reads: the state after height,
// whose app hash a verified header (of block height+1) carries.
type lightState struct {
	height  int64
	appHash wire.Hash
	block   machine.Block
}

// Light is syncer.Chain for a light client: no replica, no block replay.
type Light struct {
	lc      atomic.Pointer[light.Client]
	rebuild func(self bool) error
	// degraded: the primary is its own witness since every other one was
	// unreachable (since degradedAt).
	degraded   bool
	degradedAt time.Time
	rpc        lightRPC
	// noWalk: the full node answers no proven walks (an older version):
	// scans prove key by key.
	noWalk  atomic.Bool
	primary string
	timeout time.Duration
	log     *slog.Logger

	cur atomic.Pointer[lightState]

	mu      sync.Mutex
	changed chan struct{}
	lastErr error

	cancel context.CancelFunc
	done   chan struct{}

	// store keeps the verified headers on disk (nil: memory only); storeMu
	// guards it (apart from mu: a sync must not hold up readers).
	storeMu     sync.Mutex
	store       *lightStore
	storeLogged time.Time
}

// resumable is the stored trusted header a start resumes from, nil when
// trust is to be re-derived (no header stored, an operator's trust root not
// among them, the last one past the trusting period or not the genesis
// validators'), each case logged; an operator's trust root that the store
// contradicts is an error.
func resumable(o LightOptions, trust light.TrustOptions, stored []*types.LightBlock, now time.Time, log *slog.Logger) (*types.LightBlock, error) {
	if len(stored) == 0 {
		return nil, nil
	}
	latest := stored[len(stored)-1]
	if trust.Height != 0 {
		i := slices.IndexFunc(stored, func(lb *types.LightBlock) bool { return lb.Height == trust.Height })
		if i < 0 {
			log.Info("light client: the given trust root is not among the stored trusted headers: starting from it", "trust_height", trust.Height,
				"stored", fmt.Sprintf("%d..%d", stored[0].Height, latest.Height))
			return nil, nil
		}
		if !bytes.Equal(stored[i].Hash(), trust.Hash) {
			return nil, fmt.Errorf("light client: the trust root %d %X contradicts the stored trusted header of that height (%X): one of them is not this chain's header",
				trust.Height, trust.Hash, stored[i].Hash())
		}
	}
	if _, err := VerifySignedHeader(o.Genesis, latest.SignedHeader, latest.Height-1); err != nil {
		log.Warn("light client: the last stored trusted header is not signed by the genesis validators: re-deriving trust as at a first start", "height", latest.Height, "err", err)
		return nil, nil
	}
	if exp := latest.Time.Add(o.TrustingPeriod); !exp.After(now) {
		log.Warn("light client: the last stored trusted header is older than the trusting period: re-deriving trust as at a first start",
			"height", latest.Height, "header_time", latest.Time, "trusting_period", o.TrustingPeriod)
		return nil, nil
	}
	return latest, nil
}

// persist stores verified headers (a failure is logged, at most once a
// minute: the client follows on from memory).
func (l *Light) persist(lbs ...*types.LightBlock) {
	if l.store == nil {
		return
	}
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if err := l.store.append(lbs...); err != nil && time.Since(l.storeLogged) > time.Minute {
		l.storeLogged = time.Now()
		l.log.Error("light client: storing verified headers failed; a restart may resume from an older one or re-derive trust", "err", err)
	}
}

// StartLight verifies the trust root, starts following headers and returns
// the light chain. Close stops it.
func StartLight(ctx context.Context, o LightOptions) (*Light, error) {
	if o.Genesis == nil {
		return nil, errors.New("light client: no genesis")
	}
	chainID := o.Genesis.ChainID
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.TrustingPeriod == 0 {
		o.TrustingPeriod = DefaultTrustingPeriod
	}
	if o.CommitTimeout == 0 {
		o.CommitTimeout = time.Minute
	}
	// providers makes the primary and the witnesses (with self: the primary
	// is its own last witness, the degraded mode when every other witness
	// is unreachable).
	providers := func(self bool) (provider.Provider, []provider.Provider, error) {
		if o.primary != nil {
			ws := o.witnesses
			if self {
				ws = append(append([]provider.Provider(nil), ws...), o.primary)
			}
			return o.primary, ws, nil
		}
		// The primary is the first configured node (--light-primary, then
		// the witnesses in order) whose latest header answers; the others
		// are the witnesses. A primary that is down for good is so replaced
		// at the next rebuild instead of stalling the client.
		all := []string{o.Primary}
		for _, u := range o.Witnesses {
			if !slices.Contains(all, u) {
				all = append(all, u)
			}
		}
		first := 0
		for i, u := range all {
			c, err := lighthttp.New(chainID, u)
			if err != nil {
				return nil, nil, fmt.Errorf("light client: %s: %w", u, err)
			}
			pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = c.LightBlock(pctx, 0)
			cancel()
			if err == nil {
				first = i
				break
			}
		}
		primaryURL := all[first]
		p, err := lighthttp.New(chainID, primaryURL)
		if err != nil {
			return nil, nil, fmt.Errorf("light client: primary %s: %w", primaryURL, err)
		}
		urls := append(append([]string(nil), all[:first]...), all[first+1:]...)
		if len(urls) == 0 || self {
			urls = append(urls, primaryURL)
		}
		var ws []provider.Provider
		for _, u := range urls {
			w, err := lighthttp.New(chainID, u)
			if err != nil {
				return nil, nil, fmt.Errorf("light client: witness %s: %w", u, err)
			}
			ws = append(ws, w)
		}
		return p, ws, nil
	}
	rpc := o.rpc
	if o.primary == nil {
		if o.Primary == "" {
			return nil, errors.New("light client: no primary (a full node's CometBFT RPC, http://host:port)")
		}
		if len(o.Witnesses) == 0 {
			log.Warn("light client: no witnesses given: the primary is its own witness, so a primary that lies about headers is caught by the validators' signatures alone (give --light-witnesses)", "primary", o.Primary)
		}
		fo := &failoverRPC{log: log}
		for _, u := range append([]string{o.Primary}, o.Witnesses...) {
			if slices.Contains(fo.urls, u) {
				continue
			}
			c, err := rpchttp.NewWithTimeout(u, "/websocket", 30)
			if err != nil {
				return nil, fmt.Errorf("light client: %s: %w", u, err)
			}
			fo.urls, fo.rpcs = append(fo.urls, u), append(fo.rpcs, httpRPC{c})
		}
		rpc = fo
	}
	primary, witnesses, err := providers(false)
	if err != nil {
		return nil, err
	}
	trust := light.TrustOptions{Period: o.TrustingPeriod, Height: o.TrustHeight, Hash: o.TrustHash}
	var ls *lightStore
	var resume *types.LightBlock
	var stored []*types.LightBlock
	if o.Store != "" {
		gh := o.GenesisHash
		if gh == (wire.Hash{}) {
			raw, err := cmtjson.Marshal(o.Genesis)
			if err != nil {
				return nil, fmt.Errorf("light client: genesis: %w", err)
			}
			if gh, err = GenesisHash(raw); err != nil {
				return nil, fmt.Errorf("light client: %w", err)
			}
		}
		if ls, stored, err = openLightStore(o.Store, lightStoreHead{chainID: chainID, genesis: gh}, o.StoreKeep, log); err != nil {
			return nil, err
		}
		if resume, err = resumable(o, trust, stored, time.Now(), log); err != nil {
			ls.Close()
			return nil, err
		}
		if resume == nil && len(stored) > 0 {
			ls.recs, ls.last = nil, 0 // trust is re-derived: the new root starts the file again
			if err := ls.rewrite(); err != nil {
				return nil, err
			}
		}
		defer func() {
			if ls != nil {
				ls.Close()
			}
		}()
	}
	var lc *light.Client
	store := lightdb.New(dbm.NewMemDB(), "light")
	opts := []light.Option{light.Logger(slogAdapter{log.With("component", "light")}), light.MaxRetryAttempts(3)}
	degraded := false
	if resume != nil {
		// Resume from the stored trusted headers: nothing is asked of the
		// primary until the first update.
		for _, lb := range stored {
			if err := store.SaveLightBlock(lb); err != nil {
				return nil, fmt.Errorf("light client: stored header %d: %w", lb.Height, err)
			}
		}
		if lc, err = light.NewClientFromTrustedStore(chainID, o.TrustingPeriod, primary, witnesses, store, opts...); err != nil {
			return nil, fmt.Errorf("light client: resuming from the stored header %d: %w", resume.Height, err)
		}
		trust.Height, trust.Hash = resume.Height, resume.Hash()
		log.Info("light client: resuming from its stored trusted header", "height", resume.Height, "hash", resume.Hash(), "age", time.Since(resume.Time).Round(time.Second), "file", ls.path)
	} else if trust.Height == 0 {
		lb, err := primary.LightBlock(ctx, 0)
		if err != nil {
			return nil, fmt.Errorf("light client: latest header from the primary %s: %w", primary, err)
		}
		if _, err := VerifySignedHeader(o.Genesis, lb.SignedHeader, lb.Height-1); err != nil {
			return nil, fmt.Errorf("light client: the primary's latest header is not the genesis validators': %w", err)
		}
		trust.Height, trust.Hash = lb.Height, lb.Hash()
	}
	if resume == nil {
		lc, err = light.NewClient(ctx, chainID, trust, primary, witnesses, store, opts...)
	}
	if errors.Is(err, light.ErrNoWitnesses) || errors.Is(err, light.ErrFailedHeaderCrossReferencing) {
		// No witness answered: start with the primary as its own witness.
		log.Warn("light client: no witness reachable: headers are checked by the validators' signatures alone until one is back")
		if primary, witnesses, err = providers(true); err == nil {
			lc, err = light.NewClient(ctx, chainID, trust, primary, witnesses, store, opts...)
		}
		degraded = true
	}
	if err != nil {
		return nil, fmt.Errorf("light client: trust root at height %d: %w", trust.Height, err)
	}
	l := &Light{rpc: rpc, primary: fmt.Sprint(primary), timeout: o.CommitTimeout, log: log, changed: make(chan struct{}), done: make(chan struct{}), store: ls}
	l.lc.Store(lc)
	l.degraded, l.degradedAt = degraded, time.Now()
	l.rebuild = func(self bool) error {
		p, ws, err := providers(self)
		if err != nil {
			return err
		}
		c, err := light.NewClientFromTrustedStore(chainID, o.TrustingPeriod, p, ws, store, opts...)
		if err != nil {
			return err
		}
		l.lc.Store(c)
		return nil
	}
	lb, err := lc.TrustedLightBlock(trust.Height)
	if err != nil {
		return nil, fmt.Errorf("light client: %w", err)
	}
	if err := l.adopt(ctx, lb); err != nil {
		return nil, err
	}
	ls = nil // the light client's now (closed by Close)
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	go l.follow(fctx)
	log.Info("light client following headers", "chain_id", chainID, "primary", fmt.Sprint(primary), "witnesses", len(witnesses), "trusted_height", trust.Height)
	return l, nil
}

// Close stops following headers.
func (l *Light) Close() error {
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
	if l.store != nil {
		l.storeMu.Lock()
		l.store.Close()
		l.storeMu.Unlock()
	}
	return l.lc.Load().Cleanup()
}

// Height is the height of the state the light client reads (0: none yet).
func (l *Light) Height() int64 {
	if s := l.cur.Load(); s != nil {
		return s.height
	}
	return 0
}

// Err is the last header update's failure (nil after a success).
func (l *Light) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// follow asks the primary for newer headers until ctx ends.
func (l *Light) follow(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(lightPoll)
	defer t.Stop()
	var logged, failing time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lb, err := l.lc.Load().Update(ctx, time.Now())
		switch {
		case errors.Is(err, light.ErrNoWitnesses) || errors.Is(err, light.ErrFailedHeaderCrossReferencing):
			// Every witness was unreachable (the light package drops them):
			// the primary becomes its own witness until they are back.
			if rerr := l.rebuild(true); rerr == nil {
				if !l.degraded {
					l.log.Warn("light client: no witness reachable: headers are checked by the validators' signatures alone until one is back")
				}
				l.degraded, l.degradedAt = true, time.Now()
				lb, err = l.lc.Load().Update(ctx, time.Now())
			}
		case l.degraded && time.Since(l.degradedAt) > lightWitnessRetry:
			// Try the witnesses again (also when the update failed: the
			// primary may be the node that went away).
			if rerr := l.rebuild(false); rerr == nil {
				l.degraded = false
				failing = time.Time{}
				lb, err = l.lc.Load().Update(ctx, time.Now())
			}
		case err != nil && !failing.IsZero() && time.Since(failing) > lightPrimaryRetry:
			// Updates keep failing: rebuild around a node that answers.
			if rerr := l.rebuild(l.degraded); rerr == nil {
				failing = time.Time{}
				lb, err = l.lc.Load().Update(ctx, time.Now())
			}
		}
		switch {
		case err == nil:
			failing = time.Time{}
		case failing.IsZero():
			failing = time.Now()
		}
		if err == nil && lb != nil {
			err = l.adopt(ctx, lb)
		}
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		if err != nil && ctx.Err() == nil && time.Since(logged) > time.Minute {
			logged = time.Now()
			l.log.Error("light client: header update refused; reads stay at the last verified height", "height", l.Height(), "err", err)
		}
	}
}

// adopt makes the state after lb.Height-1 the one read: its app hash is
// lb's; the block (height, time, hash) is lb's parent, verified backwards.
func (l *Light) adopt(ctx context.Context, lb *types.LightBlock) error {
	if cur := l.cur.Load(); cur != nil && cur.height >= lb.Height-1 {
		return nil
	}
	if lb.Height < 2 {
		return nil // no committed state before block 1's header
	}
	prev, err := l.lc.Load().VerifyLightBlockAtHeight(ctx, lb.Height-1, time.Now())
	if err != nil {
		return fmt.Errorf("light client: header %d: %w", lb.Height-1, err)
	}
	var ah wire.Hash
	if len(lb.AppHash) != len(ah) {
		return fmt.Errorf("light client: header %d: app hash of %d bytes", lb.Height, len(lb.AppHash))
	}
	copy(ah[:], lb.AppHash)
	l.persist(prev, lb)
	l.cur.Store(&lightState{height: lb.Height - 1, appHash: ah,
		block: machine.Block{Height: prev.Height, TimeMs: prev.Time.UnixMilli(), Hash: append([]byte(nil), prev.Hash()...)}})
	l.mu.Lock()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// Changed implements syncer.Chain: closed when a newer header is verified.
func (l *Light) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// View implements syncer.Chain: fn reads the state after the last verified
// height, every value by a proven query checked against that height's app
// hash.
func (l *Light) View(ctx context.Context, fn func(machine.View) error) error {
	s := l.cur.Load()
	if s == nil {
		return errors.New("light client: no verified header with committed state yet")
	}
	return fn(machine.View{KV: &provenKV{l: l, s: s, seen: map[string]proven{}}, Block: s.block})
}

// proven is one verified answer: the key's value (exists) or its absence,
// with the next key after it and that key's value (next nil: none).
type proven struct {
	value     []byte
	exists    bool
	next, nxv []byte
}

// prove reads key at s.height from the primary and checks the proof
// against s.appHash.
func (l *Light) prove(ctx context.Context, s *lightState, key []byte) (*proven, error) {
	res, err := l.rpc.ABCIQueryWithOptions(ctx, QueryState, key, rpcclient.ABCIQueryOptions{Height: s.height, Prove: true})
	if err != nil {
		return nil, fmt.Errorf("light client: proven read of %q from %s: %w", key, l.primary, err)
	}
	return checkProven(res.Response.Code, res.Response.Log, res.Response.Key, res.Response.Value, res.Response.Height, res.Response.ProofOps, key, s)
}

// checkProven checks a proven query's answer for key against s.
func checkProven(code uint32, log string, rkey, rvalue []byte, height int64, ops *cmtcrypto.ProofOps, key []byte, s *lightState) (*proven, error) {
	if code != CodeOK {
		return nil, fmt.Errorf("light client: proven read of %q at height %d refused by the full node: %w", key, s.height, &TxError{Code: code, Msg: log})
	}
	if height != s.height {
		return nil, fmt.Errorf("light client: asked for %q at height %d, the full node answered at height %d", key, s.height, height)
	}
	if !bytes.Equal(rkey, key) {
		return nil, fmt.Errorf("light client: asked for %q, the full node answered key %q", key, rkey)
	}
	if ops == nil || len(ops.Ops) != maxProofOps || len(ops.Ops[0].Data) > maxProofBytes {
		return nil, fmt.Errorf("light client: %q at height %d: the answer carries no well-formed state proof", key, s.height)
	}
	var p ics23.CommitmentProof
	if err := p.Unmarshal(ops.Ops[0].Data); err != nil {
		return nil, fmt.Errorf("light client: %q at height %d: %s: %w", key, s.height, ProofOpIAVL, err)
	}
	out := &proven{}
	var v []byte
	if p.GetExist() != nil {
		v = rvalue
		if v == nil {
			v = []byte{}
		}
		out.value, out.exists = v, true
	}
	if err := VerifyStateProof(ops, key, v, s.height, s.appHash); err != nil {
		return nil, fmt.Errorf("light client: %q: %w", key, err)
	}
	if np := p.GetNonexist(); !out.exists && np != nil && np.Right != nil {
		out.next, out.nxv = np.Right.Key, np.Right.Value
	}
	return out, nil
}

// provenKV is a machine.KV over proven queries at one verified height.
type provenKV struct {
	l    *Light
	s    *lightState
	mu   sync.Mutex
	seen map[string]proven
}

func (k *provenKV) get(ctx context.Context, key []byte) (*proven, error) {
	k.mu.Lock()
	p, ok := k.seen[string(key)]
	k.mu.Unlock()
	if ok {
		return &p, nil
	}
	q, err := k.l.prove(ctx, k.s, key)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if len(k.seen) < maxScanKeys {
		k.seen[string(key)] = *q
	}
	k.mu.Unlock()
	return q, nil
}

// Get implements machine.KV.
func (k *provenKV) Get(ctx context.Context, ks machine.Keyspace, key []byte) ([]byte, error) {
	p, err := k.get(ctx, StateKey(ks, key))
	if err != nil {
		return nil, err
	}
	if !p.exists {
		return nil, machine.ErrNotFound
	}
	return append([]byte(nil), p.value...), nil
}

// Scan implements machine.KV by walking the tree with proven queries: the
// prefix itself, then each key's immediate successor (key || 0x00); a
// non-existence proof proves its right neighbour adjacent, so no key in
// the range can be left out.
func (k *provenKV) Scan(ctx context.Context, ks machine.Keyspace, prefix []byte, fn func(key, value []byte) error) error {
	base := len(StateKey(ks, nil))
	full := StateKey(ks, prefix)
	x := full
	for n := 0; ; n++ {
		if n > maxScanKeys {
			return fmt.Errorf("light client: scan of %q: more than %d keys", full, maxScanKeys)
		}
		p, err := k.getScan(ctx, x, full)
		if err != nil {
			return err
		}
		key, val := x, p.value
		if !p.exists {
			if p.next == nil {
				return nil
			}
			key, val = p.next, p.nxv
		}
		if !bytes.HasPrefix(key, full) {
			return nil
		}
		if err := fn(key[base:], val); err != nil {
			return err
		}
		x = append(append(make([]byte, 0, len(key)+1), key...), 0)
	}
}

// getScan is get for a scan under prefix: a key not proven yet comes with
// the proofs of the walk's next keys (one query for up to maxWalkEntries
// keys: QueryStateWalk), or alone from a full node that answers no walks.
func (k *provenKV) getScan(ctx context.Context, x, prefix []byte) (*proven, error) {
	k.mu.Lock()
	p, ok := k.seen[string(x)]
	k.mu.Unlock()
	if ok {
		return &p, nil
	}
	if k.l.noWalk.Load() {
		return k.get(ctx, x)
	}
	es, err := k.l.walk(ctx, k.s, prefix, x)
	if errors.Is(err, errNoWalk) {
		if !k.l.noWalk.Swap(true) {
			k.l.log.Warn("light client: the full node answers no proven walks (an older version): scans cost one proven query a key", "node", k.l.primary, "err", err)
		}
		return k.get(ctx, x)
	}
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	for _, e := range es {
		if len(k.seen) < maxScanKeys {
			k.seen[string(e.key)] = *e.p
		}
	}
	k.mu.Unlock()
	return es[0].p, nil
}

// walk asks for the proven walk under prefix from x at s.height.
func (l *Light) walk(ctx context.Context, s *lightState, prefix, x []byte) ([]walkEntry, error) {
	res, err := l.rpc.ABCIQueryWithOptions(ctx, QueryStateWalk, EncodeWalkRequest(prefix, x), rpcclient.ABCIQueryOptions{Height: s.height, Prove: true})
	if err != nil {
		return nil, fmt.Errorf("light client: proven walk from %q from %s: %w", x, l.primary, err)
	}
	r := res.Response
	if r.Code == CodeInvalid {
		return nil, fmt.Errorf("%w: %s", errNoWalk, r.Log)
	}
	return checkWalk(r.Code, r.Log, r.Key, r.Height, r.ProofOps, prefix, x, s)
}

// Commit implements machine.KV: a light client's state is read-only.
func (k *provenKV) Commit(context.Context, *machine.Batch) error {
	return errors.New("light client: the verified state is read-only (writes are transactions)")
}

// Close implements machine.KV.
func (k *provenKV) Close() error { return nil }

// Submit implements syncer.Chain: the transaction goes to the primary's
// mempool; its result is taken from the primary's block results once
// verified headers prove them.
func (l *Light) Submit(ctx context.Context, tx []byte) (machine.Pending, error) {
	h := types.Tx(tx).Hash()
	code, msg, err := l.rpc.Broadcast(ctx, tx)
	if err != nil {
		if isTxInCache(err) {
			return nil, Refusal(CodeNonce, fmt.Sprintf("replayed transaction %X: these exact bytes were already submitted (they are in a block or waiting in a mempool); sign a new request with a new nonce", h[:8]))
		}
		return nil, fmt.Errorf("broadcast to the chain (%s): %w", l.primary, err)
	}
	if code != CodeOK {
		return nil, Refusal(code, msg)
	}
	return &lightPending{l: l, hash: h}, nil
}

type lightPending struct {
	l    *Light
	hash []byte
}

// Wait implements machine.Pending: it polls the primary for the
// transaction until its block and the next are verified, then checks the
// block's transactions against the verified header's data hash and the
// results against the next header's last-results hash.
func (p *lightPending) Wait(ctx context.Context) (*machine.TxResult, error) {
	ctx, cancel := context.WithTimeout(ctx, p.l.timeout)
	defer cancel()
	var last error
	for {
		changed := p.l.Changed()
		r, err := p.l.verifiedResult(ctx, p.hash)
		if err == nil || errors.Is(err, errRefusedTx) {
			var te *TxError
			if errors.As(err, &te) {
				return nil, te
			}
			return r, err
		}
		if errors.Is(err, errForged) {
			return nil, err
		}
		last = err
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("the transaction was not committed within %s (is the chain making blocks?): %v", p.l.timeout, last)
			}
			return nil, fmt.Errorf("waiting for the transaction's block: %w", ctx.Err())
		case <-changed:
		case <-time.After(lightPoll):
		}
	}
}

var (
	errRefusedTx = errors.New("refused in its block")
	errForged    = errors.New("light client: the full node's answer does not match the verified headers")
)

// verifiedResult is a committed transaction's result, proven by verified
// headers.
func (l *Light) verifiedResult(ctx context.Context, hash []byte) (*machine.TxResult, error) {
	t, err := l.rpc.Tx(ctx, hash)
	if err != nil {
		return nil, err
	}
	h := t.Height
	if cur := l.cur.Load(); cur == nil || cur.height < h {
		return nil, fmt.Errorf("block %d is not verified yet", h+1)
	}
	now := time.Now()
	hb, err := l.lc.Load().VerifyLightBlockAtHeight(ctx, h, now)
	if err != nil {
		return nil, fmt.Errorf("header %d: %w", h, err)
	}
	nb, err := l.lc.Load().VerifyLightBlockAtHeight(ctx, h+1, now)
	if err != nil {
		return nil, fmt.Errorf("header %d: %w", h+1, err)
	}
	txs, err := l.rpc.BlockTxs(ctx, h)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(txs.Hash(), hb.DataHash) {
		return nil, fmt.Errorf("%w: block %d's transactions hash to %X, the header's data hash is %X", errForged, h, txs.Hash(), hb.DataHash)
	}
	if int(t.Index) >= len(txs) || !bytes.Equal(txs[t.Index].Hash(), hash) {
		return nil, fmt.Errorf("%w: transaction %X is not at index %d of block %d", errForged, hash, t.Index, h)
	}
	res, err := l.rpc.BlockResults(ctx, h)
	if err != nil {
		return nil, err
	}
	// The results hash covers each result's code, data and gas (not its
	// log, which is the full node's words for a refusal whose code is
	// proven).
	if rh := types.NewResults(res).Hash(); !bytes.Equal(rh, nb.LastResultsHash) {
		return nil, fmt.Errorf("%w: block %d's results hash to %X, header %d says %X", errForged, h, rh, h+1, nb.LastResultsHash)
	}
	if len(res) != len(txs) {
		return nil, fmt.Errorf("%w: block %d has %d transactions and %d results", errForged, h, len(txs), len(res))
	}
	r := res[t.Index]
	if r.Code != CodeOK {
		return nil, fmt.Errorf("%w: %w", errRefusedTx, Refusal(r.Code, r.Log))
	}
	return &machine.TxResult{Height: h, Data: r.Data}, nil
}

// SealedRun implements audit.RunAnchor from proven state: the run's sealed
// run root and election record, at the light client's verified height.
func (l *Light) SealedRun(ctx context.Context, task string) (*audit.SealedRun, error) {
	var out *audit.SealedRun
	err := l.View(ctx, func(v machine.View) error {
		var err error
		if out, err = machine.SealedRunOf(ctx, v.KV, task); err == nil {
			out.Height = v.Block.Height
		}
		return err
	})
	return out, err
}

// CheckReceipt is Client.CheckReceipt with every value proven against a
// light-verified header: the receipt verifies on its own, its run is sealed
// with the same run root, its syncers are the election's entrants at their
// tickets, and it is signed by the syncer whose signature the chain took.
func (l *Light) CheckReceipt(ctx context.Context, receipt []byte) (*audit.SealedRun, error) {
	run, err := audit.CheckReceiptAgainst(ctx, l, receipt)
	if err != nil {
		return run, err
	}
	rc, err := audit.ParseReceipt(receipt)
	if err != nil {
		return run, err
	}
	var onChain wire.Receipt
	err = l.View(ctx, func(v machine.View) error {
		raw, err := v.KV.Get(ctx, machine.KSReceipts, machine.RunKey(rc.TaskID))
		if errors.Is(err, machine.ErrNotFound) {
			return fmt.Errorf("run %s is sealed but the chain holds no signed receipt for it yet (height %d)", rc.TaskID, v.Block.Height)
		}
		if err != nil {
			return err
		}
		return json.Unmarshal(raw, &onChain)
	})
	if err != nil {
		return run, err
	}
	if onChain.SyncerDID != rc.SyncerDID {
		return run, fmt.Errorf("receipt is signed by %s; the chain took run %s's receipt signature from its syncer %s", rc.SyncerDID, rc.TaskID, onChain.SyncerDID)
	}
	return run, nil
}
