package election_test

import (
	"crypto/sha256"
	"fmt"
	"math/big"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

func Example() {
	alpha := election.Alpha("task-42", wire.SHA256([]byte("spec")))
	var es []election.Entrant
	for i, label := range []string{"alice", "bob"} {
		seed := sha256.Sum256([]byte(label))
		k, err := did.FromSeed(did.KindMachine, seed[:])
		if err != nil {
			panic(err)
		}
		// Each candidate proves alpha with its own key and publishes the entrant.
		e, err := election.Enter(k.Priv, k.DID.String(), big.NewInt(int64(i+1)*1e18), alpha)
		if err != nil {
			panic(err)
		}
		es = append(es, e)
	}
	rec, err := election.Record(alpha, es) // verifies every proof
	if err != nil {
		panic(err)
	}
	// Anyone can re-check the stored record.
	fmt.Println(election.CheckRecord(rec) == nil, len(rec.Candidates))
	// Output: true 2
}
