package syncer_test

// The version-1 receipt and its verification, frozen as they were before the
// compact receipt (commit dfdf21f, syncer/receipt.go), kept only so that
// BenchmarkVerifyReceipt compares v1 and v2 in one run. Nodes refuse v1
// receipts (syncer.ErrReceiptV1).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

type receiptV1 struct {
	Version            int                `json:"version"`
	TaskID             string             `json:"task_id"`
	RunRoot            wire.Hash          `json:"run_root"`
	TaskSpec           json.RawMessage    `json:"task_spec"`
	SpecHash           wire.Hash          `json:"spec_hash"`
	InitModelHash      wire.Hash          `json:"init_model_hash"`
	InitWeightsHash    wire.Hash          `json:"init_weights_hash"`
	FinalModelHash     wire.Hash          `json:"final_model_hash"`
	Transcript         []wire.RoundCommit `json:"transcript"`
	PluginHashes       []wire.Hash        `json:"plugin_hashes"`
	Engine             json.RawMessage    `json:"engine"`
	AttestationDigests []wire.Hash        `json:"attestation_digests"`
	Rewards            []wire.Payout      `json:"reward_distribution"`
	SponsorRefund      string             `json:"sponsor_refund"`
	SyncerDID          string             `json:"syncer_did"`
	Signature          wire.HexBytes      `json:"signature"`
}

func v1Preimage(rc *receiptV1) ([]byte, error) {
	c := *rc
	c.Signature, c.Transcript = nil, nil
	raw, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "signature")
	delete(m, "transcript")
	raw, _ = json.Marshal(m)
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, err
	}
	return wire.NewCanon("tenzro/train/receipt/v1").Bytes(canon).Out(), nil
}

// v1Receipt is s's run as a signed version-1 receipt.
func v1Receipt(tb testing.TB, s *synthRun) []byte {
	tb.Helper()
	rc := &receiptV1{Version: 1, TaskID: s.rc.TaskID, RunRoot: s.rc.RunRoot, TaskSpec: s.rc.TaskSpec, SpecHash: s.rc.SpecHash,
		InitModelHash: s.rc.InitModelHash, InitWeightsHash: s.rc.InitWeightsHash, FinalModelHash: s.rc.FinalModelHash,
		Transcript: s.in.Rounds, PluginHashes: s.rc.PluginHashes, Engine: s.rc.Engine, AttestationDigests: []wire.Hash{}, // Open tier, as the 21 MB receipt
		Rewards: s.rc.Rewards, SponsorRefund: s.rc.SponsorRefund, SyncerDID: s.rc.SyncerDID}
	pre, err := v1Preimage(rc)
	if err != nil {
		tb.Fatal(err)
	}
	rc.Signature = s.keys[rc.SyncerDID].Sign(pre)
	raw, err := json.Marshal(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// v1Check is the v1 CheckReceipt.
func v1Check(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var rc receiptV1
	if err := dec.Decode(&rc); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	if err := wire.CheckStrictJSON(b, wire.StrictJSONOptions{}); err != nil {
		return err
	}
	canon, err := jcs.Transform(rc.TaskSpec)
	if err != nil {
		return err
	}
	if wire.SpecHash(canon) != rc.SpecHash {
		return errors.New("spec hash")
	}
	spec, _, err := wire.ParseSpec(rc.TaskSpec)
	if err != nil {
		return err
	}
	if spec.TaskID != rc.TaskID {
		return errors.New("task id")
	}
	rounds := make([]wire.Hash, len(rc.Transcript))
	for i := range rc.Transcript {
		if rc.Transcript[i].Round != uint64(i) {
			return fmt.Errorf("round %d", i)
		}
		if rounds[i], err = v1RoundCommitHash(&rc.Transcript[i]); err != nil {
			return err
		}
	}
	if n := len(rc.Transcript); n > 0 && rc.Transcript[n-1].ModelHash != rc.FinalModelHash {
		return errors.New("final model")
	}
	if audit.RunRoot(rc.SpecHash, rounds, rc.FinalModelHash) != rc.RunRoot {
		return errors.New("run root")
	}
	pre, err := v1Preimage(&rc)
	if err != nil {
		return err
	}
	if err := did.Verify(rc.SyncerDID, pre, rc.Signature); err != nil {
		return err
	}
	for _, p := range rc.Rewards {
		for _, v := range []string{p.Reward, p.Refund, p.Slashed, p.WeightSum} {
			if _, err := wire.ParseAmount(v); err != nil {
				return err
			}
		}
	}
	if !sort.SliceIsSorted(rc.Rewards, func(i, j int) bool { return rc.Rewards[i].DID < rc.Rewards[j].DID }) {
		return errors.New("order")
	}
	return nil
}

// TestV1ReceiptRefusedByV2: a genuine v1 receipt is refused with the precise error.
func TestV1ReceiptRefusedByV2(t *testing.T) {
	s := newSynthRun(t, 4, 2)
	v1 := v1Receipt(t, s)
	if err := v1Check(v1); err != nil {
		t.Fatal(err)
	}
	if err := audit.CheckReceipt(v1, nil); !errors.Is(err, audit.ErrReceiptV1) {
		t.Fatal(err)
	}
}

// v1RoundCommitHash is RoundCommitHash as v1 computed it: marshal, then the
// generic JCS transform (same bytes as CanonicalRoundCommit, slower).
func v1RoundCommitHash(rc *wire.RoundCommit) (wire.Hash, error) {
	raw, err := json.Marshal(rc)
	if err != nil {
		return wire.Hash{}, err
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return wire.Hash{}, err
	}
	return wire.NewCanon(wire.DomainRoundCommit).Bytes(canon).Sum(), nil
}
