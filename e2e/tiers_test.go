//go:build !production

package e2e

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/chain"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// tierRun is an in-process node with an attestor, nonces, a key broker and a
// syncer key held by a simulated enclave.
type tierRun struct {
	t       *testing.T
	ctx     context.Context
	node    *syncer.Node
	mc      *chain.Manual
	kv      machine.KV
	broker  *enclave.Broker
	sponsor *did.Key
	tr      []*did.Key
	encl    []enclave.Provider
	syncer  *enclave.KeyCustody
	sealing []byte
	nonce   uint64
	clock   func() time.Time
	// nowNs is the clock's time (Unix ns); advance moves it.
	nowNs atomic.Int64
	// policy overrides simPolicy(tier, allow) when set.
	policy string
}

const program = "tenzro-trainer 0.1.0 (simulated image)"

func simPolicy(tier string, allow bool) string {
	m := hex.EncodeToString(enclave.SimulatedMeasurement)
	return fmt.Sprintf(`{"version":1,"tier":%q,"allow_simulated":%v,"snp":{"measurement":[%q],"smt_allowed":true,"vmpl":0}}`, tier, allow, m)
}

func newTierRun(t *testing.T, vendor string) *tierRun {
	ctx := context.Background()
	r := &tierRun{t: t, ctx: ctx}
	r.nowNs.Store(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	r.clock = func() time.Time { return time.Unix(0, r.nowNs.Load()).UTC() }
	kv, err := store.OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	r.kv = kv
	prov, err := enclave.NewSimulated(vendor, t.TempDir(), r.clock)
	if err != nil {
		t.Fatal(err)
	}
	if r.syncer, err = enclave.NewKeyCustody(ctx, prov, filepath.Join(t.TempDir(), "syncer.sealed")); err != nil {
		t.Fatal(err)
	}
	checker := attest.NewChecker(attest.Options{Clock: r.clock, Replay: perRound{}})
	sk, err := prov.SealingKey(ctx, "tenzro/train/key-broker/v1")
	if err != nil {
		t.Fatal(err)
	}
	r.sealing = sk
	r.broker, err = enclave.NewBroker(checker, attest.NewNonceStore(nil, time.Minute, r.clock), sk,
		func(ctx context.Context, task string) ([]byte, error) { return syncer.DatasetKeyRecord(ctx, kv, task) })
	if err != nil {
		t.Fatal(err)
	}
	// A dev chain (the real application, sequenced by hand at the pinned
	// clock) whose only syncer candidate is the enclave-held key.
	mc, err := chain.NewManual(ctx, kv, chain.ManualOptions{Clock: r.clock, Genesis: &chain.GenesisState{Accounts: []chain.GenesisAccount{{DID: r.syncer.DID(), Balance: chain.DefaultCandidateFunds}}, Faucet: true,
		Candidates: []chain.GenesisAccount{{DID: r.syncer.DID(), Balance: "1000000000000000000"}}}})
	if err != nil {
		t.Fatal(err)
	}
	r.mc = mc
	r.node, err = syncer.NewNode(ctx, syncer.Config{Chain: mc, Blobs: syncer.KVBlobs{KV: kv}, Local: kv, Engine: syncer.NewNativeEngine(), Signer: r.syncer,
		Attestor: checker, DatasetKeys: r.broker, Dev: true, Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	r.sponsor, _ = did.Generate(did.KindHuman, nil)
	for i := 0; i < 4; i++ {
		k, _ := did.Generate(did.KindMachine, nil)
		r.tr = append(r.tr, k)
		p, err := enclave.NewSimulated(vendor, t.TempDir(), r.clock)
		if err != nil {
			t.Fatal(err)
		}
		r.encl = append(r.encl, p)
	}
	return r
}

// perRound accepts evidence again within its round (the node's guard:
// the nonce is the round's, so the same evidence serves every fragment).
type perRound struct{}

func (perRound) MarkUsed(context.Context, wire.Hash) (bool, error) { return true, nil }

func (r *tierRun) policyFor(tier string, allow bool) string {
	if r.policy != "" {
		return r.policy
	}
	return simPolicy(tier, allow)
}

func (r *tierRun) next() uint64 { r.nonce++; return r.nonce }

// claim makes trainer i's evidence for its current binding. mutate may
// alter the binding's model hash to produce wrong evidence.
func (r *tierRun) claim(task string, i int, payload wire.Hash, wrongModel bool) json.RawMessage {
	n, err := r.node.AttestNonce(r.ctx, wire.NonceParams{TaskID: task, DID: r.tr[i].DID.String()})
	if err != nil {
		r.t.Fatal(err)
	}
	model := n.ModelHash
	if wrongModel {
		model[0] ^= 1
	}
	prog := wire.SHA256([]byte(program))
	ev, err := r.encl[i].Evidence(r.ctx, wire.AttestReportData(prog, n.Shard, model, r.tr[i].DID.String(), n.Nonce, payload))
	if err != nil {
		r.t.Fatal(err)
	}
	raw, _ := json.Marshal(wire.AttestationClaim{Envelope: ev, Nonce: n.Nonce, ProgramHash: prog})
	return raw
}

func (r *tierRun) post(task, tier string, allow bool) *wire.PostTaskResult {
	s := fmt.Sprintf(`{"task_id":%q,"sponsor_did":%q,"sponsor_address":"0x00","architecture":{"family":"timesfm","param_count":32,
 "modality":"Timeseries","fragment_count":2,"dtype":"f32","metadata":{}},"tier":%q,"aggregation":"Mean","trainer_count":4,"quorum":3,
 "inner_steps":24,"max_rounds":2,"grace_window_ms":30000,"reward_pool":"1000000000000000000","dataset_ref":"file:///data.enc","dataset_hash":"0x00",
 "min_throughput":null,"created_at":1761350400,"attestation_policy":%s}`, task, r.sponsor.DID.String(), tier, r.policyFor(tier, allow))
	_, canon, err := wire.ParseSpec([]byte(s))
	if err != nil {
		r.t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for f := 0; f < 2; f++ {
		ts = append(ts, safetensors.FromF32(fmt.Sprintf("w%d", f), []int64{16}, make([]float32, 16)))
	}
	w, _ := safetensors.Encode(ts, nil)
	if _, err := r.node.Faucet(r.ctx, wire.FaucetParams{DID: r.sponsor.DID.String(), Amount: "10000000000000000000"}); err != nil {
		r.t.Fatal(err)
	}
	p := &wire.PostTaskParams{Spec: []byte(s), InitWeights: w}
	p.Nonce, p.ChainID = r.next(), chain.ManualChainID
	p.Signature = r.sponsor.Sign(p.Preimage(r.sponsor.DID.String(), wire.SpecHash(canon), wire.ContentHash(w)))
	res, err := r.node.PostTask(r.ctx, p)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.node.Tick(r.ctx); err != nil { // the node's candidate daemon enters the election
		r.t.Fatal(err)
	}
	return res
}

func (r *tierRun) enroll(task string, i int, att json.RawMessage) error {
	if _, err := r.node.Faucet(r.ctx, wire.FaucetParams{DID: r.tr[i].DID.String(), Amount: "1000000000000000000"}); err != nil {
		r.t.Fatal(err)
	}
	p := &wire.EnrollParams{TaskID: task, TrainerDID: r.tr[i].DID.String(), Stake: "100000000000000000", Attestation: att}
	p.Nonce, p.ChainID = r.next(), chain.ManualChainID
	p.Signature = r.tr[i].Sign(p.Preimage())
	_, err := r.node.Enroll(r.ctx, p)
	return err
}

// gradient is trainer i's payload for (round, f), bound to it.
func (r *tierRun) gradient(task string, i int, round, f uint64) []byte {
	v := make([]float32, 16)
	for j := range v {
		v[j] = 1e-3 * trainerValue(i, int(round), int(f), j)
	}
	payload, _ := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32(fmt.Sprintf("w%d", f), []int64{16}, v)},
		safetensors.Binding{Trainer: r.tr[i].DID.String(), Task: task, Round: round, Fragment: f}.Metadata())
	return payload
}

// payloadHash is the hash of trainer i's payload for (round, f): what its
// submission's evidence binds.
func (r *tierRun) payloadHash(task string, i int, round, f uint64) wire.Hash {
	return wire.ContentHash(r.gradient(task, i, round, f))
}

func (r *tierRun) submit(task string, i int, round, f uint64, att json.RawMessage) error {
	payload := r.gradient(task, i, round, f)
	g := &wire.OuterGradient{TaskID: task, TrainerDID: r.tr[i].DID.String(), Round: round, FragmentIndex: f, GradientPayload: payload,
		PayloadHash: wire.ContentHash(payload), Attestation: att, ChainID: chain.ManualChainID}
	g.Signature = r.tr[i].Sign(g.Preimage())
	res, err := r.node.Submit(r.ctx, g)
	if err == nil && res.Finalized {
		err = r.node.Tick(r.ctx) // what the node's timer does when a submission completes a fragment
	}
	return err
}

// TestVerifiedTierRun: enrolment and every submission carry simulated SNP
// evidence bound to (program, shard, model, DID, single-use nonce); the
// syncer's key lives in a simulated enclave whose evidence the receipt
// commits to. Refused evidence names the failed check.
func TestVerifiedTierRun(t *testing.T) {
	r := newTierRun(t, "snp")
	const task = "verified-run"
	r.post(task, wire.TierVerified, true)
	if err := r.enroll(task, 0, nil); err == nil || !strings.Contains(err.Error(), "evidence is required") {
		t.Fatalf("enrolment without evidence: %v", err)
	}
	for i := 0; i < 4; i++ {
		if err := r.enroll(task, i, r.claim(task, i, wire.Hash{}, false)); err != nil {
			t.Fatalf("enrol %d: %v", i, err)
		}
	}
	var stale json.RawMessage // a claim of the previous round
	for round := uint64(0); round < 2; round++ {
		for f := uint64(0); f < 2; f++ {
			// Evidence bound to the wrong model: refused, naming the binding check.
			if err := r.submit(task, 0, round, f, r.claim(task, 0, r.payloadHash(task, 0, round, f), true)); err == nil || !strings.Contains(err.Error(), "binding") {
				t.Fatalf("wrong binding: %v", err)
			}
			// Evidence bound to another payload (trainer 2's gradient):
			// the evidence covers only the gradient it was made for.
			if err := r.submit(task, 0, round, f, r.claim(task, 0, r.payloadHash(task, 2, round, f), false)); err == nil || !strings.Contains(err.Error(), "binding.report_data") {
				t.Fatalf("evidence for another payload: %v", err)
			}
			// A claim replayed from the previous round (its nonce is that
			// round's, PROTOCOL §8): refused.
			if stale != nil && f == 0 {
				if err := r.submit(task, 1, round, f, stale); err == nil || !strings.Contains(err.Error(), "nonce") {
					t.Fatalf("replayed nonce: %v", err)
				}
			}
			c := r.claim(task, 1, r.payloadHash(task, 1, round, f), false)
			if err := r.submit(task, 1, round, f, c); err != nil {
				t.Fatalf("round %d fragment %d: %v", round, f, err)
			}
			stale = c
			for _, i := range []int{0, 2, 3} {
				if err := r.submit(task, i, round, f, r.claim(task, i, r.payloadHash(task, i, round, f), false)); err != nil {
					t.Fatalf("round %d fragment %d trainer %d: %v", round, f, i, err)
				}
			}
		}
	}
	rc, err := r.node.GetReceipt(r.ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(rc)
	if audit.VerifyReceipt(raw, nil) != 1 {
		t.Fatal(audit.CheckReceipt(raw, nil))
	}
	if rc.SyncerDID != r.syncer.DID() {
		t.Fatalf("receipt signed by %s, not the enclave key %s", rc.SyncerDID, r.syncer.DID())
	}
	// 4 enrolments + 2 rounds × 2 fragments × 4 submissions + the syncer key evidence.
	list, err := r.node.GetPayload(r.ctx, rc.AttestationsHash) // the list is a blob, by its hash
	if err != nil {
		t.Fatal(err)
	}
	digests, err := audit.CheckAttestations(rc, list)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(digests); got != 4+16+1 || rc.AttestationCount != 4+16+1 {
		t.Fatalf("%d attestation digests", got)
	}
	if digests[len(digests)-1] != wire.SHA256(r.syncer.Evidence()) {
		t.Fatal("receipt does not commit to the syncer key evidence")
	}
}

// TestVerifiedTierRefusesSimulatedUnderProductionPolicy: a run whose policy
// does not allow simulated evidence refuses it at enrolment.
func TestVerifiedTierRefusesSimulatedUnderProductionPolicy(t *testing.T) {
	r := newTierRun(t, "snp")
	r.post("prod-policy", wire.TierVerified, false)
	err := r.enroll("prod-policy", 0, r.claim("prod-policy", 0, wire.Hash{}, false))
	if err == nil || !strings.Contains(err.Error(), "simulated") {
		t.Fatalf("simulated evidence under a production policy: %v", err)
	}
}

// TestConfidentialTierRun: the sponsor gets the dataset key at posting and
// encrypts the dataset; the broker releases the key only to a trainer
// enclave whose evidence passes the run's policy and binds its key.
func TestConfidentialTierRun(t *testing.T) {
	r := newTierRun(t, "snp")
	const task = "confidential-run"
	res := r.post(task, wire.TierConfidential, true)
	if len(res.DatasetKey) != 32 {
		t.Fatalf("dataset key %d bytes", len(res.DatasetKey))
	}
	data := []byte("2024-01-01,412.3\n2024-01-08,412.9\n")
	ct, err := enclave.EncryptDataset(res.DatasetKey, task, data)
	if err != nil {
		t.Fatal(err)
	}
	release := func(p enclave.Provider, bind bool) ([]byte, error) {
		priv, _ := ecdh.X25519().GenerateKey(rand.Reader)
		n, err := r.broker.Nonce(r.ctx, task)
		if err != nil {
			return nil, err
		}
		rd := attest.KeyReportData(enclave.PurposeDatasetKey, priv.PublicKey().Bytes(), n)
		if !bind {
			rd = wire.SHA256([]byte("some other key"))
		}
		ev, err := p.Evidence(r.ctx, rd)
		if err != nil {
			return nil, err
		}
		w, err := r.broker.Release(r.ctx, &enclave.KeyRequest{TaskID: task, Evidence: ev, RecipientKey: priv.PublicKey().Bytes(), Nonce: n})
		if err != nil {
			return nil, err
		}
		k, err := enclave.Unwrap(priv, task, w)
		if err != nil {
			return nil, err
		}
		return enclave.DecryptDataset(k, task, ct)
	}
	if _, err := release(r.encl[0], false); err == nil {
		t.Fatal("key released to evidence that does not bind the recipient key")
	}
	pt, err := release(r.encl[1], true)
	if err != nil || string(pt) != string(data) {
		t.Fatalf("passing enclave: %v", err)
	}
	// After a restart (a new broker over the same store and enclave sealing
	// key) the run's key is still released: nothing lived only in memory.
	r.broker, err = enclave.NewBroker(attest.NewChecker(attest.Options{Clock: r.clock}), attest.NewNonceStore(nil, time.Minute, r.clock), r.sealing,
		func(ctx context.Context, task string) ([]byte, error) {
			return syncer.DatasetKeyRecord(ctx, r.kv, task)
		})
	if err != nil {
		t.Fatal(err)
	}
	if pt, err = release(r.encl[3], true); err != nil || string(pt) != string(data) {
		t.Fatalf("after restart: %v", err)
	}
	// Enrolment in a Confidential run also needs passing evidence.
	if err := r.enroll(task, 2, r.claim(task, 2, wire.Hash{}, false)); err != nil {
		t.Fatal(err)
	}
}
