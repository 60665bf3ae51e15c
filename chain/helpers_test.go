package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"sort"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// genesisTime is the block time of the genesis; each block of the tests is
// one second after the previous unless a test moves the clock.
var genesisTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testKey(t testing.TB, kind string, n byte) *did.Key {
	t.Helper()
	seed := make([]byte, 32)
	seed[0], seed[31] = n, 0x5a
	k, err := did.FromSeed(kind, seed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testSpec is an Open run of m trainers, quorum k, f fragments, rounds
// rounds, a 5 s grace window and a 60 s round deadline.
func testSpec(task, sponsor string, m, k, f, rounds int, extra string) []byte {
	return []byte(fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,
 "dtype":"bf16","metadata":{"context_len":32,"horizon":8}},"tier":"Open","aggregation":"Mean",
 "trainer_count":%d,"quorum":%d,"inner_steps":24,"max_rounds":%d,"grace_window_ms":5000,"round_deadline_ms":60000,
 "reward_pool":"1000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400%s}`, task, sponsor, f*4, f, m, k, rounds, extra))
}

// testLayout is an initial-weights layout of f fragments of one F32 tensor
// of 4 values each (the hashes stand for bytes the chain never sees).
func testLayout(f int, seed string) *wire.InitLayout {
	l := &wire.InitLayout{File: wire.ContentHash([]byte("file-" + seed))}
	var hs []wire.Hash
	for i := 0; i < f; i++ {
		h := wire.ContentHash([]byte(fmt.Sprintf("w-%s-%d", seed, i)))
		hs = append(hs, h)
		l.Fragments = append(l.Fragments, wire.FragmentLayout{Tensors: []wire.TensorInfo{{Name: fmt.Sprintf("layer%d.w", i), Dtype: "F32", Shape: []int64{4}}},
			Dtype: "F32", N: 4, WeightsHash: h})
	}
	l.Model = machine.ModelHash(hs)
	return l
}

func meanRules(t testing.TB) Rules {
	r, err := MeanRules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func vrfProof(t testing.TB, key *did.Key, task string, spec []byte) []byte {
	t.Helper()
	_, canon, err := wire.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	pi, err := vrf.Prove(key.Priv, election.Alpha(task, wire.SpecHash(canon)))
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

// must returns b or panics: for building test transactions inline.
func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// harness drives one App the way CometBFT does, with a block clock.
type harness struct {
	t      testing.TB
	app    *App
	db     *store.DB
	dir    string
	height int64
	now    time.Time     // time of the next block
	step   time.Duration // how far the clock moves after a block (default 1 s)
	snaps  SnapshotOptions
	keep   int64
	// senderLimit is AppOptions.MempoolSenderLimit (set before open).
	senderLimit int
}

func newHarness(t testing.TB, dir string) *harness {
	t.Helper()
	h := &harness{t: t, dir: dir, now: genesisTime.Add(time.Second)}
	h.open()
	return h
}

func (h *harness) open() {
	h.t.Helper()
	var err error
	if h.dir == "" {
		h.db, err = store.OpenInMemory()
	} else {
		h.db, err = store.Open(context.Background(), h.dir, store.Options{Logger: quiet})
	}
	if err != nil {
		h.t.Fatal(err)
	}
	opts := AppOptions{Log: quiet, Snapshots: h.snaps, KeepHeights: h.keep, MempoolSenderLimit: h.senderLimit}
	if h.dir != "" {
		opts.StateDir = h.dir + "-state"
	}
	h.app, err = NewApp(context.Background(), h.db, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.height, _ = h.app.LastCommit()
	app, db := h.app, h.db
	h.t.Cleanup(func() { app.Close(); db.Close() })
}

// close closes the app's state tree and the store (a crash or a stop).
func (h *harness) close() {
	h.app.Close()
	h.db.Close()
}

// freeParams are chain parameters without transaction fees or economic
// floors (and the given unbonding delay): the tests of run, settlement and
// challenge rules keep their small exact amounts; fees and floors have their
// own tests on the default parameters.
func freeParams(unbondingMs int64) *machine.GenesisParams {
	return &machine.GenesisParams{UnbondingDelayMs: unbondingMs, TxFeeBase: "0", TxFeeByte: "0", MinRewardPool: "0", MinStake: "0",
		MinChallengeBond: "0", ReexecBondByte: "0"}
}

func (h *harness) genesis(g GenesisState) wire.Hash {
	h.t.Helper()
	st, _ := json.Marshal(g)
	res, err := h.app.InitChain(context.Background(), &abci.RequestInitChain{ChainId: ManualChainID, InitialHeight: 1, Time: genesisTime, AppStateBytes: st})
	if err != nil {
		h.t.Fatal(err)
	}
	return wire.Hash(res.AppHash)
}

// block finalizes and commits one block of txs at h.now (then moves the
// clock one second); it returns the results and the app hash.
func (h *harness) block(txs ...[]byte) ([]*abci.ExecTxResult, wire.Hash) {
	h.t.Helper()
	res := h.finalize(txs...)
	if _, err := h.app.Commit(context.Background(), &abci.RequestCommit{}); err != nil {
		h.t.Fatal(err)
	}
	h.height++
	if h.step == 0 {
		h.step = time.Second
	}
	h.now = h.now.Add(h.step)
	return res.TxResults, wire.Hash(res.AppHash)
}

func (h *harness) finalize(txs ...[]byte) *abci.ResponseFinalizeBlock {
	h.t.Helper()
	hash := wire.ContentHash([]byte(fmt.Sprintf("block-%d", h.height+1)))
	res, err := h.app.FinalizeBlock(context.Background(), &abci.RequestFinalizeBlock{Height: h.height + 1, Time: h.now, Txs: txs, Hash: hash[:]})
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) query(path, arg string) (uint32, string) {
	h.t.Helper()
	res, err := h.app.Query(context.Background(), &abci.RequestQuery{Path: path, Data: []byte(arg)})
	if err != nil {
		h.t.Fatal(err)
	}
	if res.Code != 0 {
		return res.Code, res.Log
	}
	return 0, string(res.Value)
}

func (h *harness) balance(d *did.Key) string {
	h.t.Helper()
	code, v := h.query(QueryBalance, d.DID.String())
	if code != 0 {
		h.t.Fatalf("balance of %s: %s", d.DID, v)
	}
	return v
}

// conservation checks that every balance sums to zero.
func (h *harness) conservation() {
	h.t.Helper()
	var total *big.Int
	err := h.app.View(context.Background(), func(v machine.View) error {
		var err error
		total, _, err = machine.LedgerTotal(context.Background(), v.KV)
		return err
	})
	if err != nil || total.Sign() != 0 {
		h.t.Fatalf("conservation: total %s, err %v", total, err)
	}
}

// testRun is the part of a run's state the tests read.
type testRun struct {
	Status     string      `json:"status"`
	Round      uint64      `json:"round"`
	RoundMs    int64       `json:"round_started_ms"`
	Syncer     string      `json:"syncer"`
	Succession []string    `json:"succession"`
	Roots      []wire.Hash `json:"round_roots"`
	Trainers   []struct {
		DID      string `json:"did"`
		Status   string `json:"status"`
		Slashed  string `json:"slashed"`
		Accepted uint64 `json:"accepted"`
		Missed   uint64 `json:"missed_rounds"`
		Weight   string `json:"weight"`
	} `json:"trainers"`
	Fragments []struct {
		WeightsHash wire.Hash `json:"weights_hash"`
		Records     []struct {
			DID         string    `json:"did"`
			PayloadHash wire.Hash `json:"payload_hash"`
		} `json:"records"`
		Closed bool                 `json:"closed"`
		Commit *wire.FragmentCommit `json:"commit"`
	} `json:"fragments"`
	Rule   wire.RuleRef   `json:"rule"`
	Outer  wire.RuleRef   `json:"outer"`
	Codec  *wire.CodecRef `json:"-"`
	Cancel string         `json:"cancel_reason"`
	Seal   *struct {
		RunRoot wire.Hash `json:"run_root"`
		Signed  bool      `json:"signed"`
		Height  int64     `json:"height"`
	} `json:"seal"`
}

func (h *harness) run(task string) *testRun {
	h.t.Helper()
	code, raw := h.query(QueryRun, task)
	if code != 0 {
		h.t.Fatalf("run %s: %s", task, raw)
	}
	var r testRun
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		h.t.Fatal(err)
	}
	return &r
}

// commit builds fragment f's commit of task's current round as the
// syncer key at ticket: every record an input (selected), aggregated with
// new weights derived from the round, or the given status; verdict for
// every claim.
func (h *harness) commit(task string, f int, key *did.Key, ticket uint64, status, verdict string, nonce uint64) []byte {
	h.t.Helper()
	r := h.run(task)
	fs := r.Fragments[f]
	c := wire.FragmentCommit{Fragment: f, Status: status, Rule: r.Rule.Name, RuleHash: r.Rule.Hash, RuleParams: r.Rule.Params, OuterHash: r.Outer.Hash,
		WeightsBefore: fs.WeightsHash, WeightsAfter: fs.WeightsHash, Syncer: key.DID.String(), Ticket: ticket, Inputs: []wire.CommitInput{}}
	recs := fs.Records
	sort.Slice(recs, func(i, j int) bool { return recs[i].DID < recs[j].DID })
	for _, rec := range recs {
		c.Inputs = append(c.Inputs, wire.CommitInput{TrainerDID: rec.DID, PayloadHash: rec.PayloadHash, Selected: status == wire.FragAggregated})
	}
	if status == wire.FragAggregated {
		c.WeightsAfter = wire.ContentHash([]byte(fmt.Sprintf("%s-%d-%d-weights", task, r.Round, f)))
		c.MomentumAfter = wire.ContentHash([]byte(fmt.Sprintf("%s-%d-%d-momentum", task, r.Round, f)))
		c.AggregateHash = wire.ContentHash([]byte(fmt.Sprintf("%s-%d-%d-aggregate", task, r.Round, f)))
	}
	var verdicts []wire.Verdict
	err := h.app.View(context.Background(), func(v machine.View) error {
		cl, err := machine.FragmentClaims(context.Background(), v.KV, task, r.Round, f)
		for _, x := range cl {
			verdicts = append(verdicts, wire.Verdict{TrainerDID: x.First.TrainerDID, Verdict: verdict})
		}
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return must(CommitFragmentTx(ManualChainID, key, wire.CommitFragmentTx{TaskID: task, Round: r.Round, Fragment: uint64(f), Commit: c, Verdicts: verdicts,
		Signed: wire.Signed{Nonce: nonce}}))
}

// signReceipt builds task's receipt from the committed state and signs it.
func (h *harness) signReceipt(task string, key *did.Key) []byte {
	h.t.Helper()
	var rc *wire.Receipt
	err := h.app.View(context.Background(), func(v machine.View) error {
		var err error
		rc, _, _, err = machine.ChainReceipt(context.Background(), v.KV, task, key.DID.String(), json.RawMessage(`{"engine":"test"}`), nil)
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return must(SignReceiptTx(key, rc, nil))
}

type txCase struct {
	name string
	tx   []byte
	code uint32
}

func runBlock(t testing.TB, h *harness, cases []txCase) wire.Hash {
	t.Helper()
	txs := make([][]byte, len(cases))
	for i, c := range cases {
		txs[i] = c.tx
	}
	res, hash := h.block(txs...)
	for i, c := range cases {
		if res[i].Code != c.code {
			t.Fatalf("block %d %s: code %d (%s), want %d", h.height, c.name, res[i].Code, res[i].Log, c.code)
		}
	}
	return hash
}
