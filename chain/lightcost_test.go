package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	cmtbytes "github.com/cometbft/cometbft/libs/bytes"
	cmtjson "github.com/cometbft/cometbft/libs/json"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	ctypes "github.com/cometbft/cometbft/rpc/core/types"
	"github.com/cometbft/cometbft/types"

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
func runWithRecords(t *testing.T, m, f int) (*harness, string) {
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
