package audit

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/runroot"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// ReceiptVersion is the receipt format this node builds and verifies: 2,
// the compact receipt (PROTOCOL §8). Version 1 (the transcript inline) is
// refused with ErrReceiptV1.
const ReceiptVersion = 2

// Limits of a version-2 receipt. Its size does not grow with rounds or
// submissions: what grows (round commits, attestation digests) is committed
// by hash and lives in blobs.
const (
	// MaxReceiptBytes bounds a serialized receipt.
	MaxReceiptBytes = 64 << 10
	// MaxReceiptSyncers bounds the syncers a receipt names.
	MaxReceiptSyncers = 64
	// MaxTranscriptBytes bounds a transcript blob (full verification, replay).
	MaxTranscriptBytes = 1 << 30
)

// ErrReceiptV1 is returned for a version-1 receipt: its signer was not bound
// to the run's elected syncer (a v1 receipt re-signed by any key verified),
// so it is refused rather than verified by the old rules (RATIONALE).
var ErrReceiptV1 = errors.New("receipt version 1 is not accepted: its signer is not bound to the run's election " +
	"(anyone could re-sign it) and it carries the whole transcript; fetch the run's version-2 receipt from a node " +
	"('tenzro train get-receipt')")

// BlobHash is the content hash of a blob (wire.ContentHash, BLAKE3-256):
// the transcript and attestation list hashes of a receipt are their keys in
// the blob store.
func BlobHash(b []byte) wire.Hash { return wire.ContentHash(b) }

// ReceiptInput is everything a receipt is built from; all of it is chain
// (or node) state except nothing: the signature is added afterwards.
type ReceiptInput struct {
	// TaskSpec is the run's spec as posted (canonicalized here).
	TaskSpec json.RawMessage
	// InitModelHash, InitWeightsHash and FinalModelHash: the model hash of
	// the initial weights, the content hash of the initial safetensors file,
	// the model hash after the last round.
	InitModelHash, InitWeightsHash, FinalModelHash wire.Hash
	// Rounds is the transcript: every round commit, round 0 first. Every
	// fragment commit names its Syncer and Ticket.
	Rounds []wire.RoundCommit
	// RoundRoots, when set, are the round commit hashes the state holds
	// (the run's round_roots); BuildReceipt checks they are the transcript's.
	RoundRoots []wire.Hash
	// PluginHashes are the module hashes of every plugin the run used.
	PluginHashes []wire.Hash
	// Engine is the engine profile JSON (syncer.EngineProfile).
	Engine json.RawMessage
	// AttestationDigests are the evidence digests, in acceptance order.
	AttestationDigests []wire.Hash
	// Election is the run's stored election record (every entrant).
	Election *wire.Election
	// Rewards is the settlement, one line per trainer in DID order, and
	// SponsorRefund what the escrow returned to the sponsor.
	Rewards       []wire.Payout
	SponsorRefund string
	// SyncerDID is who signs the receipt: an entrant of the election.
	SyncerDID string
	// Challenges are the run's challenges in the order the chain took them
	// (every one decided: a run seals only when every round is final).
	Challenges []wire.ReceiptChallenge
}

// BuildReceipt builds a run's unsigned receipt and its transcript blob from
// in. It is pure: the seal, the chain's check of a signReceipt transaction
// and tests build the same bytes from the same state. It refuses an input
// that would give an invalid receipt (a syncer that is not the entrant at its
// ticket, a settlement that does not conserve value, a receipt over
// MaxReceiptBytes). Sign ReceiptPreimage(rc) and set rc.Signature.
func BuildReceipt(in ReceiptInput) (*wire.Receipt, []byte, error) {
	canon, err := jcs.Transform(in.TaskSpec)
	if err != nil {
		return nil, nil, fmt.Errorf("build receipt: task_spec: %w", err)
	}
	spec, _, err := wire.ParseSpec(canon)
	if err != nil {
		return nil, nil, fmt.Errorf("build receipt: %w", err)
	}
	specHash := wire.SpecHash(canon)
	blob, roots, err := TranscriptBlob(in.Rounds)
	if err != nil {
		return nil, nil, fmt.Errorf("build receipt: %w", err)
	}
	for i, rc := range in.Rounds {
		if rc.Round != uint64(i) || rc.TaskID != spec.TaskID {
			return nil, nil, fmt.Errorf("build receipt: transcript entry %d is round %d of %q", i, rc.Round, rc.TaskID)
		}
	}
	if in.RoundRoots != nil {
		if len(in.RoundRoots) != len(roots) {
			return nil, nil, fmt.Errorf("build receipt: %d round roots, %d round commits", len(in.RoundRoots), len(roots))
		}
		for i := range roots {
			if roots[i] != in.RoundRoots[i] {
				return nil, nil, fmt.Errorf("build receipt: round %d commit hashes to %s, the state's round root is %s", i, roots[i], in.RoundRoots[i])
			}
		}
	}
	if n := len(in.Rounds); n > 0 && in.Rounds[n-1].ModelHash != in.FinalModelHash {
		return nil, nil, fmt.Errorf("build receipt: final model hash %s is not the last round's %s", in.FinalModelHash, in.Rounds[n-1].ModelHash)
	}
	if in.Election == nil {
		return nil, nil, fmt.Errorf("build receipt: run %s has no election record: a receipt must name its elected syncers", spec.TaskID)
	}
	if !bytes.Equal(in.Election.Alpha, election.Alpha(spec.TaskID, specHash)) {
		return nil, nil, fmt.Errorf("build receipt: the election's alpha is not run %s's", spec.TaskID)
	}
	syncers, err := receiptSyncers(*in.Election, in.Rounds, in.SyncerDID)
	if err != nil {
		return nil, nil, fmt.Errorf("build receipt: %w", err)
	}
	_, attHash := AttestationList(in.AttestationDigests)
	slashed := new(big.Int)
	for _, p := range in.Rewards {
		v, err := wire.ParseAmount(p.Slashed)
		if err != nil {
			return nil, nil, fmt.Errorf("build receipt: reward line %s: slashed: %w", p.DID, err)
		}
		slashed.Add(slashed, v)
	}
	rc := &wire.Receipt{
		Version:          ReceiptVersion,
		TaskID:           spec.TaskID,
		TaskSpec:         canon,
		SpecHash:         specHash,
		RunRoot:          RunRoot(specHash, roots, in.FinalModelHash),
		InitModelHash:    in.InitModelHash,
		InitWeightsHash:  in.InitWeightsHash,
		FinalModelHash:   in.FinalModelHash,
		Rounds:           uint64(len(in.Rounds)),
		TranscriptHash:   BlobHash(blob),
		TranscriptSize:   uint64(len(blob)),
		PluginHashes:     orHashes(in.PluginHashes),
		Engine:           in.Engine,
		AttestationsHash: attHash,
		AttestationCount: uint64(len(in.AttestationDigests)),
		ElectionAlpha:    append(wire.HexBytes{}, in.Election.Alpha...),
		Syncers:          syncers,
		RewardPool:       spec.RewardPool,
		SlashedTotal:     slashed.String(),
		Rewards:          in.Rewards,
		SponsorRefund:    in.SponsorRefund,
		SyncerDID:        in.SyncerDID,
	}
	if len(in.Challenges) > 0 {
		_, h, esc, err := ChallengeList(in.Challenges)
		if err != nil {
			return nil, nil, fmt.Errorf("build receipt: challenges: %w", err)
		}
		for i := range in.Challenges {
			if err := checkChallengeEntry(&in.Challenges[i], uint64(len(in.Rounds))); err != nil {
				return nil, nil, fmt.Errorf("build receipt: %w", err)
			}
		}
		rc.ChallengesHash, rc.ChallengeCount, rc.ChallengeEscrow = &h, uint64(len(in.Challenges)), esc.String()
	}
	if rc.Rewards == nil {
		rc.Rewards = []wire.Payout{}
	}
	if len(rc.Engine) == 0 {
		rc.Engine = json.RawMessage(`{}`)
	}
	if err := CheckSettlement(rc, spec); err != nil {
		return nil, nil, fmt.Errorf("build receipt: %w", err)
	}
	sized := *rc
	sized.Signature = make(wire.HexBytes, 64)
	if raw, err := json.Marshal(&sized); err != nil {
		return nil, nil, fmt.Errorf("build receipt: %w", err)
	} else if len(raw) > MaxReceiptBytes {
		return nil, nil, fmt.Errorf("build receipt: %d bytes, limit %d (%d reward lines, %d syncers, a %d-byte spec)",
			len(raw), MaxReceiptBytes, len(rc.Rewards), len(rc.Syncers), len(canon))
	}
	return rc, blob, nil
}

// receiptSyncers lists every (DID, ticket) the fragment commits name, and
// the signer, with their election entrants, in ticket order; each must be
// the entrant at that index of the election's succession.
func receiptSyncers(el wire.Election, rounds []wire.RoundCommit, signer string) ([]wire.ReceiptSyncer, error) {
	order, err := election.Succession(el)
	if err != nil {
		return nil, fmt.Errorf("election record: %w", err)
	}
	index := make(map[string]int, len(order))
	for k, e := range order {
		index[e.DID] = k
	}
	used := map[int]bool{}
	for _, rc := range rounds {
		for _, fc := range rc.Fragments {
			if fc.Ticket >= uint64(len(order)) || order[fc.Ticket].DID != fc.Syncer {
				return nil, fmt.Errorf("round %d fragment %d was committed by %q at ticket %d, which is not the election's entrant at that ticket",
					rc.Round, fc.Fragment, fc.Syncer, fc.Ticket)
			}
			used[int(fc.Ticket)] = true
		}
	}
	k, ok := index[signer]
	if !ok {
		return nil, fmt.Errorf("signer %s is not an entrant of the run's election", signer)
	}
	used[k] = true
	out := make([]wire.ReceiptSyncer, 0, len(used))
	for k, e := range order {
		if used[k] {
			out = append(out, wire.ReceiptSyncer{DID: e.DID, Stake: e.Stake, Proof: append(wire.HexBytes{}, e.Proof...),
				Output: append(wire.HexBytes{}, e.Output...), Ticket: uint64(k)})
		}
	}
	if len(out) > MaxReceiptSyncers {
		return nil, fmt.Errorf("%d syncers, limit %d", len(out), MaxReceiptSyncers)
	}
	return out, nil
}

// TranscriptBlob is the canonical transcript: the JCS (RFC 8785) array of
// the round commits, round 0 first, i.e. "[" JCS(rc_0) "," JCS(rc_1) … "]".
// Each element is exactly the JCS bytes the round commit hash covers, so a
// verifier hashes the elements as they are; it also returns those hashes.
func TranscriptBlob(rounds []wire.RoundCommit) ([]byte, []wire.Hash, error) {
	hashes := make([]wire.Hash, len(rounds))
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range rounds {
		canon, err := CanonicalRoundCommit(&rounds[i])
		if err != nil {
			return nil, nil, fmt.Errorf("round commit %d: %w", i, err)
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(canon)
		hashes[i] = roundLeaf(canon)
	}
	buf.WriteByte(']')
	return buf.Bytes(), hashes, nil
}

// roundLeaf is the round commit hash of a commit's JCS bytes.
func roundLeaf(canon []byte) wire.Hash {
	return wire.NewCanon(wire.DomainRoundCommit).Bytes(canon).Sum()
}

// AttestationList is the attestation list blob (the JCS array of the evidence
// digests in order, as lowercase hex strings) and its content hash, which a
// receipt carries as attestations_hash.
func AttestationList(digests []wire.Hash) ([]byte, wire.Hash) {
	raw, _ := json.Marshal(orHashes(digests)) // hex strings: already canonical
	return raw, BlobHash(raw)
}

// CheckAttestations checks an attestation list blob against a checked
// receipt and returns the digests.
func CheckAttestations(rc *wire.Receipt, list []byte) ([]wire.Hash, error) {
	if BlobHash(list) != rc.AttestationsHash {
		return nil, fmt.Errorf("attestation list hashes to %s, the receipt's attestations_hash is %s", BlobHash(list), rc.AttestationsHash)
	}
	var ds []wire.Hash
	if err := json.Unmarshal(list, &ds); err != nil {
		return nil, fmt.Errorf("attestation list: %w", err)
	}
	if uint64(len(ds)) != rc.AttestationCount {
		return nil, fmt.Errorf("attestation list has %d digests, the receipt says %d", len(ds), rc.AttestationCount)
	}
	return ds, nil
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
// Bytes(JCS(receipt JSON without the "signature" member)).
func ReceiptPreimage(rc *wire.Receipt) ([]byte, error) {
	c := *rc
	c.Signature = nil
	raw, err := json.Marshal(&c)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	delete(m, "signature")
	raw, _ = json.Marshal(m)
	canon, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalize receipt: %w", err)
	}
	return wire.NewCanon(wire.DomainReceipt).Bytes(canon).Out(), nil
}

// receiptVersion reads the top-level "version" member without decoding the
// rest (a v1 receipt can be megabytes; it puts version first). 0: absent or
// not an integer.
func receiptVersion(b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return 0
	}
	for i := 0; i < 64 && dec.More(); i++ {
		t, err := dec.Token()
		if err != nil {
			return 0
		}
		if k, _ := t.(string); k == "version" {
			var v int
			if dec.Decode(&v) != nil {
				return 0
			}
			return v
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return 0
		}
	}
	return 0
}

// ParseReceipt decodes a version-2 receipt strictly: at most MaxReceiptBytes,
// no unknown or duplicate members, no trailing data. A version-1 receipt is
// ErrReceiptV1.
func ParseReceipt(b []byte) (*wire.Receipt, error) {
	if len(b) > MaxReceiptBytes {
		if receiptVersion(b) == 1 {
			return nil, ErrReceiptV1
		}
		return nil, fmt.Errorf("receipt: %d bytes, limit %d (a version-2 receipt is compact)", len(b), MaxReceiptBytes)
	}
	if v := receiptVersion(b); v != ReceiptVersion {
		if v == 1 {
			return nil, ErrReceiptV1
		}
		return nil, fmt.Errorf("receipt: version %d unsupported (want %d)", v, ReceiptVersion)
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
	if rc.Version != ReceiptVersion {
		return nil, fmt.Errorf("receipt: version %d unsupported (want %d)", rc.Version, ReceiptVersion)
	}
	return &rc, nil
}

// CheckReceipt verifies a serialized version-2 receipt offline, without its
// transcript (PROTOCOL §8): strict parse, spec hash and task id, counts
// within the spec, the election alpha, every syncer's VRF proof and output
// and their ticket order, the signer among the syncers, the signature, the
// settlement (CheckSettlement) and, when root is not nil, that the run root
// is root. It says why not.
func CheckReceipt(receipt []byte, root []byte) error {
	_, err := checkReceipt(receipt, root)
	return err
}

// checkReceipt is CheckReceipt returning the parsed receipt.
func checkReceipt(receipt []byte, root []byte) (*wire.Receipt, error) {
	rc, err := ParseReceipt(receipt)
	if err != nil {
		return nil, err
	}
	if err := checkParsed(rc, root); err != nil {
		return nil, err
	}
	return rc, nil
}

func checkParsed(rc *wire.Receipt, root []byte) error {
	canon, err := jcs.Transform(rc.TaskSpec)
	if err != nil {
		return fmt.Errorf("task_spec: %w", err)
	}
	if got := wire.SpecHash(canon); got != rc.SpecHash {
		return fmt.Errorf("spec_hash mismatch: task_spec hashes to %s, receipt says %s", got, rc.SpecHash)
	}
	spec, _, err := wire.ParseSpec(rc.TaskSpec)
	if err != nil {
		return err
	}
	if spec.TaskID != rc.TaskID {
		return fmt.Errorf("task_id %q differs from the spec's %q", rc.TaskID, spec.TaskID)
	}
	if rc.Rounds > uint64(spec.MaxRounds) {
		return fmt.Errorf("rounds %d exceeds the spec's max_rounds %d", rc.Rounds, spec.MaxRounds)
	}
	if rc.TranscriptSize < 2 || rc.TranscriptSize > MaxTranscriptBytes {
		return fmt.Errorf("transcript_size %d out of range 2..%d", rc.TranscriptSize, MaxTranscriptBytes)
	}
	if rc.AttestationCount == 0 {
		if _, h := AttestationList(nil); h != rc.AttestationsHash {
			return fmt.Errorf("attestation_count is 0 but attestations_hash %s is not the empty list's %s", rc.AttestationsHash, h)
		}
	}
	if len(rc.Engine) == 0 || rc.Engine[0] != '{' {
		return errors.New("engine: want a JSON object")
	}
	if root != nil && !bytes.Equal(root, rc.RunRoot[:]) {
		return fmt.Errorf("run root mismatch: the receipt's run root is %s, the claimed root is %s", rc.RunRoot, hex.EncodeToString(root))
	}
	if err := CheckSyncers(rc); err != nil {
		return err
	}
	pre, err := ReceiptPreimage(rc)
	if err != nil {
		return err
	}
	if err := did.Verify(rc.SyncerDID, pre, rc.Signature); err != nil {
		return fmt.Errorf("syncer signature (%s): %w", rc.SyncerDID, err)
	}
	return CheckSettlement(rc, spec)
}

// CheckSyncers checks a receipt's syncers offline: election_alpha is the
// run's (election.Alpha of task id and spec hash); 1..MaxReceiptSyncers
// entries in strictly increasing ticket index, no DID twice; every VRF proof
// verifies over the alpha with the key the DID names and gives the stated
// output; the tickets (−ln u / stake) rank in the order of their indices
// (election.Ticket.Less), so a listed syncer cannot claim a place before one
// that beat it; and the signer is one of them.
func CheckSyncers(rc *wire.Receipt) error {
	if want := election.Alpha(rc.TaskID, rc.SpecHash); !bytes.Equal(rc.ElectionAlpha, want) {
		return fmt.Errorf("election_alpha is not run %s's election input", rc.TaskID)
	}
	if len(rc.Syncers) == 0 || len(rc.Syncers) > MaxReceiptSyncers {
		return fmt.Errorf("syncers: %d entries, want 1..%d", len(rc.Syncers), MaxReceiptSyncers)
	}
	es := make([]election.Entrant, len(rc.Syncers))
	for i, s := range rc.Syncers {
		if i > 0 && s.Ticket <= rc.Syncers[i-1].Ticket {
			return fmt.Errorf("syncers: ticket %d of %s does not follow ticket %d (want strictly increasing)", s.Ticket, s.DID, rc.Syncers[i-1].Ticket)
		}
		stake, err := election.ParseStake(s.Stake)
		if err != nil {
			return fmt.Errorf("syncer %s: %w", s.DID, err)
		}
		es[i] = election.Entrant{DID: s.DID, Stake: stake, Proof: s.Proof}
	}
	_, ts, err := election.Elect(rc.ElectionAlpha, es) // proofs, keys, duplicates
	if err != nil {
		return fmt.Errorf("syncers: %w", err)
	}
	signer := false
	for i, s := range rc.Syncers {
		if !bytes.Equal(ts[i].Beta, s.Output) {
			return fmt.Errorf("syncer %s: output %s is not its proof's %s", s.DID, hex.EncodeToString(s.Output), hex.EncodeToString(ts[i].Beta))
		}
		if i > 0 && !ts[i-1].Less(ts[i]) {
			return fmt.Errorf("syncers: %s at ticket %d does not rank after %s at ticket %d (its ticket value is lower): the succession order is forged",
				s.DID, s.Ticket, rc.Syncers[i-1].DID, rc.Syncers[i-1].Ticket)
		}
		signer = signer || s.DID == rc.SyncerDID
	}
	if !signer {
		return fmt.Errorf("receipt signed by %s, which is not among the run's elected syncers", rc.SyncerDID)
	}
	return nil
}

// CheckSettlement checks a receipt's settlement (PROTOCOL §9) with the spec
// it carries: reward_pool is the spec's; lines are in strictly increasing
// DID order with canonical amounts; slashed_total = Σ slashed; with
// P = reward_pool + slashed_total (the escrow at seal: the pool plus every
// slash) and W = Σ weight, each reward = ⌊P·weight/W⌋ (0 when W = 0); and
// Σ reward + sponsor_refund = P. Stake refunds are not escrow money and
// are only checked to be amounts.
func CheckSettlement(rc *wire.Receipt, spec *wire.TaskSpec) error {
	pool, err := wire.ParseAmount(rc.RewardPool)
	if err != nil {
		return fmt.Errorf("reward_pool: %w", err)
	}
	if rc.RewardPool != spec.RewardPool {
		return fmt.Errorf("reward_pool %s is not the spec's %s", rc.RewardPool, spec.RewardPool)
	}
	slashedTotal, err := wire.ParseAmount(rc.SlashedTotal)
	if err != nil {
		return fmt.Errorf("slashed_total: %w", err)
	}
	refund, err := wire.ParseAmount(rc.SponsorRefund)
	if err != nil {
		return fmt.Errorf("sponsor_refund: %w", err)
	}
	type line struct{ reward, weight *big.Int }
	lines := make([]line, len(rc.Rewards))
	slashed, weights, rewards := new(big.Int), new(big.Int), new(big.Int)
	for i, p := range rc.Rewards {
		if i > 0 && p.DID <= rc.Rewards[i-1].DID {
			return errors.New("reward_distribution is not in strictly increasing DID order")
		}
		if _, err := did.Parse(p.DID); err != nil {
			return fmt.Errorf("reward_distribution: %w", err)
		}
		var v [4]*big.Int
		for k, s := range []string{p.Reward, p.Refund, p.Slashed, p.WeightSum} {
			if v[k], err = wire.ParseAmount(s); err != nil {
				return fmt.Errorf("reward_distribution %s: %w", p.DID, err)
			}
		}
		lines[i] = line{v[0], v[3]}
		rewards.Add(rewards, v[0])
		slashed.Add(slashed, v[2])
		weights.Add(weights, v[3])
	}
	if slashed.Cmp(slashedTotal) != 0 {
		return fmt.Errorf("slashed_total %s is not the sum of the lines' slashed, %s", slashedTotal, slashed)
	}
	escrow := new(big.Int).Add(pool, slashedTotal)
	switch {
	case rc.ChallengeCount == 0 && (rc.ChallengesHash != nil || rc.ChallengeEscrow != ""):
		return errors.New("challenges_hash or challenge_escrow without challenge_count")
	case rc.ChallengeCount > 0 && rc.ChallengesHash == nil:
		return errors.New("challenge_count without challenges_hash")
	case rc.ChallengeCount > 0:
		ce, err := wire.ParseAmount(rc.ChallengeEscrow)
		if err != nil {
			return fmt.Errorf("challenge_escrow: %w", err)
		}
		escrow.Add(escrow, ce)
	}
	for i, l := range lines {
		want := new(big.Int)
		if weights.Sign() > 0 {
			want.Mul(escrow, l.weight).Quo(want, weights)
		}
		if l.reward.Cmp(want) != 0 {
			return fmt.Errorf("reward_distribution %s: reward %s, the weights give ⌊%s·%s/%s⌋ = %s",
				rc.Rewards[i].DID, l.reward, escrow, l.weight, weights, want)
		}
	}
	if got := new(big.Int).Add(rewards, refund); got.Cmp(escrow) != 0 {
		return fmt.Errorf("settlement does not conserve the escrow: Σ reward %s + sponsor_refund %s = %s, reward_pool + slashed_total + challenge_escrow = %s",
			rewards, refund, got, escrow)
	}
	return nil
}

// CheckReceiptFull is CheckReceipt plus the transcript blob: its length and
// content hash are the receipt's; it is a JSON array of exactly `rounds`
// round commits, each in canonical (JCS) form, strictly decoded, of this
// task and numbered in order; the run root recomputed from the spec hash,
// the hash of every element and the final model hash is the receipt's; the
// last round's model hash is the final one; and every fragment commit's
// syncer is the receipt's syncer at that ticket, every listed syncer having
// committed at least one fragment except a signer ranked above every
// committer (the chain lets the next tickets sign when the committers do
// not). The transcript is bound by the run root, so this ties the signer to
// the run offline as far as the transcript can: a key that appended itself
// with a VRF proof of its own at a ticket below a committer is refused; one
// that appended itself above every committer looks like a late signer, and
// only the chain's election record tells them apart (VerifyReceiptAgainst).
func CheckReceiptFull(receipt, transcript []byte) error {
	_, _, _, err := CheckFull(receipt, transcript)
	return err
}

// CheckFull is CheckReceiptFull returning what it parsed: the receipt, the
// transcript's round commits and their leaf hashes.
func CheckFull(receipt, transcript []byte) (*wire.Receipt, []wire.RoundCommit, []wire.Hash, error) {
	rc, err := checkReceipt(receipt, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	rounds, hashes, err := CheckTranscript(rc, transcript)
	if err != nil {
		return nil, nil, nil, err
	}
	return rc, rounds, hashes, nil
}

// CheckTranscript checks a transcript blob against a receipt that has been
// checked (CheckReceipt) and returns its round commits and their hashes.
func CheckTranscript(rc *wire.Receipt, transcript []byte) ([]wire.RoundCommit, []wire.Hash, error) {
	if uint64(len(transcript)) != rc.TranscriptSize {
		return nil, nil, fmt.Errorf("transcript: %d bytes, the receipt's transcript_size is %d", len(transcript), rc.TranscriptSize)
	}
	if got := BlobHash(transcript); got != rc.TranscriptHash {
		return nil, nil, fmt.Errorf("transcript hashes to %s, the receipt's transcript_hash is %s", got, rc.TranscriptHash)
	}
	// One strict decoding pass, then the canonical encoding of what was
	// decoded must be the blob itself, element by element: no duplicate
	// member, no other spelling or order, no whitespace (RFC 8785).
	dec := json.NewDecoder(bytes.NewReader(transcript))
	dec.DisallowUnknownFields()
	var rounds []wire.RoundCommit
	if err := dec.Decode(&rounds); err != nil {
		return nil, nil, fmt.Errorf("transcript: %w", err)
	}
	if dec.More() {
		return nil, nil, errors.New("transcript: trailing data")
	}
	if uint64(len(rounds)) != rc.Rounds {
		return nil, nil, fmt.Errorf("transcript has %d round commits, the receipt says %d rounds", len(rounds), rc.Rounds)
	}
	ticketOf := make(map[string]uint64, len(rc.Syncers))
	for _, s := range rc.Syncers {
		ticketOf[s.DID] = s.Ticket
	}
	committed := map[string]bool{}
	hashes := make([]wire.Hash, len(rounds))
	pos := 1 // after '['
	if len(transcript) < 2 || transcript[0] != '[' {
		return nil, nil, errors.New("transcript is not a canonical JSON array")
	}
	for i := range rounds {
		c := &rounds[i]
		canon, err := CanonicalRoundCommit(c)
		if err != nil {
			return nil, nil, fmt.Errorf("transcript entry %d: %w", i, err)
		}
		if i > 0 {
			if pos >= len(transcript) || transcript[pos] != ',' {
				return nil, nil, fmt.Errorf("transcript entry %d is not in canonical (RFC 8785) form", i)
			}
			pos++
		}
		if end := pos + len(canon); end > len(transcript) || !bytes.Equal(transcript[pos:end], canon) {
			return nil, nil, fmt.Errorf("transcript entry %d is not in canonical (RFC 8785) form", i)
		}
		pos += len(canon)
		if c.Round != uint64(i) || c.TaskID != rc.TaskID {
			return nil, nil, fmt.Errorf("transcript entry %d is round %d of %q", i, c.Round, c.TaskID)
		}
		for _, fc := range c.Fragments {
			if t, ok := ticketOf[fc.Syncer]; !ok || t != fc.Ticket {
				return nil, nil, fmt.Errorf("round %d fragment %d: committed by %q at ticket %d, which is not a syncer the receipt names at that ticket",
					c.Round, fc.Fragment, fc.Syncer, fc.Ticket)
			}
			committed[fc.Syncer] = true
		}
		hashes[i] = roundLeaf(canon)
	}
	if pos != len(transcript)-1 || transcript[pos] != ']' {
		return nil, nil, errors.New("transcript is not a canonical JSON array")
	}
	// Every listed syncer committed a fragment, except a signer whose
	// ticket is above every committer's: the chain lets the next tickets
	// sign, one round deadline after another, when the syncers that
	// committed do not (receiptSigners), never an entrant ranked below a
	// committer.
	var maxTicket uint64
	for _, s := range rc.Syncers {
		if committed[s.DID] {
			maxTicket = max(maxTicket, s.Ticket)
		}
	}
	for _, s := range rc.Syncers {
		switch {
		case committed[s.DID]:
		case s.DID == rc.SyncerDID && (len(committed) == 0 || s.Ticket > maxTicket):
		case s.DID == rc.SyncerDID:
			return nil, nil, fmt.Errorf("the signer %s committed no fragment and its ticket %d is not above every committer's (%d)", s.DID, s.Ticket, maxTicket)
		default:
			return nil, nil, fmt.Errorf("syncer %s is listed but committed no fragment", s.DID)
		}
	}
	if n := len(rounds); n > 0 && rounds[n-1].ModelHash != rc.FinalModelHash {
		return nil, nil, fmt.Errorf("final_model_hash %s differs from the last round's model hash %s", rc.FinalModelHash, rounds[n-1].ModelHash)
	}
	if got := RunRoot(rc.SpecHash, hashes, rc.FinalModelHash); got != rc.RunRoot {
		return nil, nil, fmt.Errorf("run_root mismatch: the transcript gives %s, the receipt says %s", got, rc.RunRoot)
	}
	return rounds, hashes, nil
}

// VerifyReceipt mirrors the seed's TRAINING_VERIFY precompile (0x1008):
// input a serialized receipt and a claimed run root (nil: the receipt's
// own), output 1 when CheckReceipt accepts it and 0 otherwise.
func VerifyReceipt(receipt []byte, root []byte) byte {
	if CheckReceipt(receipt, root) != nil {
		return 0
	}
	return 1
}

// InclusionProof proves that round's commit is a leaf of the receipt's run
// root, from the receipt and its transcript blob (both checked first). Leaf
// index = round + 1 (leaf 0 is the spec hash).
func InclusionProof(receipt, transcript []byte, round uint64) (leaf wire.Hash, index, size uint64, proof []wire.Hash, err error) {
	rc, _, hashes, err := CheckFull(receipt, transcript)
	if err != nil {
		return
	}
	if round >= rc.Rounds {
		err = fmt.Errorf("round %d: the receipt has %d rounds", round, rc.Rounds)
		return
	}
	leaves := runLeaves(rc.SpecHash, hashes, rc.FinalModelHash)
	index, size, leaf = round+1, uint64(len(leaves)), hashes[round]
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

// checkChallengeEntry checks one entry of a receipt's challenge list on its
// own: a decided outcome, a round of the transcript, and money that adds up
// (an upheld challenge: slashed = reward + to_escrow, reward ≤ slashed; a
// rejected one: to_escrow = bond, nothing slashed; expired or void:
// nothing moved but the bond back).
func checkChallengeEntry(c *wire.ReceiptChallenge, rounds uint64) error {
	if c.Round >= rounds {
		return fmt.Errorf("challenge %s: round %d, the transcript has %d", c.ID, c.Round, rounds)
	}
	var v [4]*big.Int
	for k, s := range []string{c.Bond, c.SyncerSlashed, c.ChallengerReward, c.ToEscrow} {
		x, err := wire.ParseAmount(s)
		if err != nil {
			return fmt.Errorf("challenge %s: %w", c.ID, err)
		}
		v[k] = x
	}
	bond, slashed, reward, esc := v[0], v[1], v[2], v[3]
	zero := func(xs ...*big.Int) bool {
		for _, x := range xs {
			if x.Sign() != 0 {
				return false
			}
		}
		return true
	}
	switch c.Outcome {
	case wire.ChallengeUpheld:
		if new(big.Int).Add(reward, esc).Cmp(slashed) != 0 {
			return fmt.Errorf("challenge %s: syncer_slashed %s is not challenger_reward %s + to_escrow %s", c.ID, slashed, reward, esc)
		}
		if !c.Unavailable && c.Result == c.Committed {
			return fmt.Errorf("challenge %s: upheld, but the decided result is the committed one", c.ID)
		}
	case wire.ChallengeRejected:
		if esc.Cmp(bond) != 0 || !zero(slashed, reward) || c.Unavailable || c.Result != c.Committed {
			return fmt.Errorf("challenge %s: rejected, so the result is the committed one and exactly the bond goes to the escrow", c.ID)
		}
	case wire.ChallengeExpired, wire.ChallengeVoid:
		if !zero(slashed, reward, esc) {
			return fmt.Errorf("challenge %s: %s, so nothing is slashed or forfeited", c.ID, c.Outcome)
		}
	default:
		return fmt.Errorf("challenge %s: outcome %q (want %s, %s, %s or %s)", c.ID, c.Outcome, wire.ChallengeUpheld, wire.ChallengeRejected, wire.ChallengeExpired, wire.ChallengeVoid)
	}
	return nil
}

// MaxChallengeListBytes bounds a challenge list blob.
const MaxChallengeListBytes = 64 << 20

// CheckChallenges checks a receipt's challenge list blob against a checked
// receipt: its hash and count are the receipt's, it is the canonical array
// of its entries (strictly decoded), each entry adds up
// (checkChallengeEntry) and Σ to_escrow is challenge_escrow. It returns the
// entries.
func CheckChallenges(rc *wire.Receipt, list []byte) ([]wire.ReceiptChallenge, error) {
	if rc.ChallengeCount == 0 {
		if len(list) != 0 && string(list) != "[]" {
			return nil, errors.New("the receipt records no challenge, the list has some")
		}
		return []wire.ReceiptChallenge{}, nil
	}
	if len(list) > MaxChallengeListBytes {
		return nil, fmt.Errorf("challenge list: %d bytes, limit %d", len(list), MaxChallengeListBytes)
	}
	if got := BlobHash(list); got != *rc.ChallengesHash {
		return nil, fmt.Errorf("challenge list hashes to %s, the receipt's challenges_hash is %s", got, *rc.ChallengesHash)
	}
	dec := json.NewDecoder(bytes.NewReader(list))
	dec.DisallowUnknownFields()
	var out []wire.ReceiptChallenge
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("challenge list: %w", err)
	}
	if dec.More() {
		return nil, errors.New("challenge list: trailing data")
	}
	if uint64(len(out)) != rc.ChallengeCount {
		return nil, fmt.Errorf("challenge list has %d entries, the receipt says %d", len(out), rc.ChallengeCount)
	}
	canon, _, esc, err := ChallengeList(out)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(canon, list) {
		return nil, errors.New("challenge list is not in canonical (RFC 8785) form")
	}
	if esc.String() != rc.ChallengeEscrow {
		return nil, fmt.Errorf("challenge list sends %s to the escrow, the receipt's challenge_escrow is %s", esc, rc.ChallengeEscrow)
	}
	for i := range out {
		if err := checkChallengeEntry(&out[i], rc.Rounds); err != nil {
			return nil, err
		}
	}
	return out, nil
}
