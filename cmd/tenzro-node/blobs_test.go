package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/store"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
	"github.com/tenzro/train/wire/safetensors"
)

// startNode runs the real wiring in-process with the native engine and
// returns its client, RPC URL and data directory; it stops with the test.
func startNode(t *testing.T) (*client.Client, string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := defaults()
	cfg.DataDir, cfg.NodeKey, cfg.RPCAddr, cfg.ListenAddr, cfg.Dev, cfg.Engine = dir, filepath.Join(dir, "node.key"), addr, "/ip4/127.0.0.1/tcp/0", true, "native"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runNode(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("node did not shut down")
		}
	})
	c := client.New("http://"+addr, client.WithTimeout(30*time.Second))
	for i := 0; ; i++ {
		if _, err := c.Info(context.Background()); err == nil {
			break
		}
		if i > 200 {
			t.Fatalf("node did not start: %v", err)
		}
		select {
		case err := <-done:
			t.Fatalf("node exited: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return c, "http://" + addr, dir
}

// TestSubmitForms runs one round on a real node in which one trainer sends
// the seed's curl example verbatim (a JSON-RPC body with the payload in
// base64) and the other uploads its payload with PUT /blobs/<hash> and
// sends the small by-reference submission; the initial weights go by
// reference too. Both are accepted and the round commits.
func TestSubmitForms(t *testing.T) {
	ctx := context.Background()
	c, url, _ := startNode(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	sponsor, _ := did.Generate(did.KindHuman, nil)
	// 10^14 attoTNZO: at the default 10^9 per unreferenced byte, 100 kB of
	// uploads before the run exists.
	_, err := c.Faucet(ctx, wire.FaucetParams{DID: sponsor.DID.String(), Amount: "100000000000000"})
	must(err)
	const n = 1000
	w := make([]float32, n)
	init, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{n}, w)}, nil)
	must(err)
	spec, _ := json.Marshal(map[string]any{"task_id": "forms", "sponsor_did": sponsor.DID.String(), "sponsor_address": "0x11",
		"architecture": map[string]any{"family": "timesfm", "param_count": n, "modality": "Timeseries", "fragment_count": 1, "dtype": "f32"},
		"tier":         "Open", "aggregation": "Mean", "trainer_count": 2, "quorum": 2, "inner_steps": 1, "max_rounds": 1, "grace_window_ms": 600000,
		"reward_pool": "1000", "dataset_ref": "x", "dataset_hash": "0x00", "min_throughput": nil, "created_at": 1})
	_, canon, err := wire.ParseSpec(spec)
	must(err)
	wh := wire.ContentHash(init)
	// An upload without a signed intent is refused; the sponsor's is funded
	// by its balance.
	if _, err := c.PutBlob(ctx, wh, bytes.NewReader(init), int64(len(init))); client.CodeOf(err) != -32002 {
		t.Fatalf("unsigned upload: %v", err)
	}
	_, err = c.PutBlobSigned(ctx, client.BlobSigner{Key: sponsor}, wh, bytes.NewReader(init), int64(len(init)))
	must(err)
	pp := &wire.PostTaskParams{Spec: spec, InitWeightsHash: wh, Signed: wire.Signed{Nonce: uint64(time.Now().UnixNano())}}
	pp.Signature = sponsor.Sign(pp.Preimage(sponsor.DID.String(), wire.SpecHash(canon), wh))
	_, err = c.PostTask(ctx, pp)
	must(err)
	var tr [2]*did.Key
	for i := range tr {
		tr[i], _ = did.Generate(did.KindMachine, nil)
		_, err = c.Faucet(ctx, wire.FaucetParams{DID: tr[i].DID.String(), Amount: "100"})
		must(err)
		ep := &wire.EnrollParams{TaskID: "forms", TrainerDID: tr[i].DID.String(), Stake: "10", Signed: wire.Signed{Nonce: uint64(time.Now().UnixNano())}}
		ep.Signature = tr[i].Sign(ep.Preimage())
		_, err = c.Enroll(ctx, ep)
		must(err)
	}
	payload := func(i int) []byte {
		g := make([]float32, n)
		for j := range g {
			g[j] = float32(i+1) * 1e-3
		}
		b, err := safetensors.Encode([]safetensors.Tensor{safetensors.FromF32("w", []int64{n}, g)}, nil)
		must(err)
		return b
	}

	// The seed's form, verbatim: curl -X POST -H 'Content-Type: application/json' -d '…'.
	p0 := payload(0)
	h0 := wire.ContentHash(p0)
	sig0 := tr[0].Sign(wire.SubmissionPreimage("forms", tr[0].DID.String(), 0, 0, h0))
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tenzro_training_submitOuterGradient","params":{"task_id":"forms","trainer_did":"%s","round":0,"fragment_index":0,"gradient_payload":"%s","payload_hash":"0x%s","signature":"0x%x"}}`,
		tr[0].DID, base64.StdEncoding.EncodeToString(p0), h0, sig0)
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	must(err)
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(rb, []byte(`"accepted":true`)) {
		t.Fatalf("the seed's curl example: %d %s", resp.StatusCode, rb)
	}
	// The inline payload is served back raw from the blob store.
	var back bytes.Buffer
	if _, err := c.GetBlob(ctx, h0, &back, 1<<20); err != nil || !bytes.Equal(back.Bytes(), p0) {
		t.Fatalf("GET /blobs of the inline payload: %v", err)
	}

	// PUT, then the small submission by reference.
	p1 := payload(1)
	g := &wire.OuterGradient{TaskID: "forms", TrainerDID: tr[1].DID.String(), PayloadHash: wire.ContentHash(p1)}
	g.Signature = tr[1].Sign(g.Preimage())
	if _, err := c.Submit(ctx, g); client.CodeOf(err) != -32001 || !strings.Contains(err.Error(), "PUT /blobs/") {
		t.Fatalf("by reference before the upload: %v", err)
	}
	// The trainer's balance is its stake; its enrolment in the run funds it.
	res, err := c.PutBlobSigned(ctx, client.BlobSigner{Key: tr[1], Task: "forms"}, g.PayloadHash, bytes.NewReader(p1), int64(len(p1)))
	if err != nil || !res.Created {
		t.Fatalf("PUT: %+v %v", res, err)
	}
	sr, err := c.Submit(ctx, g)
	if err != nil || !sr.Accepted {
		t.Fatalf("by reference: %+v %v", sr, err)
	}
	for i := 0; ; i++ {
		run, err := c.GetRun(ctx, "forms")
		must(err)
		if run.Status == wire.StatusSealed {
			break
		}
		if i > 200 {
			t.Fatalf("run did not seal: %s round %d", run.Status, run.Round)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Replay reads the initial weights and both payloads from /blobs.
	raw, err := c.GetReceiptRaw(ctx, "forms")
	must(err)
	rounds, err := c.GetTranscript(ctx, "forms")
	must(err)
	transcript, _, err := audit.TranscriptBlob(rounds)
	must(err)
	rep, err := syncer.Replay(ctx, raw, transcript, c, syncer.NewNativeEngine(), nil)
	if err != nil || !rep.Match {
		t.Fatalf("replay over GET /blobs: %+v %v", rep, err)
	}
}

// TestMigrateKVBlobs: blobs an older node kept in Pebble move to files; a
// value that does not hash to its key stays where it is.
func TestMigrateKVBlobs(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, t.TempDir(), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bs, err := store.OpenBlobs(t.TempDir(), store.BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	good, odd := []byte("payload"), []byte("keyed by another hash")
	gh, oh := wire.ContentHash(good), wire.SHA256(odd)
	var b machine.Batch
	b.Set(machine.KSBlobs, gh[:], good)
	b.Set(machine.KSBlobs, oh[:], odd)
	if err := db.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := migrateKVBlobs(ctx, db, bs, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := bs.Get(ctx, gh); err != nil || !bytes.Equal(got, good) {
		t.Fatalf("migrated blob: %q %v", got, err)
	}
	if _, err := db.Get(ctx, machine.KSBlobs, gh[:]); err != machine.ErrNotFound {
		t.Fatalf("migrated blob still in the database: %v", err)
	}
	if got, err := db.Get(ctx, machine.KSBlobs, oh[:]); err != nil || !bytes.Equal(got, odd) {
		t.Fatalf("mismatching value: %q %v", got, err)
	}
}
