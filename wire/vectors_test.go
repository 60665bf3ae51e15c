package wire_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json")

// vectorFile is the cross-language test-vector format (docs/PROTOCOL.md).
type vectorFile struct {
	Comment     string       `json:"comment"`
	Keys        []keyVec     `json:"keys"`
	Canon       []canonVec   `json:"canon"`
	Requests    []requestVec `json:"requests"`
	Submissions []subVec     `json:"submissions"`
	OuterSign   outerVec     `json:"outer_sign"`
	// ContentHash vectors: BLAKE3-256 (wire.ContentHash), the hash of
	// payloads, weights, momentum, aggregates and blob keys.
	ContentHash []contentVec `json:"content_hash"`
	ModelHash   modelVec     `json:"model_hash"`
	// Bindings: a plain payload stamped with its binding
	// (docs/protocol/safetensors.md §6): the bound bytes and their hash.
	Bindings []bindingVec `json:"bindings"`
	// AttestReportData: the Verified-tier evidence binding (PROTOCOL §11),
	// which names the payload the evidence accompanies.
	AttestReportData []attestVec `json:"attest_report_data"`
	// EvidenceDigests: the digest of an attestation claim's envelope
	// (wire.ClaimEvidenceDigest), which an enrolment signs (PROTOCOL §3).
	EvidenceDigests []evidenceVec `json:"evidence_digests"`
	// DatasetRequests: Tenzro-Dataset-Request headers (datasets.md
	// §Requests) as the Go CLI (dataset.SignRequestAt) and the trainer
	// (tenzro_trainer.rpc.dataset_request) write them.
	DatasetRequests []datasetReqVec `json:"dataset_requests"`
}

type datasetReqVec struct {
	ChainID      string `json:"chain_id"`
	Seed         string `json:"seed"`
	Kind         string `json:"kind"`
	DID          string `json:"did"`
	Op           string `json:"op"`
	CID          string `json:"cid"`
	Expires      uint64 `json:"expires"`
	Nonce        uint64 `json:"nonce"`
	PreimageHex  string `json:"preimage_hex"`
	SignatureHex string `json:"signature_hex"`
	Header       string `json:"header"`
}

type evidenceVec struct {
	Claim  string `json:"claim"`
	Digest string `json:"digest"`
}

type attestVec struct {
	Domain      string `json:"domain"`
	ProgramHash string `json:"program_hash"`
	Shard       uint64 `json:"shard"`
	ModelHash   string `json:"model_hash"`
	TrainerDID  string `json:"trainer_did"`
	NonceHex    string `json:"nonce_hex"`
	PayloadHash string `json:"payload_hash"`
	ReportData  string `json:"report_data"`
}

type bindingVec struct {
	Trainer     string `json:"trainer"`
	TaskID      string `json:"task_id"`
	Round       uint64 `json:"round"`
	Fragment    uint64 `json:"fragment"`
	PlainHex    string `json:"plain_hex"`
	BoundHex    string `json:"bound_hex"`
	PayloadHash string `json:"payload_hash"`
}

// contentVec is one wire.ContentHash vector. The input is input_hex, or,
// with input_len, the official BLAKE3 test input of that length: the bytes
// 0, 1, …, 250, 0, 1, … (byte i is i mod 251).
type contentVec struct {
	InputHex *string `json:"input_hex,omitempty"`
	InputLen *int    `json:"input_len,omitempty"`
	BLAKE3   string  `json:"blake3"`
}

// modelVec is a model hash (docs/PROTOCOL.md §5): BLAKE3-256 of the Canon
// Str("tenzro/train/model/v1") ‖ Hash(fragment_0) ‖ …, whose bytes are hex.
type modelVec struct {
	FragmentHashes []string `json:"fragment_hashes"`
	Hex            string   `json:"hex"`
	ModelHash      string   `json:"model_hash"`
}

// pattern251 is the official BLAKE3 test input of length n.
func pattern251(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

type keyVec struct {
	Seed      string `json:"seed"`
	Kind      string `json:"kind"`
	DID       string `json:"did"`
	PublicKey string `json:"public_key"`
}

type field struct {
	Str   *string `json:"str,omitempty"`
	U64   *uint64 `json:"u64,omitempty"`
	Hash  string  `json:"hash,omitempty"`
	Bytes *string `json:"bytes,omitempty"`
}

type canonVec struct {
	Domain string  `json:"domain"`
	Fields []field `json:"fields"`
	Hex    string  `json:"hex"`
	SHA256 string  `json:"sha256"`
}

// vecChainID is the chain the request and submission vectors are signed for.
const vecChainID = "tenzro-testnet"

type requestVec struct {
	ChainID      string  `json:"chain_id"`
	Method       string  `json:"method"`
	SignerSeed   string  `json:"signer_seed"`
	SignerKind   string  `json:"signer_kind"`
	Signer       string  `json:"signer"`
	Nonce        uint64  `json:"nonce"`
	Fields       []field `json:"fields"`
	PreimageHex  string  `json:"preimage_hex"`
	SignatureHex string  `json:"signature_hex"`
}

type subVec struct {
	ChainID       string `json:"chain_id"`
	Seed          string `json:"seed"`
	TaskID        string `json:"task_id"`
	TrainerDID    string `json:"trainer_did"`
	Round         uint64 `json:"round"`
	FragmentIndex uint64 `json:"fragment_index"`
	PayloadHex    string `json:"payload_hex"`
	PayloadHash   string `json:"payload_hash"`
	PreimageHex   string `json:"preimage_hex"`
	SignatureHex  string `json:"signature_hex"`
	// Metrics is the optional signed metrics map (docs/protocol/metrics.md).
	Metrics wire.SubmissionMetrics `json:"metrics,omitempty"`
}

// outerVec fixes the sign convention: gradient = before − after, and one
// outer step with lr 0.7, momentum 0.9, nesterov from zero momentum.
type outerVec struct {
	Before   []float32 `json:"theta_before"`
	After    []float32 `json:"theta_after"`
	Gradient []float32 `json:"outer_gradient"`
	LR       float32   `json:"lr"`
	Momentum float32   `json:"momentum"`
	NewW     []float32 `json:"weights_after_one_outer_step_from_before"`
}

func seed(i byte) []byte { return bytes.Repeat([]byte{i}, 32) }

func apply(c *wire.Canon, fs []field) {
	for _, f := range fs {
		switch {
		case f.Str != nil:
			c.Str(*f.Str)
		case f.U64 != nil:
			c.U64(*f.U64)
		case f.Hash != "":
			h, _ := wire.ParseHash(f.Hash)
			c.Hash(h)
		case f.Bytes != nil:
			b, _ := hex.DecodeString(*f.Bytes)
			c.Bytes(b)
		}
	}
}

func sp(s string) *string { return &s }
func up(v uint64) *uint64 { return &v }

func build(t *testing.T) vectorFile {
	t.Helper()
	var v vectorFile
	v.Comment = "Tenzro Train cross-language vectors; see docs/PROTOCOL.md. Regenerate: go test ./wire -run TestVectors -update"
	for i, kind := range []string{did.KindHuman, did.KindMachine, did.KindMachine} {
		k, err := did.FromSeed(kind, seed(byte(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		v.Keys = append(v.Keys, keyVec{hex.EncodeToString(seed(byte(i + 1))), kind, k.DID.String(), hex.EncodeToString(k.DID.Key)})
	}
	h1 := sha256.Sum256([]byte("payload"))
	canons := []canonVec{
		{Domain: wire.DomainRequest, Fields: nil},
		{Domain: wire.DomainSubmission, Fields: []field{{Str: sp("task-1")}, {U64: up(7)}, {Hash: hex.EncodeToString(h1[:])}, {Bytes: sp("00ff")}}},
		{Domain: "x", Fields: []field{{Str: sp("")}, {U64: up(0)}, {U64: up(1<<64 - 1)}, {Str: sp("é")}}},
	}
	for _, cv := range canons {
		c := wire.NewCanon(cv.Domain)
		apply(c, cv.Fields)
		cv.Hex = hex.EncodeToString(c.Out())
		s := c.Sum()
		cv.SHA256 = s.String()
		v.Canon = append(v.Canon, cv)
	}
	zero := wire.Hash{}
	specHash := wire.SpecHash([]byte(`{"task_id":"t"}`))
	claims := []string{
		`{"envelope":{"vendor":"snp","evidence":"AAECAwQ=","certs":["BQY="],"nonce":"Wlo="},"nonce":"Wlo=","program_hash":"` + wire.SHA256([]byte("program")).String() + `"}`,
		`{"envelope":{"vendor":"tdx","evidence":"BAQE","gpu":{"vendor":"nvidia","report":"CQk=","certs":["AQ=="]}},"nonce":"AA==","program_hash":"` + zero.String() + `"}`,
	}
	var digests []wire.Hash
	for _, c := range claims {
		d, err := wire.ClaimEvidenceDigest([]byte(c))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		v.EvidenceDigests = append(v.EvidenceDigests, evidenceVec{c, d.String()})
	}
	reqs := []struct {
		method string
		seed   byte
		kind   string
		nonce  uint64
		fields []field
	}{
		{wire.MethodPostTask, 1, did.KindHuman, 1761350400000000000, []field{{Hash: specHash.String()}, {Hash: zero.String()}}},
		{wire.MethodEnrollTrainer, 2, did.KindMachine, 42, []field{{Str: sp("train-2026-04-25-timesfm-200m")}, {Str: sp("100000000000000000000")}, {Hash: zero.String()}}},
		{wire.MethodEnrollTrainer, 2, did.KindMachine, 48, []field{{Str: sp("train-2026-04-25-timesfm-200m")}, {Str: sp("100000000000000000000")}, {Hash: digests[0].String()}}},
		{wire.MethodLeaveRun, 3, did.KindMachine, 43, []field{{Str: sp("train-2026-04-25-timesfm-200m")}}},
		{wire.MethodRegisterSyncer, 3, did.KindMachine, 44, []field{{Str: sp("5000")}}},
		{wire.MethodFinalizeRound, 4, did.KindMachine, 45, []field{{Str: sp("train-2026-04-25-timesfm-200m")}, {U64: up(7)}}},
		{wire.MethodCancelRun, 1, did.KindHuman, 46, []field{{Str: sp("train-2026-04-25-timesfm-200m")}}},
		{wire.MethodUnbondSyncer, 4, did.KindMachine, 47, nil},
	}
	for _, r := range reqs {
		k, _ := did.FromSeed(r.kind, seed(r.seed))
		pre := wire.RequestPreimage(vecChainID, r.method, k.DID.String(), r.nonce, func(c *wire.Canon) { apply(c, r.fields) })
		if r.method == wire.MethodEnrollTrainer { // the vector is what EnrollParams signs
			ep := wire.EnrollParams{TaskID: *r.fields[0].Str, TrainerDID: k.DID.String(), Stake: *r.fields[1].Str, Signed: wire.Signed{ChainID: vecChainID, Nonce: r.nonce}}
			if r.fields[2].Hash != zero.String() {
				ep.Attestation = []byte(claims[0])
			}
			if !bytes.Equal(ep.Preimage(), pre) {
				t.Fatalf("EnrollParams.Preimage differs from the enrolment vector (nonce %d)", r.nonce)
			}
		}
		v.Requests = append(v.Requests, requestVec{vecChainID, r.method, hex.EncodeToString(seed(r.seed)), r.kind, k.DID.String(), r.nonce, r.fields,
			hex.EncodeToString(pre), hex.EncodeToString(k.Sign(pre))})
	}
	k, _ := did.FromSeed(did.KindMachine, seed(2))
	payload := []byte("\x38\x00\x00\x00\x00\x00\x00\x00{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  \x00\x00\x80\x3f")
	ph := wire.ContentHash(payload)
	g := wire.OuterGradient{TaskID: "train-2026-04-25-timesfm-200m", TrainerDID: k.DID.String(), Round: 3, FragmentIndex: 11, PayloadHash: ph, ChainID: vecChainID}
	pre := g.Preimage()
	v.Submissions = append(v.Submissions, subVec{vecChainID, hex.EncodeToString(seed(2)), g.TaskID, g.TrainerDID, g.Round, g.FragmentIndex,
		hex.EncodeToString(payload), ph.String(), hex.EncodeToString(pre), hex.EncodeToString(k.Sign(pre)), nil})
	// The same submission with a metrics map: the preimage gains the
	// metrics fields; without one it is byte-identical to the v1 preimage.
	g.Metrics = wire.SubmissionMetrics{wire.MetricTrainLoss: 1.2345, wire.MetricEvalLoss: 0.1, wire.MetricSamples: 768, wire.MetricStepTimeMs: 41.5, "tokens": 196608}
	pre = g.Preimage()
	v.Submissions = append(v.Submissions, subVec{vecChainID, hex.EncodeToString(seed(2)), g.TaskID, g.TrainerDID, g.Round, g.FragmentIndex,
		hex.EncodeToString(payload), ph.String(), hex.EncodeToString(pre), hex.EncodeToString(k.Sign(pre)), g.Metrics})

	before := []float32{1.0, -2.0, 0.5, 3.25}
	after := []float32{0.75, -1.5, 0.5, 3.0}
	o := outerVec{Before: before, After: after, LR: 0.7, Momentum: 0.9}
	for i := range before {
		gr := before[i] - after[i]
		o.Gradient = append(o.Gradient, gr)
		// First step: buf = g; d = g + m*buf; w = w - lr*d.
		d := gr + o.Momentum*gr
		o.NewW = append(o.NewW, before[i]-o.LR*d)
	}
	v.OuterSign = o

	for _, in := range []string{"", "abc"} {
		h := wire.ContentHash([]byte(in))
		v.ContentHash = append(v.ContentHash, contentVec{InputHex: sp(hex.EncodeToString([]byte(in))), BLAKE3: h.String()})
	}
	for _, n := range []int{0, 1, 1023, 1024, 1025, 8192, 102400} {
		h := wire.ContentHash(pattern251(n))
		v.ContentHash = append(v.ContentHash, contentVec{InputLen: &n, BLAKE3: h.String()})
	}
	frags := []wire.Hash{wire.ContentHash(payload), wire.ContentHash([]byte("abc"))}
	c := wire.NewCanon(wire.DomainModel)
	for _, f := range frags {
		c.Hash(f)
		v.ModelHash.FragmentHashes = append(v.ModelHash.FragmentHashes, f.String())
	}
	v.ModelHash.Hex = hex.EncodeToString(c.Out())
	v.ModelHash.ModelHash = wire.ModelHash(frags).String()

	// Two plain payloads: the one above (non-canonical padding) and a
	// two-tensor file written out of name order with {"format":"pt"}.
	two := []byte(`{"__metadata__":{"format":"pt"},"z":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"a.b":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}}`)
	twoFile := binary.LittleEndian.AppendUint64(nil, uint64(len(two)))
	twoFile = append(append(twoFile, two...), 0x80, 0x3f, 0x49, 0xc0, 0x00, 0x00, 0xc0, 0x3f)
	for _, b := range []struct {
		plain []byte
		bind  safetensors.Binding
	}{
		{payload, safetensors.Binding{Trainer: k.DID.String(), Task: "train-2026-04-25-timesfm-200m", Round: 3, Fragment: 11}},
		{twoFile, safetensors.Binding{Trainer: k.DID.String(), Task: "t1", Round: 0, Fragment: 0}},
	} {
		bound, err := safetensors.Bind(b.plain, b.bind, safetensors.DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		v.Bindings = append(v.Bindings, bindingVec{b.bind.Trainer, b.bind.Task, b.bind.Round, b.bind.Fragment,
			hex.EncodeToString(b.plain), hex.EncodeToString(bound), wire.ContentHash(bound).String()})
	}
	nonce := bytes.Repeat([]byte{0x5a}, 32)
	for _, ph := range []wire.Hash{wire.ContentHash(payload), {}} { // a submission's, an enrolment's (zero)
		prog, model := wire.SHA256([]byte("program")), wire.ContentHash([]byte("model"))
		rd := wire.AttestReportData(prog, 2, model, k.DID.String(), nonce, ph)
		v.AttestReportData = append(v.AttestReportData, attestVec{wire.DomainAttest, prog.String(), 2, model.String(), k.DID.String(),
			hex.EncodeToString(nonce), ph.String(), rd.String()})
	}
	for _, r := range []struct {
		seed          byte
		kind, op, cid string
		expires       uint64
		nonce         uint64
	}{
		{2, did.KindMachine, wire.DatasetOpFetch, "bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu", 1764300000, 7},
		{1, did.KindHuman, wire.DatasetOpImport, "bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu", 1764300900, 1<<64 - 1},
		{1, did.KindHuman, wire.DatasetOpRemove, "QmAccept", 1, 0},
	} {
		k, _ := did.FromSeed(r.kind, seed(r.seed))
		in := wire.DatasetRequest{DID: k.DID.String(), Op: r.op, CID: r.cid, Expires: r.expires, Nonce: r.nonce}
		pre := in.Preimage(vecChainID)
		in.Sig = k.Sign(pre)
		v.DatasetRequests = append(v.DatasetRequests, datasetReqVec{vecChainID, hex.EncodeToString(seed(r.seed)), r.kind, in.DID, r.op, r.cid,
			r.expires, r.nonce, hex.EncodeToString(pre), hex.EncodeToString(in.Sig), in.String()})
	}
	return v
}

func TestVectors(t *testing.T) {
	v := build(t)
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := "testdata/vectors.json"
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("testdata/vectors.json is stale or the encoding changed; diff it against a -update run")
	}
	// Every signature verifies through the DID.
	for _, r := range v.Requests {
		pre, _ := hex.DecodeString(r.PreimageHex)
		sig, _ := hex.DecodeString(r.SignatureHex)
		if err := did.Verify(r.Signer, pre, sig); err != nil {
			t.Errorf("%s: %v", r.Method, err)
		}
	}
	for _, r := range v.DatasetRequests {
		in, err := wire.ParseDatasetRequest(r.Header)
		if err != nil {
			t.Fatalf("dataset request %s: %v", r.Op, err)
		}
		if err := did.Verify(in.DID, in.Preimage(r.ChainID), in.Sig); err != nil {
			t.Errorf("dataset request %s: %v", r.Op, err)
		}
	}
}

// TestVectorPayloadIsSafetensors: the submission vector's payload is a valid
// safetensors file (another implementation may parse it, not only hash it).
func TestVectorPayloadIsSafetensors(t *testing.T) {
	v := build(t)
	raw, _ := hex.DecodeString(v.Submissions[0].PayloadHex)
	if _, _, err := safetensors.Parse(raw, safetensors.DefaultLimits); err != nil {
		t.Fatal(err)
	}
}
