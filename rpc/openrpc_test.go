package rpc_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/wire"
)

var update = flag.Bool("update", false, "rewrite openrpc.json from the catalog")

// catalogEntry documents one method; the OpenRPC document is generated
// from this table.
type catalogEntry struct {
	name, summary string
	params        any // a zero value of the params struct, nil for none
	result        any
	optional      bool // params may be omitted
	group         string
}

type rawObject struct{} // documents params passed through as one opaque object

// releaseKeyParams and releaseKeyResult document tenzro_attest_releaseKey's
// two steps (enclave.KeyRequest in, a nonce or an enclave.WrappedKey out);
// TestReleaseKeyDocMatchesBroker keeps their names equal to the broker's.
type releaseKeyParams struct {
	TaskID       string `json:"task_id"`
	Evidence     []byte `json:"evidence,omitempty"`
	RecipientKey []byte `json:"recipient_key,omitempty"`
	Nonce        []byte `json:"nonce,omitempty"`
}

type releaseKeyResult struct {
	Nonce        []byte `json:"nonce,omitempty"`
	EphemeralKey []byte `json:"ephemeral_key,omitempty"`
	Sealed       []byte `json:"sealed,omitempty"`
	EvidenceHash string `json:"evidence_digest,omitempty"`
}

var catalog = []catalogEntry{
	{wire.MethodPostTask, "Post a task spec (the seed's JSON verbatim plus DESIGN §3 fields), optionally with initial weights: inline (init_weights, base64) or by reference (init_weights_hash of a file uploaded first with PUT /blobs/<hash>); escrows the reward pool. Signed by spec.sponsor_did.", wire.PostTaskParams{}, wire.PostTaskResult{}, false, "training"},
	{wire.MethodSetInitWeights, "Supply a posted run's initial weights (safetensors): inline (weights, base64) or by reference (weights_hash of a file uploaded first with PUT /blobs/<hash>). Signed by the sponsor.", wire.SetInitWeightsParams{}, wire.PostTaskResult{}, false, "training"},
	{wire.MethodListRuns, "List runs, optionally filtered by status.", wire.ListRunsParams{}, []wire.RunSummary{}, true, "training"},
	{wire.MethodGetRun, "One run: spec, status, round, trainers and their metrics, fragments, round roots.", wire.TaskIDParams{}, wire.RunView{}, false, "training"},
	{wire.MethodGetReceipt, "The training receipt of a sealed run.", wire.TaskIDParams{}, wire.Receipt{}, false, "training"},
	{wire.MethodGetTranscript, "The round commits of a run so far.", wire.TaskIDParams{}, []wire.RoundCommit{}, false, "training"},
	{wire.MethodGetPayload, "A stored payload (submission or weights) by its content hash (BLAKE3-256), base64 in JSON. The same bytes raw, with Range support: HTTP GET /blobs/<hash> on this port.", rpc.GetPayloadParams{}, rpc.Payload{}, false, "training"},
	{wire.MethodEnrollTrainer, "Enrol a trainer with a stake (joins the current round or the next). Signed by trainer_did.", wire.EnrollParams{}, wire.EnrollResult{}, false, "training"},
	{wire.MethodLeaveRun, "Leave a run; shards are rebalanced from the next round. Signed by trainer_did.", wire.LeaveParams{}, wire.EnrollResult{}, false, "training"},
	{wire.MethodSubmitGradient, "Submit one outer gradient (safetensors) for a round and fragment, signed over the submission preimage (PROTOCOL §4). Two forms: inline (gradient_payload, base64: the seed's form) or by reference: upload the payload first with HTTP PUT /blobs/<payload_hash> on this port (raw bytes, hashed and size-capped as they arrive; 201 stored, 200 already there) and send this request without gradient_payload. The preimage is the same for both.", wire.OuterGradient{}, wire.SubmitResult{}, false, "training"},
	{wire.MethodFinalizeRound, "Commit the current round's fragments that the rules allow now (K accepted and every active trainer in, or the grace window closed; the round at its deadline); otherwise say per fragment why not. Signed by the run's elected syncer; never shortens the grace window.", wire.FinalizeParams{}, wire.FinalizeResult{}, false, "training"},
	{wire.MethodCancelRun, "Cancel a run that has not started: the escrow goes back to the sponsor and every enrolled trainer's stake is refunded. Signed by the spec's sponsor_did.", wire.CancelRunParams{}, wire.CancelRunResult{}, false, "training"},
	{wire.MethodGetWeights, "A fragment's current committed weights as safetensors (base64).", wire.GetWeightsParams{}, wire.Weights{}, false, "training"},
	{wire.MethodVerifyReceipt, "Verify a receipt as the 0x1008 precompile does: valid is 1 or 0. With root, the pure check against that run root; without, against the run root and election this node's committed state holds for the task (the answer's root and height say which).", wire.VerifyReceiptParams{}, wire.VerifyReceiptResult{}, false, "training"},
	{wire.MethodChallenge, "Challenge a fragment commit that is not final yet: escrows the run's challenge_bond and claims result_hash is the commit's FragmentResultHash (zero: its inputs are unavailable); the validators re-execute and vote (docs/protocol/challenges.md). Signed by challenger_did.", wire.ChallengeTx{}, wire.ChallengeResult{}, false, "training"},
	{wire.MethodGetChallenges, "A run's challenges in the order the chain took them: the disputed commit, the claim, the committee, the votes, the outcome and what moved.", wire.TaskIDParams{}, []wire.ChallengeRecord{}, false, "training"},
	{wire.MethodReplayFragment, "This node re-executes a fragment commit that can still be challenged (inputs, weights and momentum fetched by hash; the syncer's code) and returns the committed and its own FragmentResultHash.", wire.ReplayFragmentParams{}, wire.ReplayFragmentResult{}, false, "training"},
	{wire.MethodGetFragmentState, "The committed state re-executing a fragment commit that can still be challenged reads (the run, the commit record, the run as the round started, the fragment's records), so a client can re-execute it itself (tenzro receipt replay --local).", wire.ReplayFragmentParams{}, wire.FragmentState{}, false, "training"},
	{wire.MethodGetBalance, "A DID's balance in attoTNZO.", wire.BalanceParams{}, wire.Balance{}, false, "ledger"},
	{wire.MethodFaucet, "Mint attoTNZO to a DID (only on a node started with --dev).", wire.FaucetParams{}, wire.Balance{}, false, "ledger"},
	{wire.MethodTransfer, "Send attoTNZO from one DID to another (signed by the sender; answered once committed with the sender's balance).", wire.TransferParams{}, wire.Balance{}, false, "ledger"},
	{wire.MethodRegisterSyncer, "Register as a syncer candidate with a stake. Signed by did.", wire.RegisterSyncerParams{}, wire.SyncerCandidate{}, false, "syncer"},
	{wire.MethodUnbondSyncer, "Withdraw a candidate's whole syncer stake: it moves to an unbonding account, the candidate is no longer elected, and the stake returns after the node's unbonding delay. Signed by did.", wire.UnbondParams{}, wire.SyncerCandidate{}, false, "syncer"},
	{wire.MethodListSyncers, "List syncer candidates.", nil, []wire.SyncerCandidate{}, false, "syncer"},
	{wire.MethodElectionProof, "Enter a run's syncer election with an RFC 9381 VRF proof over its alpha. Signed by did; the run must not have started.", wire.ElectionProofParams{}, wire.ElectionProofResult{}, false, "syncer"},
	{wire.MethodNodeInfo, "Describe this node: version, DID, dev mode, role, engine.", nil, wire.NodeInfo{}, false, "node"},
	{wire.MethodPublishPlugin, "Publish a Wasm plugin module; it is registered by its SHA-256. Signed by did.", wire.PublishPluginParams{}, wire.PluginInfo{}, false, "plugins"},
	{wire.MethodListPlugins, "List registered plugins.", nil, []wire.PluginInfo{}, false, "plugins"},
	{wire.MethodGetPlugin, "A plugin's info and module bytes (base64).", rpc.GetPluginParams{}, rpc.PluginModule{}, false, "plugins"},
	{wire.MethodRequestNonce, "A single-use attestation nonce for a trainer's next evidence, with the shard and model hash it must bind this round.", wire.NonceParams{}, wire.NonceResult{}, false, "attest"},
	{wire.MethodSubmitEvidence, "Submit a trainer's attestation evidence envelope for a run; it is checked against the run's policy and stored by digest.", wire.SubmitEvidenceParams{}, wire.SubmitEvidenceResult{}, false, "attest"},
	{wire.MethodGetEvidence, "Fetch stored attestation evidence by digest.", wire.GetEvidenceParams{}, wire.GetEvidenceResult{}, false, "attest"},
	{wire.MethodGetPolicy, "The attestation policy template the node applies for a tier (verified, confidential) and vendor (tdx, snp, nitro); the result is the policy JSON.", wire.GetPolicyParams{}, json.RawMessage{}, false, "attest"},
	{wire.MethodReleaseKey, "Confidential tier key broker, two steps: with task_id alone it returns the single-use nonce the evidence must bind; with evidence, recipient_key (X25519) and that nonce it returns the dataset key wrapped to recipient_key.", releaseKeyParams{}, releaseKeyResult{}, false, "attest"},
}

type errorDoc struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

var errorTable = []struct {
	name string
	errorDoc
}{
	{"ParseError", errorDoc{rpc.CodeParseError, "Parse error: the body is not valid JSON (message gives the byte offset)."}},
	{"InvalidRequest", errorDoc{rpc.CodeInvalidRequest, "Invalid request: not a request object, empty or oversized batch, or body over --max-request-bytes (HTTP 413)."}},
	{"MethodNotFound", errorDoc{rpc.CodeMethodNotFound, "Method not found (or its optional service is not wired on this node)."}},
	{"InvalidParams", errorDoc{rpc.CodeInvalidParams, "Invalid params: unknown field, wrong type, missing required param, or a value the node refuses as invalid (syncer.KindInvalid)."}},
	{"Internal", errorDoc{rpc.CodeInternal, "Internal error: a fault of the node; details are in the node log under the returned ref."}},
	{"NotFound", errorDoc{rpc.CodeNotFound, "Not found: unknown task, DID, fragment or blob (syncer.KindNotFound)."}},
	{"Unauthorized", errorDoc{rpc.CodeUnauthorized, "Unauthorized: bad signature, wrong signer or stale nonce (syncer.KindUnauthorized)."}},
	{"Conflict", errorDoc{rpc.CodeConflict, "Conflict: duplicate, wrong round, closed window, full run (syncer.KindConflict)."}},
	{"Funds", errorDoc{rpc.CodeFunds, "Insufficient funds: balance too low (syncer.KindFunds)."}},
	{"Disabled", errorDoc{rpc.CodeDisabled, "Disabled: feature off on this node, e.g. the faucet without --dev (syncer.KindDisabled)."}},
	{"Attestation", errorDoc{rpc.CodeAttestation, "Attestation refused: evidence fails the policy (syncer.KindAttestation)."}},
	{"Busy", errorDoc{rpc.CodeBusy, "Busy: no slot for a large request within the wait (HTTP 503); retry."}},
	{"Cancelled", errorDoc{rpc.CodeCancelled, "Request cancelled."}},
	{"DeadlineExceeded", errorDoc{rpc.CodeDeadline, "Request deadline exceeded."}},
}

// schema renders a JSON Schema for t following encoding/json's rules and
// the wire package's text encodings.
func schema(t reflect.Type) map[string]any {
	switch t {
	case reflect.TypeOf(wire.Hash{}):
		return map[string]any{"type": "string", "pattern": "^(0x|sha256:|blake3:)?[0-9a-f]{64}$", "description": "32-byte hash, 64 lowercase hex digits: BLAKE3-256 for content (payload, weights, momentum, aggregate, model hashes), SHA-256 for the rest (docs/PROTOCOL.md, Hashes)"}
	case reflect.TypeOf(wire.F64(0)):
		return map[string]any{"type": "string", "pattern": "^[0-9a-f]{16}$", "description": "IEEE-754 binary64 value as its 64 bits, 16 lowercase hex digits (docs/protocol/scoring.md §7)"}
	case reflect.TypeOf(wire.HexBytes{}):
		return map[string]any{"type": "string", "pattern": "^(0x)?([0-9a-fA-F]{2})*$", "description": "bytes as hex"}
	case reflect.TypeOf(json.RawMessage{}), reflect.TypeOf(rawObject{}):
		return map[string]any{"description": "any JSON value"}
	case reflect.TypeOf([]byte{}):
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Uint64, reflect.Uint32, reflect.Uint8, reflect.Uint:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schema(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var req []string
		for _, f := range fields(t) {
			props[f.name] = schema(f.typ)
			if f.required {
				req = append(req, f.name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(req) > 0 {
			sort.Strings(req)
			s["required"] = req
		}
		return s
	}
	return map[string]any{}
}

type field struct {
	name     string
	typ      reflect.Type
	required bool
}

// fields lists a struct's JSON fields, flattening embedded structs.
func fields(t reflect.Type) []field {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			out = append(out, fields(f.Type)...)
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, field{name: name, typ: f.Type, required: !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero")})
	}
	return out
}

func buildDocument() []byte {
	var methods []any
	for _, m := range catalog {
		params := []any{}
		if m.params != nil {
			pt := reflect.TypeOf(m.params)
			if pt == reflect.TypeOf(rawObject{}) {
				params = append(params, map[string]any{"name": "params", "required": false, "schema": map[string]any{"type": "object"},
					"description": "the request's params object, passed to the attestation service as is"})
			} else {
				for _, f := range fields(pt) {
					params = append(params, map[string]any{"name": f.name, "required": f.required && !m.optional, "schema": schema(f.typ)})
				}
			}
		}
		var errs []any
		for _, e := range errorTable {
			errs = append(errs, map[string]any{"$ref": "#/components/errors/" + e.name})
		}
		methods = append(methods, map[string]any{
			"name":           m.name,
			"summary":        m.summary,
			"tags":           []any{map[string]any{"name": m.group}},
			"paramStructure": "by-name",
			"params":         params,
			"result":         map[string]any{"name": "result", "schema": schema(reflect.TypeOf(m.result))},
			"errors":         errs,
		})
	}
	errComp := map[string]any{}
	for _, e := range errorTable {
		errComp[e.name] = e.errorDoc
	}
	doc := map[string]any{
		"openrpc": "1.2.6",
		"info": map[string]any{
			"title":       "Tenzro Train node JSON-RPC API",
			"version":     "1.0.0",
			"description": "JSON-RPC 2.0 over HTTP POST (default 127.0.0.1:8545). Params are by name (snake_case) and decoded strictly: unknown fields are refused. Byte strings are base64 (standard, padded) unless typed as hex. Batches are supported. Plugin and attestation methods are served only when the node wires those services. Error codes: rpc/ERRORS.md. Bulk bytes also travel raw on the same port: PUT /blobs/<64 hex> uploads a blob (payload, initial weights) that the by-reference forms of submitOuterGradient, postTask and setInitWeights then name by hash; GET and HEAD /blobs/<64 hex> serve stored blobs (Range supported); docs/PROTOCOL.md, \"Blobs over HTTP\".",
		},
		"servers":    []any{map[string]any{"name": "local node", "url": "http://127.0.0.1:8545"}},
		"methods":    methods,
		"components": map[string]any{"errors": errComp},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

func TestOpenRPCDocument(t *testing.T) {
	want := buildDocument()
	if *update {
		if err := os.WriteFile("openrpc.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(rpc.OpenRPC(), want) {
		t.Fatal("openrpc.json is stale: run go test ./rpc -run TestOpenRPCDocument -update")
	}
}

func TestOpenRPCMatchesServedMethods(t *testing.T) {
	h := newHarness(t, fullOptions())
	var doc struct {
		OpenRPC string `json:"openrpc"`
		Methods []struct {
			Name string `json:"name"`
		} `json:"methods"`
	}
	_, body := h.post(t, call(rpc.MethodDiscover, ""))
	var r rpcResp
	if err := json.Unmarshal(body, &r); err != nil || r.Error != nil {
		t.Fatalf("rpc.discover: %s", body)
	}
	if err := json.Unmarshal(r.Result, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenRPC, "1.2") {
		t.Errorf("openrpc version %q", doc.OpenRPC)
	}
	inDoc := map[string]bool{}
	for _, m := range doc.Methods {
		inDoc[m.Name] = true
	}
	served := map[string]bool{}
	for _, m := range h.srv.Methods() {
		if m == rpc.MethodDiscover {
			continue
		}
		served[m] = true
		if !inDoc[m] {
			t.Errorf("served method %s is not in the OpenRPC document", m)
		}
	}
	for m := range inDoc {
		if !served[m] {
			t.Errorf("documented method %s is not served", m)
		}
	}
}

func TestErrorsDocListsEveryCode(t *testing.T) {
	md, err := os.ReadFile("ERRORS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errorTable {
		if !bytes.Contains(md, []byte("| "+itoa(e.Code)+" ")) {
			t.Errorf("ERRORS.md lacks code %d (%s)", e.Code, e.name)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestReleaseKeyDocMatchesBroker: the documented releaseKey fields are the
// broker's own (enclave.KeyRequest, enclave.WrappedKey plus the nonce).
func TestReleaseKeyDocMatchesBroker(t *testing.T) {
	names := func(v any) []string {
		var out []string
		for _, f := range fields(reflect.TypeOf(v)) {
			out = append(out, f.name)
		}
		sort.Strings(out)
		return out
	}
	if got, want := names(releaseKeyParams{}), names(enclave.KeyRequest{}); !reflect.DeepEqual(got, want) {
		t.Errorf("releaseKey params documented as %v, broker decodes %v", got, want)
	}
	if got, want := names(releaseKeyResult{}), append(names(enclave.WrappedKey{}), "nonce"); !reflect.DeepEqual(got, func() []string { sort.Strings(want); return want }()) {
		t.Errorf("releaseKey result documented as %v, broker answers %v", got, want)
	}
}
