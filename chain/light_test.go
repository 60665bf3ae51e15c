package chain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	"github.com/cometbft/cometbft/light/provider"
	"github.com/cometbft/cometbft/light/provider/mock"
	cmtcrypto "github.com/cometbft/cometbft/proto/tendermint/crypto"
	cmtproto "github.com/cometbft/cometbft/proto/tendermint/types"
	cmtversion "github.com/cometbft/cometbft/proto/tendermint/version"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	"github.com/cometbft/cometbft/types"
	"github.com/cometbft/cometbft/version"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// lightChainID is the chain id of the light client tests' headers.
const lightChainID = "light-test"

// headerChain signs headers of heights 1..top with a validator set: the
// header of height h+1 carries appHash(h).
type headerChain struct {
	t       testing.TB
	vals    *types.ValidatorSet
	privs   []types.PrivValidator
	headers map[int64]*types.SignedHeader
	valsAt  map[int64]*types.ValidatorSet
}

func newHeaderChain(t testing.TB, vals *types.ValidatorSet, privs []types.PrivValidator, top int64, appHash func(h int64) []byte, tx func(h int64) (types.Txs, []byte)) *headerChain {
	t.Helper()
	c := &headerChain{t: t, vals: vals, privs: privs, headers: map[int64]*types.SignedHeader{}, valsAt: map[int64]*types.ValidatorSet{}}
	base := time.Now().Add(-time.Duration(top+5) * time.Second)
	var prev types.BlockID
	var lastResults []byte
	for h := int64(1); h <= top; h++ {
		hdr := &types.Header{
			Version: cmtversion.Consensus{Block: version.BlockProtocol}, ChainID: lightChainID, Height: h,
			Time: base.Add(time.Duration(h) * time.Second), LastBlockID: prev,
			ValidatorsHash: vals.Hash(), NextValidatorsHash: vals.Hash(), ConsensusHash: sum("consensus"),
			AppHash: appHash(h - 1), LastResultsHash: lastResults, ProposerAddress: vals.Proposer.Address,
			LastCommitHash: sum("commit"), DataHash: types.Txs(nil).Hash(), EvidenceHash: sum("evidence"),
		}
		lastResults = nil
		if tx != nil {
			if txs, results := tx(h); txs != nil {
				hdr.DataHash, lastResults = txs.Hash(), results
			}
		}
		id := types.BlockID{Hash: hdr.Hash(), PartSetHeader: types.PartSetHeader{Total: 1, Hash: sum(fmt.Sprint("parts", h))}}
		vs := types.NewVoteSet(lightChainID, h, 0, cmtproto.PrecommitType, vals)
		ec, err := types.MakeExtCommit(id, h, 0, vs, privs, hdr.Time.Add(time.Second), false)
		if err != nil {
			t.Fatal(err)
		}
		c.headers[h] = &types.SignedHeader{Header: hdr, Commit: ec.ToCommit()}
		c.valsAt[h] = vals
		prev = id
	}
	return c
}

func sum(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

func (c *headerChain) provider(id string) provider.Provider {
	_ = id
	return mock.New(lightChainID, c.headers, c.valsAt)
}

// upTo is c's headers of heights up to h (a primary that has not seen the
// later ones yet).
func (c *headerChain) upTo(h int64) map[int64]*types.SignedHeader {
	out := map[int64]*types.SignedHeader{}
	for k, v := range c.headers {
		if k <= h {
			out[k] = v
		}
	}
	return out
}

func (c *headerChain) genesis() *types.GenesisDoc {
	g := &types.GenesisDoc{ChainID: lightChainID}
	for _, v := range c.vals.Validators {
		g.Validators = append(g.Validators, types.GenesisValidator{Address: v.Address, PubKey: v.PubKey, Power: v.VotingPower})
	}
	return g
}

// appRPC answers proven queries from an App (the full node), through an
// optional tamper.
type appRPC struct {
	app    *App
	tamper func(*abci.ResponseQuery)
	tx     *rpcTx
	txs    types.Txs
	res    []*abci.ExecTxResult
}

func (r *appRPC) ABCIQueryWithOptions(ctx context.Context, path string, data cmtbytes.HexBytes, opts rpcclient.ABCIQueryOptions) (*ctypes.ResultABCIQuery, error) {
	res, err := r.app.Query(ctx, &abci.RequestQuery{Path: path, Data: data, Height: opts.Height, Prove: opts.Prove})
	if err != nil {
		return nil, err
	}
	if r.tamper != nil {
		r.tamper(res)
	}
	return &ctypes.ResultABCIQuery{Response: *res}, nil
}

func (r *appRPC) Broadcast(context.Context, []byte) (uint32, string, error) { return CodeOK, "", nil }

func (r *appRPC) Tx(context.Context, []byte) (*rpcTx, error) {
	if r.tx == nil {
		return nil, errors.New("tx not found")
	}
	return r.tx, nil
}

func (r *appRPC) BlockTxs(context.Context, int64) (types.Txs, error) { return r.txs, nil }

func (r *appRPC) BlockResults(context.Context, int64) ([]*abci.ExecTxResult, error) {
	return r.res, nil
}

// appHashAt is the app hash of the state after height h, from the app's
// recent heights (another value for older ones: no test reads them).
func appHashAt(a *App) func(h int64) []byte {
	return func(h int64) []byte {
		for _, p := range a.recent {
			if p.height == h {
				ah := AppHash(p.height, immutableRoot(p.tree), p.log.size, p.log.root)
				return ah[:]
			}
		}
		return sum(fmt.Sprint("old", h))
	}
}

// lightWorld is a played history on an App (the full node) and a header
// chain signed over its app hashes.
func lightWorld(t *testing.T) (*harness, *world, *headerChain) {
	t.Helper()
	w := newWorld(t)
	h := newHarness(t, "")
	h.genesis(w.genesis)
	w.play(t, h)
	height, _ := h.app.LastCommit()
	vals, privs := types.RandValidatorSet(4, 10)
	return h, w, newHeaderChain(t, vals, privs, height+1, appHashAt(h.app), nil)
}

func startTestLight(t *testing.T, c *headerChain, rpc lightRPC, primary provider.Provider, witnesses ...provider.Provider) (*Light, error) {
	t.Helper()
	if len(witnesses) == 0 {
		witnesses = []provider.Provider{c.provider("witness")}
	}
	l, err := StartLight(context.Background(), LightOptions{Genesis: c.genesis(), Log: quiet, primary: primary, witnesses: witnesses, rpc: rpc,
		CommitTimeout: 5 * time.Second})
	if err == nil {
		t.Cleanup(func() { l.Close() })
	}
	return l, err
}

// TestLightReadsByProofs: a light client trusts the latest header signed by
// the genesis validators, and every read through its machine.KV (a Get, an
// absent key, prefix scans over runs, candidates and balances) gives what
// the full node's own state gives, each value proven against the header's
// app hash; the block it reads at is the header's parent.
func TestLightReadsByProofs(t *testing.T) {
	h, w, c := lightWorld(t)
	l, err := startTestLight(t, c, &appRPC{app: h.app}, c.provider("primary"))
	if err != nil {
		t.Fatal(err)
	}
	height, _ := h.app.LastCommit()
	if l.Height() != height {
		t.Fatalf("light client reads at height %d, the full node's last is %d", l.Height(), height)
	}
	type kv struct{ k, v string }
	scan := func(v machine.View, ks machine.Keyspace, prefix string) []kv {
		var out []kv
		if err := v.KV.Scan(context.Background(), ks, []byte(prefix), func(k, val []byte) error {
			out = append(out, kv{string(k), string(val)})
			return nil
		}); err != nil {
			t.Fatalf("scan %s %q: %v", ks, prefix, err)
		}
		return out
	}
	type read struct {
		ks     machine.Keyspace
		prefix string
	}
	reads := []read{{machine.KSRuns, ""}, {machine.KSMeta, "cand/"}, {machine.KSLedger, "bal/"}, {machine.KSTranscript, "c/" + w.task + "/"}, {machine.KSMeta, "no-such-prefix/"}}
	want := map[read][]kv{}
	var wantBal []byte
	if err := h.app.View(context.Background(), func(v machine.View) error {
		for _, r := range reads {
			want[r] = scan(v, r.ks, r.prefix)
		}
		wantBal, err = v.KV.Get(context.Background(), machine.KSLedger, []byte("bal/did:"+w.t2.DID.String()))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(want[reads[0]]) == 0 || len(want[reads[1]]) == 0 || len(want[reads[2]]) < 5 {
		t.Fatalf("the played history has too little to scan: %d runs, %d candidates, %d balances", len(want[reads[0]]), len(want[reads[1]]), len(want[reads[2]]))
	}
	if err := l.View(context.Background(), func(v machine.View) error {
		if v.Block.Height != height || !bytes.Equal(v.Block.Hash, c.headers[height].Hash()) || v.Block.TimeMs != c.headers[height].Time.UnixMilli() {
			t.Fatalf("light view block %+v, want header %d", v.Block, height)
		}
		got, err := v.KV.Get(context.Background(), machine.KSLedger, []byte("bal/did:"+w.t2.DID.String()))
		if err != nil || !bytes.Equal(got, wantBal) {
			t.Fatalf("proven balance %q %v, the full node's %q", got, err, wantBal)
		}
		if _, err := v.KV.Get(context.Background(), machine.KSLedger, []byte("bal/did:nobody")); !errors.Is(err, machine.ErrNotFound) {
			t.Fatalf("absent key: %v, want ErrNotFound", err)
		}
		for _, r := range reads {
			if got := scan(v, r.ks, r.prefix); fmt.Sprint(got) != fmt.Sprint(want[r]) {
				t.Fatalf("proven scan %s %q: %d keys %v, the full node's %d %v", r.ks, r.prefix, len(got), got, len(want[r]), want[r])
			}
		}
		if err := v.KV.Commit(context.Background(), &machine.Batch{}); err == nil {
			t.Fatal("a light client's state took a write")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The machine's own read functions run unchanged over it.
	if err := l.View(context.Background(), func(v machine.View) error {
		r, err := machine.LoadRun(context.Background(), v.KV, w.task)
		if err != nil || r.TaskSpec().TaskID != w.task {
			t.Fatalf("LoadRun through the light client: %v", err)
		}
		tasks, err := machine.ActiveTasks(context.Background(), v.KV)
		_ = tasks
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestLightRefusals: a tampered proof, a value the proof does not prove, an
// answer at another height, a header signed by another validator set, a
// header whose app hash is not the state's, and a primary whose headers
// the witness contradicts are each refused with a precise error.
func TestLightRefusals(t *testing.T) {
	h, w, c := lightWorld(t)
	key := []byte("bal/did:" + w.t2.DID.String())
	get := func(l *Light) error {
		return l.View(context.Background(), func(v machine.View) error {
			_, err := v.KV.Get(context.Background(), machine.KSLedger, key)
			return err
		})
	}
	for _, tc := range []struct {
		name   string
		tamper func(*abci.ResponseQuery)
		want   string
	}{
		{"tampered proof", func(r *abci.ResponseQuery) {
			d := r.ProofOps.Ops[0].Data
			d[len(d)-3] ^= 0x55
		}, "state proof"},
		{"wrong value", func(r *abci.ResponseQuery) { r.Value = []byte("999999999") }, "does not prove"},
		{"tampered app-hash step", func(r *abci.ResponseQuery) {
			r.ProofOps.Ops[1].Data = bytes.Replace(r.ProofOps.Ops[1].Data, []byte(`"log_size":`), []byte(`"log_size":1`), 1)
		}, "the header says"},
		{"another height", func(r *abci.ResponseQuery) { r.Height-- }, "answered at height"},
		{"no proof", func(r *abci.ResponseQuery) { r.ProofOps = nil }, "no well-formed state proof"},
		{"another key", func(r *abci.ResponseQuery) { r.Key = []byte("ledger/bal/did:other") }, "answered key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := startTestLight(t, c, &appRPC{app: h.app, tamper: tc.tamper}, c.provider("primary"))
			if err != nil {
				t.Fatal(err)
			}
			if err := get(l); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("header signed by another validator set", func(t *testing.T) {
		vals, privs := types.RandValidatorSet(4, 10)
		height, _ := h.app.LastCommit()
		forged := newHeaderChain(t, vals, privs, height+1, appHashAt(h.app), nil)
		_, err := StartLight(context.Background(), LightOptions{Genesis: c.genesis(), Log: quiet, primary: forged.provider("primary"),
			witnesses: []provider.Provider{forged.provider("witness")}, rpc: &appRPC{app: h.app}})
		if err == nil || !strings.Contains(err.Error(), "is not the genesis validator set's") {
			t.Fatalf("got %v, want the genesis validator set refusal", err)
		}
	})

	t.Run("header whose app hash is not the state's", func(t *testing.T) {
		height, _ := h.app.LastCommit()
		wrong := newHeaderChain(t, c.vals, c.privs, height+1, func(h int64) []byte { return sum(fmt.Sprint("other", h)) }, nil)
		l, err := startTestLight(t, wrong, &appRPC{app: h.app}, wrong.provider("primary"), wrong.provider("witness"))
		if err != nil {
			t.Fatal(err)
		}
		if err := get(l); err == nil || !strings.Contains(err.Error(), "the header says") {
			t.Fatalf("got %v, want an app hash mismatch", err)
		}
	})

	t.Run("primary contradicted by a witness", func(t *testing.T) {
		height, _ := h.app.LastCommit()
		// The same validators sign a second history (a fork: a light client
		// attack): the primary serves it, the witness the real one.
		fork := newHeaderChain(t, c.vals, c.privs, height+1, func(h int64) []byte { return sum(fmt.Sprint("fork", h)) }, nil)
		_, err := startTestLight(t, c, &appRPC{app: h.app}, fork.provider("primary"), c.provider("witness"))
		if err == nil || !strings.Contains(err.Error(), "witness") {
			t.Fatalf("got %v, want a witness disagreement", err)
		}
		t.Logf("refused: %.300s", err)
	})
}

// TestLightTxResult: a committed transaction's result is taken only when
// the block's transactions hash to the verified header's data hash and the
// results to the next header's last-results hash; a full node that lies
// about the result (a refused transaction reported as accepted) is caught.
func TestLightTxResult(t *testing.T) {
	h, _, _ := lightWorld(t)
	height, _ := h.app.LastCommit()
	tx := types.Tx("a transaction")
	results := []*abci.ExecTxResult{{Code: CodeFunds, Log: "balance too low"}}
	vals, privs := types.RandValidatorSet(4, 10)
	c := newHeaderChain(t, vals, privs, height+1, appHashAt(h.app), func(hh int64) (types.Txs, []byte) {
		if hh == height {
			return types.Txs{tx}, types.NewResults(results).Hash()
		}
		return nil, nil
	})
	for _, tc := range []struct {
		name string
		res  []*abci.ExecTxResult
		txs  types.Txs
		want string
	}{
		{"honest", results, types.Txs{tx}, "balance too low"},
		{"result forged", []*abci.ExecTxResult{{Code: CodeOK}}, types.Txs{tx}, "results hash to"},
		{"transactions forged", results, types.Txs{tx, types.Tx("another")}, "transactions hash to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rpc := &appRPC{app: h.app, tx: &rpcTx{Height: height}, txs: tc.txs, res: tc.res}
			l, err := startTestLight(t, c, rpc, c.provider("primary"))
			if err != nil {
				t.Fatal(err)
			}
			p, err := l.Submit(context.Background(), tx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Wait(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if tc.name == "honest" && machine.KindOf(err) == machine.KindInternal {
				t.Fatalf("the block's refusal is not a machine refusal: %v", err)
			}
		})
	}
}

// TestProvenQueryAtRecentHeights: the app answers proven queries at any
// of its recent heights (each against that height's app hash) and refuses
// older ones precisely.
func TestProvenQueryAtRecentHeights(t *testing.T) {
	h, w, _ := lightWorld(t)
	height, _ := h.app.LastCommit()
	key := string(StateKey(machine.KSLedger, []byte("bal/did:"+w.t2.DID.String())))
	for _, at := range []int64{height, height - 1, height - 3} {
		res, err := h.app.Query(context.Background(), &abci.RequestQuery{Path: QueryState, Data: []byte(key), Height: at, Prove: true})
		if err != nil || res.Code != CodeOK || res.Height != at {
			t.Fatalf("height %d: %v %d %s (answered at %d)", at, err, res.Code, res.Log, res.Height)
		}
		var ah wire.Hash
		copy(ah[:], appHashAt(h.app)(at))
		if err := VerifyStateProof(res.ProofOps, res.Key, res.Value, at, ah); err != nil {
			t.Fatalf("height %d: %v", at, err)
		}
	}
	res, _ := h.app.Query(context.Background(), &abci.RequestQuery{Path: QueryState, Data: []byte(key), Height: height - recentProvable - 5, Prove: true})
	if height > recentProvable+5 && (res.Code != CodeInvalid || !strings.Contains(res.Log, "proven queries are served at heights")) {
		t.Fatalf("an old height: %d %s", res.Code, res.Log)
	}
	res, _ = h.app.Query(context.Background(), &abci.RequestQuery{Path: QueryState, Data: []byte(key), Height: height + 1, Prove: true})
	if res.Code != CodeInvalid {
		t.Fatalf("a future height: %d %s", res.Code, res.Log)
	}
}

// deadRPC is a full node that cannot be reached.
type deadRPC struct{}

var errDead = &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: errors.New("connection refused")}

func (deadRPC) ABCIQueryWithOptions(context.Context, string, cmtbytes.HexBytes, rpcclient.ABCIQueryOptions) (*ctypes.ResultABCIQuery, error) {
	return nil, errDead
}
func (deadRPC) Broadcast(context.Context, []byte) (uint32, string, error) { return 0, "", errDead }
func (deadRPC) Tx(context.Context, []byte) (*rpcTx, error)                { return nil, errDead }
func (deadRPC) BlockTxs(context.Context, int64) (types.Txs, error)        { return nil, errDead }
func (deadRPC) BlockResults(context.Context, int64) ([]*abci.ExecTxResult, error) {
	return nil, errDead
}

// TestLightFailover: when the primary cannot be reached, reads go to the
// next full node (answers are proven either way), which stays the one
// asked; an answer (a refusal) is not a reason to switch.
func TestLightFailover(t *testing.T) {
	h, w, c := lightWorld(t)
	fo := &failoverRPC{log: quiet, urls: []string{"dead", "alive"}, rpcs: []lightRPC{deadRPC{}, &appRPC{app: h.app}}}
	l, err := startTestLight(t, c, fo, c.provider("primary"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.View(context.Background(), func(v machine.View) error {
		_, err := v.KV.Get(context.Background(), machine.KSLedger, []byte("bal/did:"+w.t2.DID.String()))
		return err
	}); err != nil {
		t.Fatalf("read with the primary down: %v", err)
	}
	if fo.cur.Load() != 1 {
		t.Fatalf("the next read goes to node %d, want 1 (the reachable one)", fo.cur.Load())
	}
	all := &failoverRPC{log: quiet, urls: []string{"a", "b"}, rpcs: []lightRPC{deadRPC{}, deadRPC{}}}
	if _, err := all.Tx(context.Background(), []byte("x")); !errors.Is(err, errDead) {
		t.Fatalf("every node down: %v", err)
	}
	refusing := &failoverRPC{log: quiet, urls: []string{"a", "b"}, rpcs: []lightRPC{&appRPC{app: h.app}, deadRPC{}}}
	if _, err := refusing.Tx(context.Background(), []byte("x")); err == nil || errors.Is(err, errDead) || refusing.cur.Load() != 0 {
		t.Fatalf("an answer switched nodes: %v, now %d", err, refusing.cur.Load())
	}
}

// TestLightWithoutWitnesses: with every witness unreachable the light
// client still follows new headers, the primary being its own witness (the
// validators' signatures still checked), and reads by proofs.
func TestLightWithoutWitnesses(t *testing.T) {
	h, w, _ := lightWorld(t)
	top, _ := h.app.LastCommit()
	vals, privs := types.RandValidatorSet(4, 10)
	c := newHeaderChain(t, vals, privs, top+4, appHashAt(h.app), nil)
	early := c.upTo(top + 1)
	primary := mock.New(lightChainID, early, c.valsAt)
	l, err := startTestLight(t, c, &appRPC{app: h.app}, primary, mock.NewDeadMock(lightChainID))
	if err != nil {
		t.Fatalf("light client with its only witness down: %v", err)
	}
	if err := l.View(context.Background(), func(v machine.View) error {
		_, err := v.KV.Get(context.Background(), machine.KSLedger, []byte("bal/did:"+w.t2.DID.String()))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for k := top + 2; k <= top+4; k++ {
		primary.AddLightBlock(&types.LightBlock{SignedHeader: c.headers[k], ValidatorSet: vals})
	}
	waitLightHeight(t, l, top+3, "the light client with its witness down")
}

// waitLightHeight waits (a minute at most) until l reads at height h.
func waitLightHeight(t *testing.T, l *Light, h int64, who string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for l.Height() < h {
		if time.Now().After(deadline) {
			t.Fatalf("%s stays at height %d, want %d (last error %v)", who, l.Height(), h, l.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FuzzCheckProven: no answer from a full node panics the light client's
// check, and none proves anything against an app hash nobody can reach.
func FuzzCheckProven(f *testing.F) {
	f.Add([]byte{}, []byte("v"), []byte(`{"height":5,"log_size":0,"log_root":"0000000000000000000000000000000000000000000000000000000000000000"}`))
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00}, []byte(nil), []byte(`{}`))
	f.Fuzz(func(t *testing.T, proof, value, step []byte) {
		s := &lightState{height: 5, appHash: wire.Hash{1}}
		ops := &cmtcrypto.ProofOps{Ops: []cmtcrypto.ProofOp{{Type: ProofOpIAVL, Key: []byte("k"), Data: proof}, {Type: ProofOpAppHash, Data: step}}}
		if p, err := checkProven(CodeOK, "", []byte("k"), value, 5, ops, []byte("k"), s); err == nil {
			t.Fatalf("accepted %+v against an unreachable app hash", p)
		}
	})
}
