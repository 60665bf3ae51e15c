package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	cmtcrypto "github.com/cometbft/cometbft/proto/tendermint/crypto"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	"github.com/cometbft/cometbft/types"
	ics23 "github.com/cosmos/ics23/go"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// countingRPC counts the proven queries a light client asks and the bytes
// of their answers as CometBFT's JSON-RPC sends them (the result object).
type countingRPC struct {
	*appRPC
	mu             sync.Mutex
	queries, bytes int
}

func (c *countingRPC) ABCIQueryWithOptions(ctx context.Context, path string, data cmtbytes.HexBytes, opts rpcclient.ABCIQueryOptions) (*ctypes.ResultABCIQuery, error) {
	r, err := c.appRPC.ABCIQueryWithOptions(ctx, path, data, opts)
	if err != nil {
		return r, err
	}
	raw, err := cmtjson.Marshal(r)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.queries++
	c.bytes += len(raw)
	c.mu.Unlock()
	return r, nil
}

func (c *countingRPC) reset() (queries, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	queries, bytes = c.queries, c.bytes
	c.queries, c.bytes = 0, 0
	return queries, bytes
}

// runWithRecords plays a run of m trainers and f fragments up to m×f
// submission records in its first round on a full node.
func runWithRecords(t testing.TB, m, f int) (*harness, string) {
	t.Helper()
	sponsor, cand := testKey(t, did.KindHuman, 1), testKey(t, did.KindMachine, 4)
	trainers := make([]*did.Key, m)
	accts := []GenesisAccount{{DID: sponsor.DID.String(), Balance: "100000000000000"}, {DID: cand.DID.String(), Balance: "300"}}
	for i := range trainers {
		trainers[i] = testKey(t, did.KindMachine, byte(100+i))
		accts = append(accts, GenesisAccount{DID: trainers[i].DID.String(), Balance: "500"})
	}
	task := "run-cost"
	spec := testSpec(task, sponsor.DID.String(), m, 1, f, 2, "")
	h := newHarness(t, "")
	h.genesis(GenesisState{Accounts: accts, Faucet: true, Params: freeParams(60000)})
	runBlock(t, h, []txCase{{"register", must(RegisterSyncerTx(ManualChainID, cand, "100", 1)), CodeOK}})
	runBlock(t, h, []txCase{{"post", must(PostTaskTx(ManualChainID, sponsor, spec, testLayout(f, "c"), meanRules(t), 1)), CodeOK}})
	runBlock(t, h, []txCase{{"proof", must(ElectionProofTx(ManualChainID, cand, task, vrfProof(t, cand, task, spec), 2)), CodeOK}})
	var cases []txCase
	for i, k := range trainers {
		cases = append(cases, txCase{fmt.Sprint("enrol ", i), must(EnrollTx(ManualChainID, k, task, "100", 1)), CodeOK})
	}
	runBlock(t, h, cases)
	cases = nil
	for i, k := range trainers {
		for j := 0; j < f; j++ {
			cases = append(cases, txCase{fmt.Sprintf("record %d/%d", i, j), must(SubmissionTx(ManualChainID, k, task, 0, uint64(j), wire.ContentHash([]byte(fmt.Sprint(i, j))), 10)), CodeOK})
		}
	}
	runBlock(t, h, cases)
	return h, task
}

// TestLightGetRunCost measures what the syncer's getRun (the run and its
// escrow balance) costs through a light client at 8 and 200 records of the
// round: proven queries and the bytes of their answers. `go test ./chain
// -run TestLightGetRunCost -v` prints the figures.
func TestLightGetRunCost(t *testing.T) {
	for _, tc := range []struct{ m, f int }{{4, 2}, {20, 10}} {
		t.Run(fmt.Sprintf("%d records", tc.m*tc.f), func(t *testing.T) {
			h, task := runWithRecords(t, tc.m, tc.f)
			height, _ := h.app.LastCommit()
			vals, privs := types.RandValidatorSet(4, 10)
			c := newHeaderChain(t, vals, privs, height+1, appHashAt(h.app), nil)
			rpc := &countingRPC{appRPC: &appRPC{app: h.app}}
			l, err := startTestLight(t, c, rpc, c.provider("primary"))
			if err != nil {
				t.Fatal(err)
			}
			rpc.reset()
			var want, got []byte
			if err := h.app.View(context.Background(), func(v machine.View) error {
				want, err = getRunJSON(v, task)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if err := l.View(context.Background(), func(v machine.View) error {
				got, err = getRunJSON(v, task)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("getRun through the light client differs from the full node's:\n%s\n%s", got, want)
			}
			q, b := rpc.reset()
			t.Logf("getRun at %d records: %d proven queries, %d bytes (%.1f KB a query)", tc.m*tc.f, q, b, float64(b)/float64(q)/1000)
			// A scan is one proven walk (up to 256 keys), not a query a
			// key: the run's header, trainers, fragments, records and
			// attestations, and the escrow balance.
			if q > 8 {
				t.Fatalf("getRun at %d records took %d proven queries, want at most 8", tc.m*tc.f, q)
			}
		})
	}
}

// getRunJSON is what syncer.Node.GetRun reads: the run and its escrow.
func getRunJSON(v machine.View, task string) ([]byte, error) {
	ctx := context.Background()
	r, err := machine.LoadRun(ctx, v.KV, task)
	if err != nil {
		return nil, err
	}
	esc, err := machine.AccountBalance(ctx, v.KV, machine.AcctEscrow(task))
	if err != nil {
		return nil, err
	}
	return json.Marshal(r.WireView(esc, v.Block))
}

// TestLightWalkRefusals: a walk answer whose batch proof is tampered with,
// points outside its lookup table, starts at another key, is not
// compressed, or carries a wrong app-hash step is refused with a precise
// error; a full node that answers no walks (an older version) is read key
// by key, with the same result.
func TestLightWalkRefusals(t *testing.T) {
	h, task := runWithRecords(t, 4, 2)
	height, _ := h.app.LastCommit()
	vals, privs := types.RandValidatorSet(4, 10)
	c := newHeaderChain(t, vals, privs, height+1, appHashAt(h.app), nil)
	var want []byte
	if err := h.app.View(context.Background(), func(v machine.View) error {
		var err error
		want, err = getRunJSON(v, task)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	walkProof := func(r *abci.ResponseQuery, edit func(*ics23.CommitmentProof)) {
		if r.ProofOps == nil || r.ProofOps.Ops[0].Type != ProofOpIAVLWalk {
			return
		}
		var cp ics23.CommitmentProof
		if err := cp.Unmarshal(r.ProofOps.Ops[0].Data); err != nil {
			t.Fatal(err)
		}
		edit(&cp)
		raw, err := cp.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		r.ProofOps.Ops[0].Data = raw
	}
	for _, tc := range []struct {
		name   string
		tamper func(*abci.ResponseQuery)
		want   string
	}{
		{"tampered value", func(r *abci.ResponseQuery) {
			walkProof(r, func(cp *ics23.CommitmentProof) {
				// The right neighbour's value in the first non-existence
				// proof: the value the scan would take for the next key.
				for _, e := range cp.GetCompressed().Entries {
					if ne := e.GetNonexist(); ne != nil && ne.Right != nil && len(ne.Right.Value) > 0 {
						ne.Right.Value = append([]byte(nil), ne.Right.Value...)
						ne.Right.Value[0] ^= 1
						return
					}
				}
			})
		}, "state proof"},
		{"lookup index out of range", func(r *abci.ResponseQuery) {
			walkProof(r, func(cp *ics23.CommitmentProof) {
				e := cp.GetCompressed().Entries[0]
				if ex := e.GetExist(); ex != nil {
					ex.Path[0] = 1 << 20
				} else {
					e.GetNonexist().Right.Path[0] = 1 << 20
				}
			})
		}, "outside the lookup table"},
		{"walk from another key", func(r *abci.ResponseQuery) {
			walkProof(r, func(cp *ics23.CommitmentProof) {
				es := cp.GetCompressed().Entries
				if len(es) < 2 {
					t.Fatal("a walk of one entry")
				}
				cp.GetCompressed().Entries = es[1:]
			})
		}, "first proof is of"},
		{"not compressed", func(r *abci.ResponseQuery) {
			walkProof(r, func(cp *ics23.CommitmentProof) { *cp = *ics23.Decompress(cp) })
		}, "not a compressed batch proof"},
		{"tampered app-hash step", func(r *abci.ResponseQuery) {
			if r.ProofOps != nil && r.ProofOps.Ops[0].Type == ProofOpIAVLWalk {
				r.ProofOps.Ops[1].Data = bytes.Replace(r.ProofOps.Ops[1].Data, []byte(`"log_size":`), []byte(`"log_size":1`), 1)
			}
		}, "the header says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := startTestLight(t, c, &appRPC{app: h.app, tamper: tc.tamper}, c.provider("primary"))
			if err != nil {
				t.Fatal(err)
			}
			err = l.View(context.Background(), func(v machine.View) error {
				_, err := getRunJSON(v, task)
				return err
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}

	t.Run("full node without walks", func(t *testing.T) {
		old := &countingRPC{appRPC: &appRPC{app: h.app, tamper: func(r *abci.ResponseQuery) {
			if r.ProofOps != nil && r.ProofOps.Ops[0].Type == ProofOpIAVLWalk {
				*r = abci.ResponseQuery{Code: CodeInvalid, Log: `query path "/state/walk" cannot be proven`, Height: r.Height}
			}
		}}}
		l, err := startTestLight(t, c, old, c.provider("primary"))
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := l.View(context.Background(), func(v machine.View) error {
			got, err = getRunJSON(v, task)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) || !l.noWalk.Load() {
			t.Fatalf("read key by key: walks off %v, run %s", l.noWalk.Load(), got)
		}
		if q, _ := old.reset(); q < 10 {
			t.Fatalf("%d queries: the walk was not replaced by per-key reads", q)
		}
	})
}

// FuzzCheckWalk: no walk answer panics the light client's check (the
// compressed batch's indices are checked before it is decompressed), and
// none proves anything against an app hash nobody can reach.
func FuzzCheckWalk(f *testing.F) {
	h, _ := runWithRecords(f, 2, 1)
	height, _ := h.app.LastCommit()
	prefix := StateKey(machine.KSRuns, nil)
	res, _ := h.app.Query(context.Background(), &abci.RequestQuery{Path: QueryStateWalk, Data: EncodeWalkRequest(prefix, prefix), Height: height, Prove: true})
	if res.Code != CodeOK {
		f.Fatalf("walk: %d %s", res.Code, res.Log)
	}
	f.Add(res.ProofOps.Ops[0].Data, res.ProofOps.Ops[1].Data)
	f.Add([]byte{0x2a, 0x04, 0x0a, 0x02, 0x0a, 0x00}, []byte(`{}`))
	f.Fuzz(func(t *testing.T, proof, step []byte) {
		s := &lightState{height: height, appHash: wire.Hash{1}}
		ops := &cmtcrypto.ProofOps{Ops: []cmtcrypto.ProofOp{{Type: ProofOpIAVLWalk, Data: proof}, {Type: ProofOpAppHash, Data: step}}}
		if es, err := checkWalk(CodeOK, "", EncodeWalkRequest(prefix, prefix), height, ops, prefix, prefix, s); err == nil {
			t.Fatalf("accepted %d entries against an unreachable app hash", len(es))
		}
	})
}
