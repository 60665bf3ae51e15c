package syncer

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/syncer/runroot"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// ReceiptVersion is the receipt format version.
const ReceiptVersion = 1

// MaxReceiptBytes bounds a receipt accepted for verification.
const MaxReceiptBytes = 256 << 20

// seal pays out the reward pool, refunds stakes and writes the signed receipt.
func (n *Node) seal(ctx context.Context, b *Batch, r *runState, lt *ledgerTx, finalModel wire.Hash) error {
	task := r.spec.TaskID
	pool, err := lt.balance(acctEscrow(task))
	if err != nil {
		return err
	}
	pool = new(big.Int).Set(pool)
	shares := rewardShares(pool, r.Trainers)
	var payouts []wire.Payout
	paid := new(big.Int)
	for i, t := range r.Trainers { // sorted by DID
		share := shares[i]
		if err := lt.transfer(acctEscrow(task), acctDID(t.DID), share, "reward"); err != nil {
			return err
		}
		paid.Add(paid, share)
		t.Reward = share.String()
		refund, err := lt.balance(acctStake(task, t.DID))
		if err != nil {
			return err
		}
		refund = new(big.Int).Set(refund)
		if err := lt.transfer(acctStake(task, t.DID), acctDID(t.DID), refund, "stake refund at seal"); err != nil {
			return err
		}
		payouts = append(payouts, wire.Payout{DID: t.DID, Reward: share.String(), Refund: refund.String(), Slashed: orDefault(t.Slashed, "0"), WeightSum: orDefault(t.Weight, "0")})
	}
	rest := new(big.Int).Sub(pool, paid)
	if err := lt.transfer(acctEscrow(task), acctDID(r.spec.SponsorDID), rest, "unpaid remainder back to sponsor"); err != nil {
		return err
	}
	// The transcript of all rounds, including the one being closed (staged in b).
	var transcript []wire.RoundCommit
	for round := uint64(0); round < uint64(len(r.Roots)); round++ {
		raw, err := n.kv.Get(ctx, KSTranscript, commitKey(task, round))
		if errors.Is(err, ErrNotFound) {
			raw, err = pendingOp(b, KSTranscript, commitKey(task, round), err)
		}
		if err != nil {
			return fmt.Errorf("transcript round %d: %w", round, err)
		}
		var rc wire.RoundCommit
		if err := json.Unmarshal(raw, &rc); err != nil {
			return err
		}
		transcript = append(transcript, rc)
	}
	prof := n.eng.Profile()
	profRaw, _ := json.Marshal(prof)
	atts := append([]wire.Hash{}, r.Attestations...)
	if ev := n.cfg.Signer.Evidence(); len(ev) > 0 {
		atts = append(atts, wire.SHA256(ev))
	}
	rc := &wire.Receipt{Version: ReceiptVersion, TaskID: task, TaskSpec: r.Spec, SpecHash: r.SpecHash, InitModelHash: r.InitModel, InitWeightsHash: r.InitFile,
		FinalModelHash: finalModel, Transcript: transcript, PluginHashes: orHashes(r.Plugins), Engine: profRaw,
		AttestationDigests: atts, Rewards: payouts, SponsorRefund: rest.String(), SyncerDID: n.cfg.Signer.DID()}
	rc.RunRoot = RunRoot(r.SpecHash, r.Roots, finalModel)
	pre, err := ReceiptPreimage(rc)
	if err != nil {
		return err
	}
	sig, err := n.cfg.Signer.Sign(ctx, pre)
	if err != nil {
		return fmt.Errorf("sign receipt: %w", err)
	}
	rc.Signature = sig
	raw, err := json.Marshal(rc)
	if err != nil {
		return err
	}
	b.Set(KSReceipts, runKey(task), raw)
	r.Status = wire.StatusSealed
	n.log.Info("run sealed", "task", task, "run_root", rc.RunRoot, "final_model", finalModel)
	n.announce(ctx, Event{TaskID: task, Kind: "sealed", Round: r.Round, ModelHash: finalModel, Detail: rc.RunRoot})
	return nil
}

func pendingOp(b *Batch, ks Keyspace, key []byte, orig error) ([]byte, error) {
	for i := len(b.Ops) - 1; i >= 0; i-- {
		if op := b.Ops[i]; op.KS == ks && bytes.Equal(op.Key, key) {
			return op.Value, nil
		}
	}
	return nil, orig
}

// RunRoot is the Merkle root (syncer/runroot) over the leaves: spec hash,
// each round commit hash in round order, final model hash.
func RunRoot(specHash wire.Hash, rounds []wire.Hash, final wire.Hash) wire.Hash {
	return runroot.Root(runLeaves(specHash, rounds, final))
}

func runLeaves(specHash wire.Hash, rounds []wire.Hash, final wire.Hash) [][]byte {
	leaves := make([][]byte, 0, len(rounds)+2)
	leaves = append(leaves, specHash[:])
	for i := range rounds {
		leaves = append(leaves, rounds[i][:])
	}
	return append(leaves, final[:])
}

// ReceiptPreimage is what the syncer signs: Str(DomainReceipt) ‖
// Bytes(JCS(receipt JSON without the "signature" and "transcript" members)).
// The transcript is bound through run_root, which the preimage contains and
// verification recomputes, so it is not canonicalized twice.
func ReceiptPreimage(rc *wire.Receipt) ([]byte, error) {
	c := *rc
	c.Signature = nil
	c.Transcript = nil
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
		return nil, fmt.Errorf("canonicalize receipt: %w", err)
	}
	return wire.NewCanon(wire.DomainReceipt).Bytes(canon).Out(), nil
}

// ParseReceipt decodes a receipt strictly.
func ParseReceipt(b []byte) (*wire.Receipt, error) {
	if len(b) > MaxReceiptBytes {
		return nil, fmt.Errorf("receipt: %d bytes, limit %d", len(b), MaxReceiptBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var rc wire.Receipt
	if err := dec.Decode(&rc); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	if dec.More() {
		return nil, errors.New("receipt: trailing data")
	}
	if err := wire.CheckStrictJSON(b, wire.StrictJSONOptions{}); err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	return &rc, nil
}

// CheckReceipt verifies a serialized receipt: its spec hash, every round
// commit hash, the run root (against the receipt's own and, when root is not
// nil, the claimed one), and the syncer's signature. It says why when not.
func CheckReceipt(receipt []byte, root []byte) error {
	_, _, err := checkReceipt(receipt, root)
	return err
}

// checkReceipt is CheckReceipt returning the parsed receipt and its round
// commit hashes, so callers that go on to use them parse and hash once.
func checkReceipt(receipt []byte, root []byte) (*wire.Receipt, []wire.Hash, error) {
	rc, err := ParseReceipt(receipt)
	if err != nil {
		return nil, nil, err
	}
	if rc.Version != ReceiptVersion {
		return nil, nil, fmt.Errorf("receipt version %d unsupported (want %d)", rc.Version, ReceiptVersion)
	}
	canon, err := jcs.Transform(rc.TaskSpec)
	if err != nil {
		return nil, nil, fmt.Errorf("task_spec: %w", err)
	}
	if got := wire.SpecHash(canon); got != rc.SpecHash {
		return nil, nil, fmt.Errorf("spec_hash mismatch: task_spec hashes to %s, receipt says %s", got, rc.SpecHash)
	}
	spec, _, err := wire.ParseSpec(rc.TaskSpec)
	if err != nil {
		return nil, nil, err
	}
	if spec.TaskID != rc.TaskID {
		return nil, nil, fmt.Errorf("task_id %q differs from the spec's %q", rc.TaskID, spec.TaskID)
	}
	rounds := make([]wire.Hash, len(rc.Transcript))
	for i := range rc.Transcript {
		if rc.Transcript[i].Round != uint64(i) {
			return nil, nil, fmt.Errorf("transcript entry %d is for round %d", i, rc.Transcript[i].Round)
		}
		if rounds[i], err = RoundCommitHash(&rc.Transcript[i]); err != nil {
			return nil, nil, err
		}
	}
	if n := len(rc.Transcript); n > 0 && rc.Transcript[n-1].ModelHash != rc.FinalModelHash {
		return nil, nil, fmt.Errorf("final_model_hash %s differs from the last round's model hash %s", rc.FinalModelHash, rc.Transcript[n-1].ModelHash)
	}
	got := RunRoot(rc.SpecHash, rounds, rc.FinalModelHash)
	if got != rc.RunRoot {
		return nil, nil, fmt.Errorf("run_root mismatch: the receipt's contents give %s, its run_root field says %s", got, rc.RunRoot)
	}
	if root != nil && !bytes.Equal(root, got[:]) {
		return nil, nil, fmt.Errorf("run root mismatch: the receipt gives %s, the claimed root is %s", got, hex.EncodeToString(root))
	}
	pre, err := ReceiptPreimage(rc)
	if err != nil {
		return nil, nil, err
	}
	if err := did.Verify(rc.SyncerDID, pre, rc.Signature); err != nil {
		return nil, nil, fmt.Errorf("syncer signature (%s): %w", rc.SyncerDID, err)
	}
	if err := checkPayouts(rc); err != nil {
		return nil, nil, err
	}
	return rc, rounds, nil
}

func checkPayouts(rc *wire.Receipt) error {
	for _, p := range rc.Rewards {
		for _, v := range []string{p.Reward, p.Refund, p.Slashed, p.WeightSum} {
			if _, err := wire.ParseAmount(v); err != nil {
				return fmt.Errorf("reward_distribution %s: %w", p.DID, err)
			}
		}
	}
	if !sort.SliceIsSorted(rc.Rewards, func(i, j int) bool { return rc.Rewards[i].DID < rc.Rewards[j].DID }) {
		return errors.New("reward_distribution is not in DID order")
	}
	return nil
}

// VerifyReceipt mirrors the seed's TRAINING_VERIFY precompile (0x1008):
// input a serialized receipt and a claimed run root (nil: the receipt's
// own), output 1 when valid and 0 otherwise.
func VerifyReceipt(receipt []byte, root []byte) byte {
	if CheckReceipt(receipt, root) != nil {
		return 0
	}
	return 1
}

// InclusionProof proves that round's commit is a leaf of the receipt's run
// root. Leaf index = round + 1 (leaf 0 is the spec hash).
func InclusionProof(receipt []byte, round uint64) (leaf wire.Hash, index, size uint64, proof []wire.Hash, err error) {
	rc, rounds, err := checkReceipt(receipt, nil)
	if err != nil {
		return
	}
	if round >= uint64(len(rc.Transcript)) {
		err = fmt.Errorf("round %d: the receipt has %d rounds", round, len(rc.Transcript))
		return
	}
	leaves := runLeaves(rc.SpecHash, rounds, rc.FinalModelHash)
	index, size, leaf = round+1, uint64(len(leaves)), rounds[round]
	proof, err = runroot.InclusionProof(leaves, index)
	return
}

// ParseRoot parses a hex run root for the CLI/RPC.
func ParseRoot(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	h, err := wire.ParseHash(strings.TrimSpace(s))
	if err != nil {
		return nil, err
	}
	return h[:], nil
}
