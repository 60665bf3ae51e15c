//go:build !production

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// straightEnroll is an enrolment transaction signed by trainer i and sent
// straight to the chain (no node pre-check), with the evidence given.
func (r *tierRun) straightEnroll(task string, i int, ev *wire.EvidenceRef) chain.TxOutcome {
	r.t.Helper()
	p := wire.EnrollTx{TaskID: task, TrainerDID: r.tr[i].DID.String(), Stake: "100000000000000000", Evidence: ev,
		Signed: wire.Signed{ChainID: chain.ManualChainID, Nonce: r.next()}}
	p.Signature = r.tr[i].Sign(p.Preimage())
	tx, err := wire.EncodeTx(wire.TxEnroll, p)
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := r.mc.Block(r.ctx, tx)
	if err != nil {
		r.t.Fatal(err)
	}
	return out[0]
}

// refOf is the evidence reference a node builds for a claim: the claim
// inline, its content hash and size, and its evidence digest.
func refOf(t *testing.T, claim []byte) *wire.EvidenceRef {
	t.Helper()
	dg, err := wire.ClaimEvidenceDigest(claim)
	if err != nil {
		t.Fatal(err)
	}
	return &wire.EvidenceRef{Hash: wire.ContentHash(claim), Size: uint64(len(claim)), Digest: dg, Claim: claim}
}

func (r *tierRun) fund(i int) {
	if _, err := r.node.Faucet(r.ctx, wire.FaucetParams{DID: r.tr[i].DID.String(), Amount: "1000000000000000000"}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *tierRun) run(task string) *machine.Run {
	var run *machine.Run
	if err := r.mc.View(r.ctx, func(v machine.View) (err error) {
		run, err = machine.LoadRun(r.ctx, v.KV, task)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return run
}

func wantRefused(t *testing.T, what string, o chain.TxOutcome, want string) {
	t.Helper()
	if o.Code == chain.CodeOK || !strings.Contains(o.Log, want) {
		t.Fatalf("%s: code %d %q, want a refusal containing %q", what, o.Code, o.Log, want)
	}
	t.Logf("%s: refused (code %d): %s", what, o.Code, o.Log)
}

// TestInventedEvidenceRefusedByTheChain (issue 22 finding 4): enrolments
// sent straight to the chain, past any node's pre-check, are judged by the
// machine: an invented evidence reference, an invented claim, a claim whose
// hash or digest the transaction misstates, another trainer's evidence and
// simulated evidence under a policy without allow_simulated are refused
// with the reason and change nothing but the fee and nonce; genuine
// simulated evidence enrols, and only verified evidence is counted in the
// run's attestations (the receipt's attestation_count). Replaying it after
// leaving is refused (binding.replay, on chain).
func TestInventedEvidenceRefusedByTheChain(t *testing.T) {
	r := newTierRun(t, "snp")
	const task = "invented-evidence"
	r.post(task, wire.TierVerified, true)
	for i := 0; i < 3; i++ {
		r.fund(i)
	}
	invented := &wire.EvidenceRef{Hash: wire.ContentHash([]byte("invented")), Size: 8, Digest: wire.SHA256([]byte("invented"))}
	wantRefused(t, "invented reference", r.straightEnroll(task, 0, invented), "does not carry its claim")

	n, err := r.node.AttestNonce(r.ctx, wire.NonceParams{TaskID: task, DID: r.tr[0].DID.String()})
	if err != nil {
		t.Fatal(err)
	}
	fakeEnv, _ := json.Marshal(map[string]any{"vendor": "snp", "evidence": make([]byte, 1184)})
	fake, _ := json.Marshal(wire.AttestationClaim{Envelope: fakeEnv, Nonce: n.Nonce, ProgramHash: wire.SHA256([]byte(program))})
	wantRefused(t, "invented claim", r.straightEnroll(task, 0, refOf(t, fake)), "attestation refused")

	good := r.claim(task, 0, wire.Hash{}, false)
	bad := refOf(t, good)
	bad.Hash[0] ^= 1
	wantRefused(t, "misstated claim hash", r.straightEnroll(task, 0, bad), "do not match the claim")
	bad = refOf(t, good)
	bad.Digest[0] ^= 1
	wantRefused(t, "misstated digest", r.straightEnroll(task, 0, bad), "the transaction says")
	wantRefused(t, "another trainer's evidence", r.straightEnroll(task, 1, refOf(t, good)), "binding")
	if got := len(r.run(task).Attestations); got != 0 {
		t.Fatalf("%d attestations counted after refusals", got)
	}

	if o := r.straightEnroll(task, 0, refOf(t, good)); o.Code != chain.CodeOK {
		t.Fatalf("genuine simulated evidence sent straight: code %d %s", o.Code, o.Log)
	}
	run := r.run(task)
	if tr := run.Trainer(r.tr[0].DID.String()); tr == nil || tr.Status != wire.TrainerActive {
		t.Fatalf("trainer 0 not enrolled: %+v", tr)
	}
	if len(run.Attestations) != 1 || run.Attestations[0] != refOf(t, good).Digest {
		t.Fatalf("attestations %v, want the one verified digest", run.Attestations)
	}
	// Leave, then enrol again with the same evidence: its report data was
	// used on chain.
	lv, err := chain.LeaveTx(chain.ManualChainID, r.tr[0], task, r.next())
	if err != nil {
		t.Fatal(err)
	}
	if o, err := r.mc.Block(r.ctx, lv); err != nil || o[0].Code != chain.CodeOK {
		t.Fatalf("leave: %v %+v", err, o)
	}
	wantRefused(t, "replayed evidence", r.straightEnroll(task, 0, refOf(t, good)), "binding.replay")
	// Through the node (pre-check, then the same verification in the block).
	if err := r.enroll(task, 2, r.claim(task, 2, wire.Hash{}, false)); err != nil {
		t.Fatalf("enrolment through the node: %v", err)
	}
	if got := len(r.run(task).Attestations); got != 2 {
		t.Fatalf("%d attestations, want 2 verified", got)
	}

	// A run whose policy does not allow simulated evidence refuses it on
	// chain too.
	const prod = "production-policy"
	r.post(prod, wire.TierVerified, false)
	wantRefused(t, "simulated evidence under a production policy", r.straightEnroll(prod, 1, refOf(t, r.claim(prod, 1, wire.Hash{}, false))), "simulated")
}

// TestEvidenceExpiryJudgedAtBlockTime: the chain judges evidence at the
// block's time. Two claims made at the run's start carry simulated Nitro
// documents whose leaf certificates are valid for 3 hours; a block 2 hours
// later accepts one, a block 4 hours later refuses the other, naming the
// certificate's validity, though both are bound to the round's nonce.
func TestEvidenceExpiryJudgedAtBlockTime(t *testing.T) {
	r := newTierRun(t, "nitro")
	r.policy = `{"version":1,"tier":"Verified","allow_simulated":true,"nitro":{"max_age":"24h"}}`
	const task = "expiry-at-block-time"
	r.post(task, wire.TierVerified, true)
	r.fund(0)
	r.fund(1)
	c0, c1 := r.claim(task, 0, wire.Hash{}, false), r.claim(task, 1, wire.Hash{}, false)
	r.nowNs.Add(int64(2 * time.Hour))
	if o := r.straightEnroll(task, 0, refOf(t, c0)); o.Code != chain.CodeOK {
		t.Fatalf("inside the leaf certificate's validity: code %d %s", o.Code, o.Log)
	}
	r.nowNs.Add(int64(2 * time.Hour))
	wantRefused(t, "after the leaf certificate's validity", r.straightEnroll(task, 1, refOf(t, c1)), "validity")
}
