package wire_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	mathbig "math/big"
	"strings"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// The vectors of docs/protocol/challenges.md. A second implementation must
// produce these bytes.
const (
	vecResultHash    = "36cafa6ec3b4e5d30d62bc631381190b743d8151b8d6bbc83e34f6eeb12fbe10"
	vecChallengeID   = "1fc87012fc1aa7b2bc95ab51723c4ef53ff4dad1f583c8379bd4b9debbce42d4"
	vecChallengePre  = "190cb0219e3d16cb9754ab70ec9def1b71479eeb0abfd7b4c07527780d88facc"
	vecChallengeSig  = "b98e720513228da3b4735e9b7da296a4a09151275305f38ee928fb0c0a4e7a32e8997e38f8da06bbaab8ce8e1461e26bf7ed8652bbcd4c0a3c678f3766a7800f"
	vecChallengeTx   = `{"type":"tenzro_training_challenge","params":{"task_id":"run-1","round":2,"fragment":1,"challenger_did":"did:tenzro:human:z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z","result_hash":"36cafa6ec3b4e5d30d62bc631381190b743d8151b8d6bbc83e34f6eeb12fbe10","bond":"1000000000000000000","chain_id":"tenzro-testnet","nonce":9,"signature":"b98e720513228da3b4735e9b7da296a4a09151275305f38ee928fb0c0a4e7a32e8997e38f8da06bbaab8ce8e1461e26bf7ed8652bbcd4c0a3c678f3766a7800f"}}`
	vecVoteAddress   = "5c29b78f10a35a49a6231d08ee840a04bcc3a37a"
	vecVotePre       = "b32be6222753ba375de6e0a07aeb44d6bf1dccc67939579c729a6db5bff2ae5a"
	vecVoteSig       = "5b0a1cf133b1f1dd9c2d69b1656b3e6477485640c2608f1cced7fab310b87148d03bfec77802343ecf832f12ceed1f56227c4a0328bd55e075b49d922bc84c07"
	vecVoteTx        = `{"type":"tenzro_training_challengeVote","params":{"challenge":"1fc87012fc1aa7b2bc95ab51723c4ef53ff4dad1f583c8379bd4b9debbce42d4","result_hash":"36cafa6ec3b4e5d30d62bc631381190b743d8151b8d6bbc83e34f6eeb12fbe10","validator":"5c29b78f10a35a49a6231d08ee840a04bcc3a37a","signature":"5b0a1cf133b1f1dd9c2d69b1656b3e6477485640c2608f1cced7fab310b87148d03bfec77802343ecf832f12ceed1f56227c4a0328bd55e075b49d922bc84c07"}}`
	vecUnavailPre    = "855a7e2015df502645e09e038184ef740c2276b7d0fbdc4e26da1d78c9274d67"
	vecChallengerDID = "did:tenzro:human:z6MkvDqGT54cXesYGvABpF1UapVNwjCqRcafi4Px6Thv5T3Z"
)

// vecCommit is the fragment commit of the FragmentResultHash vector.
func vecCommit() *wire.FragmentCommit {
	return &wire.FragmentCommit{Fragment: 1, Status: wire.FragAggregated, Rule: "Mean",
		Inputs: []wire.CommitInput{
			{TrainerDID: "did:a", PayloadHash: wire.ContentHash([]byte("a")), Selected: true},
			{TrainerDID: "did:b", PayloadHash: wire.ContentHash([]byte("b"))},
			{TrainerDID: "did:c", PayloadHash: wire.ContentHash([]byte("c")), Rejected: "payload hash mismatch"},
		},
		AggregateHash: wire.ContentHash([]byte("aggregate")), WeightsBefore: wire.ContentHash([]byte("before")),
		WeightsAfter: wire.ContentHash([]byte("weights")), MomentumAfter: wire.ContentHash([]byte("momentum")), Fuel: 12345}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

type vecSigner struct{ priv ed25519.PrivateKey }

func (v vecSigner) address() []byte {
	s := sha256.Sum256(v.priv.Public().(ed25519.PublicKey))
	return s[:20]
}

func TestChallengeVectors(t *testing.T) {
	fc := vecCommit()
	res := wire.FragmentResultHash(fc)
	check := func(name, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	check("FragmentResultHash", res.String(), vecResultHash)
	// What is not computed does not count: the rejection's reason, the
	// DIDs and payload hashes, the rule, the weights before, the syncer.
	fc2 := vecCommit()
	fc2.Inputs[2].Rejected, fc2.Inputs[0].TrainerDID, fc2.Rule, fc2.Syncer = "another reason", "did:x", "Median", "did:s"
	fc2.WeightsBefore = wire.Hash{}
	if wire.FragmentResultHash(fc2) != res {
		t.Error("FragmentResultHash depends on a field that re-execution does not compute")
	}
	// What is computed does.
	for i, mut := range []func(*wire.FragmentCommit){
		func(c *wire.FragmentCommit) { c.Status = wire.FragNoQuorum },
		func(c *wire.FragmentCommit) { c.Inputs[1].Selected = true },
		func(c *wire.FragmentCommit) { c.Inputs[1].Rejected = "x" },
		func(c *wire.FragmentCommit) { c.Inputs = c.Inputs[:2] },
		func(c *wire.FragmentCommit) { c.AggregateHash[0] ^= 1 },
		func(c *wire.FragmentCommit) { c.WeightsAfter[0] ^= 1 },
		func(c *wire.FragmentCommit) { c.MomentumAfter[0] ^= 1 },
		func(c *wire.FragmentCommit) { c.Fuel++ },
	} {
		c := vecCommit()
		mut(c)
		if wire.FragmentResultHash(c) == res {
			t.Errorf("mutation %d does not change FragmentResultHash", i)
		}
	}

	k, err := did.FromSeed(did.KindHuman, bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	check("challenger DID", k.DID.String(), vecChallengerDID)
	block := sha256.Sum256([]byte("block"))
	id := wire.ChallengeID("run-1", 2, 1, k.DID.String(), 9, block[:])
	check("ChallengeID", id.String(), vecChallengeID)

	ct := wire.ChallengeTx{TaskID: "run-1", Round: 2, Fragment: 1, ChallengerDID: k.DID.String(), ResultHash: res, Bond: wire.DefaultChallengeBond, Signed: wire.Signed{ChainID: "tenzro-testnet", Nonce: 9}}
	check("SHA-256(challenge preimage)", sha(ct.Preimage()), vecChallengePre)
	ct.Signature = k.Sign(ct.Preimage())
	check("challenge signature", hex.EncodeToString(ct.Signature), vecChallengeSig)
	raw, err := wire.EncodeTx(wire.TxChallenge, &ct)
	if err != nil {
		t.Fatal(err)
	}
	check("challenge tx", string(raw), vecChallengeTx)

	v := vecSigner{ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))}
	check("validator address", hex.EncodeToString(v.address()), vecVoteAddress)
	vt := wire.ChallengeVoteTx{Challenge: id, ResultHash: res, Validator: v.address()}
	check("SHA-256(vote preimage)", sha(vt.Preimage()), vecVotePre)
	vt.Signature = ed25519.Sign(v.priv, vt.Preimage())
	check("vote signature", hex.EncodeToString(vt.Signature), vecVoteSig)
	raw, err = wire.EncodeTx(wire.TxChallengeVote, &vt)
	if err != nil {
		t.Fatal(err)
	}
	check("vote tx", string(raw), vecVoteTx)
	un := wire.ChallengeVoteTx{Challenge: id, Unavailable: true, Validator: v.address()}
	check("SHA-256(unavailable vote preimage)", sha(un.Preimage()), vecUnavailPre)

	for _, s := range []string{vecChallengeTx, vecVoteTx} {
		tx, err := wire.DecodeTx([]byte(s))
		if err != nil {
			t.Fatalf("vector tx does not decode: %v", err)
		}
		re, _ := wire.EncodeTx(tx.Type, tx.Params())
		if string(re) != s {
			t.Errorf("vector tx does not re-encode to itself:\n%s\n%s", re, s)
		}
	}
}

func TestChallengeSpecFields(t *testing.T) {
	neg, big := int64(-1), int64(wire.MaxChallengeWindowBlocks+1)
	for name, c := range map[string]struct {
		s    wire.TaskSpec
		want string
	}{
		"negative window": {wire.TaskSpec{ChallengeWindowBlocks: &neg}, "challenge_window_blocks"},
		"window too long": {wire.TaskSpec{ChallengeWindowBlocks: &big}, "challenge_window_blocks"},
		"vote window":     {wire.TaskSpec{VoteWindowBlocks: -3}, "vote_window_blocks"},
		"free challenge":  {wire.TaskSpec{ChallengeBond: "0"}, "challenge_bond"},
		"bad bond":        {wire.TaskSpec{ChallengeBond: "1.5"}, "challenge_bond"},
		"bps over 10000":  {wire.TaskSpec{SyncerSlash: "10001bps"}, "syncer_slash"},
		"bps not decimal": {wire.TaskSpec{SyncerSlash: "05bps"}, "syncer_slash"},
		"committee":       {wire.TaskSpec{ChallengeCommittee: -1}, "challenge_committee"},
	} {
		if err := c.s.ValidateChallenges(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", name, err, c.want)
		}
	}
	var s wire.TaskSpec
	if err := s.ValidateChallenges(); err != nil || s.Bond() != wire.DefaultChallengeBond || s.VoteWindow() != wire.DefaultVoteWindowBlocks ||
		s.ChallengeWindow(7) != 7 || s.SyncerSlashRule().Bps != 5000 {
		t.Fatalf("defaults: %v", err)
	}
	for in, want := range map[string]string{"2500bps": "250", "10000bps": "1000", "300": "300", "5000": "1000"} {
		r, err := wire.ParseSyncerSlash(in)
		if err != nil || r.Of(new(mathbig.Int).SetInt64(1000)).String() != want {
			t.Errorf("syncer_slash %s of 1000: %v %v, want %s", in, r, err, want)
		}
	}
}
