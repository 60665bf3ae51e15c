package chain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	abci "github.com/cometbft/cometbft/abci/types"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire/did"
)

// Example drives the application the way CometBFT does: genesis with one
// allocation, one block with a signed transfer, commit, then a query.
func Example() {
	ctx := context.Background()
	db, _ := store.OpenInMemory()
	defer db.Close()
	app, _ := chain.NewApp(ctx, db, chain.AppOptions{})

	alice, _ := did.FromSeed(did.KindHuman, make([]byte, 32))
	bobSeed := make([]byte, 32)
	bobSeed[0] = 1
	bob, _ := did.FromSeed(did.KindHuman, bobSeed)

	st, _ := json.Marshal(chain.GenesisState{Accounts: []chain.GenesisAccount{{DID: alice.DID.String(), Balance: "1000000000000000000"}}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	_, _ = app.InitChain(ctx, &abci.RequestInitChain{ChainId: "example", InitialHeight: 1, Time: t0, AppStateBytes: st})

	tx, _ := chain.TransferTx("example", alice, bob.DID.String(), "250", 1)
	res, _ := app.FinalizeBlock(ctx, &abci.RequestFinalizeBlock{Height: 1, Time: t0.Add(time.Second), Txs: [][]byte{tx}})
	_, _ = app.Commit(ctx, &abci.RequestCommit{})
	fmt.Println("code", res.TxResults[0].Code)

	q, _ := app.Query(ctx, &abci.RequestQuery{Path: chain.QueryBalance, Data: []byte(bob.DID.String())})
	fmt.Println("bob", string(q.Value), "at height", q.Height)
	// Output:
	// code 0
	// bob 250 at height 1
}
