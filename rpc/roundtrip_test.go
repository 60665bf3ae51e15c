package rpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestClientRoundTrips calls every method through the typed client.
func TestClientRoundTrips(t *testing.T) {
	h := newHarness(t, fullOptions())
	c := client.New(h.http.URL)
	ctx := context.Background()
	key, err := did.Generate(did.KindHuman, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := `{"task_id":"t1","sponsor_did":"` + key.DID.String() + `","sponsor_address":"0x11","architecture":{"family":"timesfm","param_count":8,"modality":"Timeseries","fragment_count":2,"dtype":"bf16"},"tier":"Open","aggregation":"Mean","trainer_count":8,"quorum":6,"inner_steps":24,"max_rounds":3,"grace_window_ms":30000,"reward_pool":"1000","dataset_ref":"x","dataset_hash":"0x00","min_throughput":null,"created_at":1}`
	pt, err := c.PostTask(ctx, &wire.PostTaskParams{Spec: json.RawMessage(spec), InitWeights: []byte{1, 2}, Signed: wire.Signed{Nonce: 7, Signature: []byte{9}}})
	if err != nil || pt.TaskID != "t1" {
		t.Fatalf("PostTask: %v %+v", err, pt)
	}
	if got := h.svc.lastPost; got == nil || !bytes.Equal(got.InitWeights, []byte{1, 2}) || got.Nonce != 7 {
		t.Fatalf("PostTask params did not arrive intact: %+v", got)
	}
	payload := bytes.Repeat([]byte{0xab}, 1<<20)
	sub, err := c.Submit(ctx, &wire.OuterGradient{TaskID: "t1", TrainerDID: key.DID.String(), Round: 3, FragmentIndex: 1,
		GradientPayload: payload, PayloadHash: wire.ContentHash(payload), Signature: []byte{1}})
	if err != nil || !sub.Accepted || sub.Round != 3 {
		t.Fatalf("Submit: %v %+v", err, sub)
	}
	if !bytes.Equal(h.svc.lastSub.GradientPayload, payload) {
		t.Fatal("payload changed in transit")
	}
	_, err = c.Submit(ctx, &wire.OuterGradient{TaskID: "t1", TrainerDID: "d", GradientPayload: []byte{1}, PayloadHash: wire.ContentHash([]byte{2}), Signature: []byte{1}})
	if client.CodeOf(err) != rpc.CodeInvalidParams {
		t.Fatalf("hash mismatch: %v", err)
	}

	steps := []struct {
		name string
		fn   func() error
	}{
		{"SetInitWeights", func() error {
			_, err := c.SetInitWeights(ctx, &wire.SetInitWeightsParams{TaskID: "t1", Weights: []byte{1}, Signed: wire.Signed{Nonce: 1, Signature: []byte{1}}})
			return err
		}},
		{"ListRuns", func() error {
			r, err := c.ListRuns(ctx, wire.ListRunsParams{})
			if err == nil && (len(r) != 1 || r[0].TaskID != "t1") {
				t.Errorf("ListRuns %+v", r)
			}
			return err
		}},
		{"GetRun", func() error {
			r, err := c.GetRun(ctx, "t1")
			if err == nil && r.TrainerMetrics["did:tenzro:machine:zX"].Accepted != 2 {
				t.Errorf("GetRun %+v", r)
			}
			return err
		}},
		{"GetReceipt", func() error { _, err := c.GetReceipt(ctx, "t1"); return err }},
		{"GetReceiptRaw", func() error {
			raw, err := c.GetReceiptRaw(ctx, "t1")
			if err == nil && !bytes.Contains(raw, []byte(`"run_root"`)) {
				t.Errorf("raw receipt %s", raw)
			}
			return err
		}},
		{"GetTranscript", func() error { _, err := c.GetTranscript(ctx, "t1"); return err }},
		{"GetPayload", func() error {
			b, err := c.GetPayload(ctx, wire.ContentHash([]byte("payload")))
			if err == nil && string(b) != "payload" {
				t.Errorf("payload %q", b)
			}
			return err
		}},
		{"Enroll", func() error {
			_, err := c.Enroll(ctx, &wire.EnrollParams{TaskID: "t1", TrainerDID: "d", Stake: "1", Signed: wire.Signed{Nonce: 1, Signature: []byte{1}}})
			return err
		}},
		{"Leave", func() error {
			_, err := c.Leave(ctx, &wire.LeaveParams{TaskID: "t1", TrainerDID: "d", Signed: wire.Signed{Nonce: 1, Signature: []byte{1}}})
			return err
		}},
		{"FinalizeRound", func() error {
			r, err := c.FinalizeRound(ctx, &wire.FinalizeParams{TaskID: "t1", SyncerDID: "d", Round: 2, Signed: wire.Signed{Nonce: 1, Signature: []byte{1}}})
			if err == nil && (len(r.Fragments) != 1 || r.Fragments[0].Reason == "") {
				t.Errorf("finalize %+v", r)
			}
			return err
		}},
		{"GetWeights", func() error {
			w, err := c.GetWeights(ctx, wire.GetWeightsParams{TaskID: "t1", FragmentIndex: 1})
			if err == nil && string(w.Payload) != "weights" {
				t.Errorf("weights %+v", w)
			}
			return err
		}},
		{"VerifyReceipt", func() error {
			r, err := c.VerifyReceipt(ctx, wire.VerifyReceiptParams{Receipt: json.RawMessage(`{}`)})
			if err == nil && r.Valid != 1 {
				t.Errorf("verify %+v", r)
			}
			return err
		}},
		{"Balance", func() error { _, err := c.Balance(ctx, "d"); return err }},
		{"Faucet", func() error { _, err := c.Faucet(ctx, wire.FaucetParams{DID: "d", Amount: "5"}); return err }},
		{"RegisterSyncer", func() error {
			_, err := c.RegisterSyncer(ctx, &wire.RegisterSyncerParams{DID: "d", Stake: "1", Signed: wire.Signed{Nonce: 9, Signature: []byte{1}}})
			return err
		}},
		{"ListSyncers", func() error { _, err := c.ListSyncers(ctx); return err }},
		{"Info", func() error { _, err := c.Info(ctx); return err }},
		{"Discover", func() error { _, err := c.Discover(ctx); return err }},
		{"AttestNonce", func() error {
			_, err := c.AttestNonce(ctx, wire.NonceParams{TaskID: "t1", DID: "d"})
			return err
		}},
		{"Attest", func() error { _, err := c.Attest(ctx, wire.MethodGetPolicy, nil); return err }},
		{"PublishPlugin", func() error {
			_, err := c.PublishPlugin(ctx, &wire.PublishPluginParams{DID: "d", Module: []byte{0}, Signed: wire.Signed{Nonce: 1, Signature: []byte{1}}})
			return err
		}},
		{"ListPlugins", func() error { _, err := c.ListPlugins(ctx); return err }},
		{"GetPlugin", func() error {
			_, mod, err := c.GetPlugin(ctx, wire.SHA256([]byte("m")))
			if err == nil && len(mod) != 4 {
				t.Errorf("module %v", mod)
			}
			return err
		}},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}

	// Errors carry code, message and kind.
	_, err = c.GetRun(ctx, "missing")
	var e *client.Error
	if !asError(err, &e) || e.Code != rpc.CodeNotFound || e.Kind() != "not_found" || e.Message != `run "missing" not found` {
		t.Fatalf("error: %#v", err)
	}
}

func asError(err error, target **client.Error) bool {
	e, ok := err.(*client.Error)
	if ok {
		*target = e
	}
	return ok
}
