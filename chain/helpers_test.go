package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"testing"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// genesisTime is the fixed block time base of the tests: block h has time
// genesisTime + h seconds (block time is all the application sees).
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

func testSpec(task, sponsor string, m, k, f int) []byte {
	return []byte(fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x1111111111111111111111111111111111111111",
 "architecture":{"family":"timesfm","param_count":%d,"modality":"Timeseries","fragment_count":%d,
 "dtype":"bf16","metadata":{"context_len":32,"horizon":8}},"tier":"Open","aggregation":"Mean",
 "trainer_count":%d,"quorum":%d,"inner_steps":24,"max_rounds":3,"grace_window_ms":30000,
 "reward_pool":"1000","dataset_ref":"ipfs://QmTest","dataset_hash":"0xabab",
 "min_throughput":null,"created_at":1761350400}`, task, sponsor, f*16, f, m, k))
}

// testReceipt builds a receipt of a zero-round run of spec, signed by key.
func testReceipt(t testing.TB, spec []byte, key *did.Key) []byte {
	t.Helper()
	return roundsReceipt(t, spec, key, nil, nil)
}

// roundsReceipt builds a version-2 receipt of spec with the given
// transcript and reward lines, signed by key, which it lists as the run's
// only syncer (ticket 0, its VRF proof over the run's alpha). The
// sponsor refund is what conservation leaves (reward_pool + Σ slashed −
// Σ reward); the lines must follow ⌊P·w/W⌋ for CheckReceipt to accept them.
func roundsReceipt(t testing.TB, spec []byte, key *did.Key, transcript []wire.RoundCommit, rewards []wire.Payout) []byte {
	t.Helper()
	b := unsignedReceipt(t, spec, key, transcript, rewards)
	pre, err := syncer.ReceiptPreimage(b)
	if err != nil {
		t.Fatal(err)
	}
	b.Signature = key.Sign(pre)
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func unsignedReceipt(t testing.TB, spec []byte, key *did.Key, transcript []wire.RoundCommit, rewards []wire.Payout) *wire.Receipt {
	t.Helper()
	s, canon, err := wire.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	if rewards == nil {
		rewards = []wire.Payout{}
	}
	blob, roots, err := syncer.TranscriptBlob(transcript)
	if err != nil {
		t.Fatal(err)
	}
	_, attHash := syncer.AttestationList(nil)
	alpha := election.Alpha(s.TaskID, wire.SpecHash(canon))
	pi, err := vrf.Prove(key.Priv, alpha)
	if err != nil {
		t.Fatal(err)
	}
	beta, _ := vrf.ProofToHash(pi)
	rest, _ := new(big.Int).SetString(s.RewardPool, 10)
	slashed := new(big.Int)
	for _, p := range rewards {
		v, _ := new(big.Int).SetString(p.Reward, 10)
		sl, _ := new(big.Int).SetString(p.Slashed, 10)
		rest.Sub(rest, v)
		rest.Add(rest, sl)
		slashed.Add(slashed, sl)
	}
	if rest.Sign() < 0 {
		rest.SetInt64(0)
	}
	rc := &wire.Receipt{Version: syncer.ReceiptVersion, TaskID: s.TaskID, TaskSpec: canon, SpecHash: wire.SpecHash(canon),
		FinalModelHash: wire.ContentHash([]byte("final")), Rounds: uint64(len(transcript)), TranscriptHash: syncer.BlobHash(blob),
		TranscriptSize: uint64(len(blob)), PluginHashes: []wire.Hash{}, Engine: json.RawMessage(`{}`), AttestationsHash: attHash,
		ElectionAlpha: alpha, Syncers: []wire.ReceiptSyncer{{DID: key.DID.String(), Stake: "1", Proof: pi, Output: beta}},
		RewardPool: s.RewardPool, SlashedTotal: slashed.String(), Rewards: rewards, SponsorRefund: rest.String(), SyncerDID: key.DID.String()}
	if n := len(transcript); n > 0 {
		rc.FinalModelHash = transcript[n-1].ModelHash
	}
	rc.RunRoot = syncer.RunRoot(rc.SpecHash, roots, rc.FinalModelHash)
	return rc
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

// harness drives one App the way CometBFT does.
type harness struct {
	t      testing.TB
	app    *App
	db     *store.DB
	height int64
}

func newHarness(t testing.TB, dir string) *harness {
	t.Helper()
	var db *store.DB
	var err error
	if dir == "" {
		db, err = store.OpenInMemory()
	} else {
		db, err = store.Open(context.Background(), dir, store.Options{Logger: quiet})
	}
	if err != nil {
		t.Fatal(err)
	}
	app, err := NewApp(context.Background(), db, quiet)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, app: app, db: db}
	h.height, _ = app.LastCommit()
	t.Cleanup(func() { db.Close() })
	return h
}

func (h *harness) genesis(accounts ...GenesisAccount) wire.Hash {
	h.t.Helper()
	st, _ := json.Marshal(GenesisState{Accounts: accounts})
	res, err := h.app.InitChain(context.Background(), &abci.RequestInitChain{ChainId: "test", InitialHeight: 1, Time: genesisTime, AppStateBytes: st})
	if err != nil {
		h.t.Fatal(err)
	}
	return wire.Hash(res.AppHash)
}

// block finalizes and commits one block of txs; it returns the result
// codes and the app hash.
func (h *harness) block(txs ...[]byte) ([]*abci.ExecTxResult, wire.Hash) {
	h.t.Helper()
	res := h.finalize(txs...)
	if _, err := h.app.Commit(context.Background(), &abci.RequestCommit{}); err != nil {
		h.t.Fatal(err)
	}
	h.height++
	return res.TxResults, wire.Hash(res.AppHash)
}

func (h *harness) finalize(txs ...[]byte) *abci.ResponseFinalizeBlock {
	h.t.Helper()
	res, err := h.app.FinalizeBlock(context.Background(), &abci.RequestFinalizeBlock{
		Height: h.height + 1, Time: genesisTime.Add(time.Duration(h.height+1) * time.Second), Txs: txs})
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
	total := new(big.Int)
	err := h.db.Scan(context.Background(), ksState, []byte("acct/"), func(k, v []byte) error {
		x, ok := new(big.Int).SetString(string(v), 10)
		if !ok {
			return fmt.Errorf("balance %q", k)
		}
		total.Add(total, x)
		return nil
	})
	if err != nil || total.Sign() != 0 {
		h.t.Fatalf("conservation: total %s, err %v", total, err)
	}
}
