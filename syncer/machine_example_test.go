package syncer_test

import (
	"context"
	"fmt"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// ExampleMachine applies transitions to a KV at given blocks, as chain.App
// does: a genesis with the faucet, a faucet transaction, a signed transfer,
// and a transfer that is refused (and changes nothing, not even the nonce).
func ExampleMachine() {
	ctx := context.Background()
	kv, _ := store.OpenInMemory()
	defer kv.Close()
	m := machine.NewMachine(machine.MachineConfig{Builtins: machine.NativeBuiltins()})

	alice, _ := did.FromSeed(did.KindHuman, make([]byte, 32))
	bobSeed := make([]byte, 32)
	bobSeed[0] = 1
	bob, _ := did.FromSeed(did.KindHuman, bobSeed)

	_ = m.InitGenesis(ctx, kv, machine.Block{}, &machine.Genesis{Faucet: true})
	blk := machine.Block{Height: 1, TimeMs: 1_761_350_400_000, Hash: []byte{1}}
	apply := func(typ string, params any) {
		raw, _ := wire.EncodeTx(typ, params)
		tx, _ := wire.DecodeTx(raw)
		if out, err := m.Apply(ctx, kv, blk, tx); err != nil {
			fmt.Println("refused:", err)
		} else {
			fmt.Println(string(out))
		}
	}
	apply(wire.TxFaucet, wire.FaucetTx{DID: alice.DID.String(), Amount: "1000", Salt: 1})
	send := func(amount string, nonce uint64) wire.TransferParams {
		p := wire.TransferParams{From: alice.DID.String(), To: bob.DID.String(), Amount: amount, Signed: wire.Signed{Nonce: nonce}}
		p.Signature = alice.Sign(p.Preimage())
		return p
	}
	apply(wire.TxTransfer, send("250", 1))
	apply(wire.TxTransfer, send("5000", 2))
	b, _ := machine.Balance(ctx, kv, bob.DID.String())
	fmt.Println("bob", b.Balance)
	// Output:
	// {"did":"did:tenzro:human:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp","balance":"1000"}
	// {"did":"did:tenzro:human:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp","balance":"750"}
	// refused: balance of did:tenzro:human:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp is 750 attoTNZO, needs 5000
	// bob 250
}
