package syncer_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"math/big"
	"os"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

// protocolVectors are the hashed encodings of docs/PROTOCOL.md §5–§8 for a
// second implementation to check: spec hash, fragment and model hashes,
// round-commit hash, run root, the election record, transcript blob and
// attestation list with their content hashes, and a signed version-2
// receipt with its signing preimage.
type protocolVectors struct {
	Comment       string          `json:"comment"`
	Spec          json.RawMessage `json:"spec"`
	SpecJCSHex    string          `json:"spec_jcs_hex"`
	SpecHash      wire.Hash       `json:"spec_hash"`
	FragmentHex   string          `json:"fragment_safetensors_hex"`
	FragmentHash  wire.Hash       `json:"fragment_hash"`
	ModelHash     wire.Hash       `json:"model_hash_of_two_copies"`
	RoundCommit   json.RawMessage `json:"round_commit"`
	RoundJCSHex   string          `json:"round_commit_jcs_hex"`
	RoundHash     wire.Hash       `json:"round_commit_hash"`
	RunRoot       wire.Hash       `json:"run_root_of_spec_round_model"`
	SyncerSeedHex string          `json:"syncer_seed_hex"`
	Election      json.RawMessage `json:"election"`
	Transcript    string          `json:"transcript_blob"`
	TranscriptH   wire.Hash       `json:"transcript_hash"`
	Attestations  string          `json:"attestation_list"`
	AttestationsH wire.Hash       `json:"attestations_hash"`
	Receipt       json.RawMessage `json:"receipt"`
	ReceiptPreHex string          `json:"receipt_preimage_hex"`
}

func TestProtocolVectors(t *testing.T) {
	syncerKey, _ := did.FromSeed(did.KindMachine, bytes.Repeat([]byte{7}, 32))
	sponsor, _ := did.FromSeed(did.KindHuman, bytes.Repeat([]byte{1}, 32))
	trainer, _ := did.FromSeed(did.KindMachine, bytes.Repeat([]byte{2}, 32))
	// The vectors' spec says bf16 (its hash is pinned); the vectors hash
	// encodings and never post it.
	specRaw := specDtype("bf16", "vector-task", sponsor.DID.String(), 1, 1, 1, 1)
	_, canon, err := wire.ParseSpec(specRaw)
	if err != nil {
		t.Fatal(err)
	}
	v := protocolVectors{Comment: "docs/PROTOCOL.md §5-§8; regenerate with go test ./syncer -run TestProtocolVectors -update",
		Spec: canon, SpecJCSHex: hex.EncodeToString(canon), SpecHash: wire.SpecHash(canon)}
	frag, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("layer0.w", []int64{2, 2}, []float32{1, -2, 0.5, 0.25})}, nil)
	v.FragmentHex, v.FragmentHash = hex.EncodeToString(frag), wire.ContentHash(frag)
	v.ModelHash = machine.ModelHash([]wire.Hash{v.FragmentHash, v.FragmentHash})
	rc := wire.RoundCommit{TaskID: "vector-task", Round: 0, Missed: []string{}, Evicted: []string{}, Joined: []string{}, Left: []string{},
		Equivocations: []wire.Hash{}, ModelHash: machine.ModelHash([]wire.Hash{v.FragmentHash}),
		Fragments: []wire.FragmentCommit{{Fragment: 0, Status: wire.FragAggregated, Rule: "Mean", RuleParams: json.RawMessage(`{}`),
			Inputs:        []wire.CommitInput{{TrainerDID: trainer.DID.String(), PayloadHash: wire.ContentHash([]byte("payload")), Selected: true}},
			AggregateHash: wire.ContentHash([]byte("aggregate")), WeightsBefore: wire.ContentHash([]byte("before")), WeightsAfter: v.FragmentHash,
			MomentumAfter: wire.ContentHash([]byte("momentum")), Fuel: 12345, Syncer: syncerKey.DID.String(), Ticket: 0}}}
	v.RoundCommit, _ = json.Marshal(rc)
	rj, _ := jcs.Transform(v.RoundCommit)
	v.RoundJCSHex = hex.EncodeToString(rj)
	if v.RoundHash, err = audit.RoundCommitHash(&rc); err != nil {
		t.Fatal(err)
	}
	v.RunRoot = audit.RunRoot(v.SpecHash, []wire.Hash{v.RoundHash}, rc.ModelHash)
	alpha := election.Alpha("vector-task", v.SpecHash)
	entrant, err := election.Enter(syncerKey.Priv, syncerKey.DID.String(), big.NewInt(1000), alpha)
	if err != nil {
		t.Fatal(err)
	}
	el, err := election.Record(alpha, []election.Entrant{entrant})
	if err != nil {
		t.Fatal(err)
	}
	v.Election, _ = json.Marshal(el)
	atts := []wire.Hash{wire.SHA256([]byte("evidence"))}
	r, blob, err := audit.BuildReceipt(audit.ReceiptInput{TaskSpec: canon, InitModelHash: wire.ContentHash([]byte("init-model")),
		InitWeightsHash: wire.ContentHash([]byte("init-file")), FinalModelHash: rc.ModelHash, Rounds: []wire.RoundCommit{rc},
		RoundRoots: []wire.Hash{v.RoundHash}, PluginHashes: []wire.Hash{}, Engine: json.RawMessage(`{"engine":"native-go/v1"}`),
		AttestationDigests: atts, Election: &el,
		Rewards:       []wire.Payout{{DID: trainer.DID.String(), Reward: "1000000000000000000000", Refund: "10", Slashed: "0", WeightSum: "4"}},
		SponsorRefund: "0", SyncerDID: syncerKey.DID.String()})
	if err != nil {
		t.Fatal(err)
	}
	if r.RunRoot != v.RunRoot {
		t.Fatal("receipt run root")
	}
	list, listHash := audit.AttestationList(atts)
	v.Transcript, v.TranscriptH, v.Attestations, v.AttestationsH = string(blob), r.TranscriptHash, string(list), listHash
	pre, err := audit.ReceiptPreimage(r)
	if err != nil {
		t.Fatal(err)
	}
	r.Signature = syncerKey.Sign(pre)
	v.SyncerSeedHex, v.ReceiptPreHex = hex.EncodeToString(bytes.Repeat([]byte{7}, 32)), hex.EncodeToString(pre)
	v.Receipt, _ = json.Marshal(r)
	if audit.VerifyReceipt(v.Receipt, v.RunRoot[:]) != 1 {
		t.Fatal(audit.CheckReceipt(v.Receipt, v.RunRoot[:]))
	}
	if err := audit.CheckReceiptFull(v.Receipt, blob); err != nil {
		t.Fatal(err)
	}
	got, _ := json.MarshalIndent(v, "", "  ")
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile("testdata/vectors.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("syncer/testdata/vectors.json is stale or an encoding changed")
	}
}
