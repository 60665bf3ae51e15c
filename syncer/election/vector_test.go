package election

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/tenzro/train/wire/did"
)

// The test vector of docs/protocol/election.md §5. Keep the two in step.
var docVector = struct {
	taskID, specHash, alpha string
	entrants                []struct{ seed, did, stake, proof, beta, ticket string }
	winner                  string
	negLnU                  map[uint64]string
}{
	taskID:   "vector-task",
	specHash: "675976c9eb99139bfbaf8776706c5d763b6405c028e139a9e8ff094eda18b824",
	alpha:    "000000000000001874656e7a726f2f747261696e2f656c656374696f6e2f7631000000000000000b766563746f722d7461736b0000000000000020675976c9eb99139bfbaf8776706c5d763b6405c028e139a9e8ff094eda18b824",
	entrants: []struct{ seed, did, stake, proof, beta, ticket string }{
		{
			seed:   "4d8058292525f235905b814238a4277d5cdc81fafb12ab8e050e4e5e0b1b3002",
			did:    "did:tenzro:machine:z6MktbQMLxVRrsC72NAkLHEhSGwZ4Zbc23SVsWbKNVooNnzK",
			stake:  "1000000000000000000",
			proof:  "43db52944f482ea956d93e7c55ac05d3dd0fa3e67f31f15ffdfa03846c32b8c8afa11dfdbc6bfc45f6e24bca6d6ba7f8be18d709f667e4360779a57b17666beb42378c491ebab515ed63fafb2d5d8506",
			beta:   "4bc71ede8cf83b8aef4e4ea8f55bd73b7a9a715dbcc0c00474f7111a2d3177e1ab27561d955aa742f7ea4a2cc38d847be03667a5b6cc3cd50d307264eeae135a",
			ticket: "1.2173718756901433038760860081731945790402815396960903288199678510451514767608372e-18",
		},
		{
			seed:   "ece0bb08d86d93a2b3be008e4055fad8d7b39e8ec7b08f0bd95419f31d70b2a8",
			did:    "did:tenzro:machine:z6Mkr5WbdE7hhvDEV6QL3f4yGsAB2o9wyQqTqXkMRcKoCZQi",
			stake:  "3000000000000000000",
			proof:  "d558444452b7337ce898cbc4573af0235e2bc17010f531bfc9ec5a20524049fd4fd5a4aa1f073a551faca7aa9d188c41e74e0f92aaa448e742b27d6e943ddb51bea6b1ba2a88e2b5a54a3c44310f3304",
			beta:   "fcaee1d7607caa4c34294099e378beeef4bcb1bc7d386feff444661e42f279807befa06ed54fb44da9493f8ae0b555e61fc93392baae548d85d5309ce520cadf",
			ticket: "4.3470590693583333710841368962802218195858664264346416678789897311936909177432539e-21",
		},
		{
			seed:   "b274c6d48f2bdd61656e5b97cafb8f1ad082df649f238d6e0143b261fc6c95f7",
			did:    "did:tenzro:machine:z6MkkGZgA7YpuyECRimJxsTcyFDbhDL9uH5CrwJ9HgVsYv59",
			stake:  "2000000000000000000",
			proof:  "f5c9208eb070bd5dd978d1236483c7914b1316b6b99cbca4bd2f184b4352b20538754f5dfdfbdfe380f860c4ee6e9c2a7d1316e0130f3824b20362bc382fe3323aa21c91fbf70e9e422a69b2e4a04f06",
			beta:   "5047099ba77bf48501ba132a395be9b54a95ae690cdfc3dcb27452adffc65120135c9f0f0acee9347ea8dc566b296c1608e1d0e6c41fc3f5e34d668c94429384",
			ticket: "5.7984409108295591777155434524473054125450930669479701843724001667940192757262523e-19",
		},
	},
	winner: "did:tenzro:machine:z6Mkr5WbdE7hhvDEV6QL3f4yGsAB2o9wyQqTqXkMRcKoCZQi",
	negLnU: map[uint64]string{
		0x0:                "4.4361419555836499802702855773323300356832008599056336263723520607577191806060514e+01",
		0x7fffffffffffffff: "6.9314718055994530941723212145817656807550013436025525412068000949339362196969553e-01",
		0x8000000000003039: "6.9314718055994397086122997085529820855971888311869858282672432882265304183390772e-01",
	},
}

func TestDocVector(t *testing.T) {
	v := docVector
	spec, err := hex.DecodeString(v.specHash)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(Alpha(v.taskID, [32]byte(spec))); got != v.alpha {
		t.Fatalf("alpha = %s", got)
	}
	alpha, _ := hex.DecodeString(v.alpha)
	var es []Entrant
	for i, e := range v.entrants {
		seed, _ := hex.DecodeString(e.seed)
		if want := sha256.Sum256([]byte("tenzro/test/election/" + []string{"alice", "bob", "carol"}[i])); hex.EncodeToString(want[:]) != e.seed {
			t.Fatalf("seed %d is not the documented derivation", i)
		}
		k, err := did.FromSeed(did.KindMachine, seed)
		if err != nil {
			t.Fatal(err)
		}
		if k.DID.String() != e.did {
			t.Fatalf("entrant %d DID = %s", i, k.DID)
		}
		stake, err := ParseStake(e.stake)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Enter(k.Priv, e.did, stake, alpha)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got.Proof) != e.proof {
			t.Fatalf("entrant %d proof = %x", i, got.Proof)
		}
		es = append(es, Entrant{DID: e.did, Key: ed25519.PublicKey(k.DID.Key), Stake: stake, Proof: got.Proof})
	}
	w, ts, err := Elect(alpha, es)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range v.entrants {
		if hex.EncodeToString(ts[i].Beta) != e.beta {
			t.Errorf("entrant %d beta = %x", i, ts[i].Beta)
		}
		if ts[i].String() != e.ticket {
			t.Errorf("entrant %d ticket = %s", i, ts[i])
		}
	}
	if es[w].DID != v.winner {
		t.Errorf("winner = %s", es[w].DID)
	}
	for x, want := range v.negLnU {
		if got := NegLnU(x).Text('e', TicketDigits-1); got != want {
			t.Errorf("NegLnU(%#x) = %s, want %s", x, got, want)
		}
	}
}
