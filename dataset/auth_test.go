package dataset

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// post sends a dataset API request with the given Tenzro-Dataset-Request
// headers (none: unsigned) and returns the status and body.
func post(t *testing.T, base, path string, q url.Values, body []byte, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "https://attacker.example") // what a cross-origin page sends
	for _, h := range headers {
		req.Header.Add(wire.DatasetRequestHeader, h)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func held(t *testing.T, n *testNode, c cid.Cid) bool {
	t.Helper()
	return n.svc.Has(context.Background(), c)
}

// Issue 22 finding 6: a cross-origin POST /api/dataset/remove?cid=… without
// any credential unpinned someone's dataset. A remove is now refused
// unless it is signed, by a DID that pinned the dataset, for this chain,
// this CID and this operation, once, before it expires.
func TestDatasetRemoveNeedsTheOwnersSignature(t *testing.T) {
	ctx := context.Background()
	n := newTestNode(t, Options{}, nil)
	owner := serve(t, n)
	path, _ := randomFile(t, 300_000)
	rec, err := owner.Add(ctx, path, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := ParseCID(rec.CID)
	if len(rec.Owners) != 1 || rec.Owners[0] != owner.Key.DID.String() {
		t.Fatalf("owners %v, want the importer %s", rec.Owners, owner.Key.DID)
	}
	other := newKey(t)
	sign := func(k *did.Key, chain, op string, c cid.Cid, life time.Duration) string {
		return SignRequest(k, chain, op, c, life)
	}
	otherCID, _ := cid.Decode("bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu")
	q := url.Values{"cid": {rec.CID}}
	for _, c := range []struct {
		name    string
		headers []string
		status  int
		want    string
	}{
		{"cross-origin, unsigned", nil, 401, "needs exactly one Tenzro-Dataset-Request"},
		{"two headers", []string{sign(other, testChain, "remove", root, time.Minute), sign(other, testChain, "remove", root, time.Minute)}, 401, "got 2"},
		{"malformed", []string{"v1 nonsense"}, 401, "seven fields"},
		{"another DID", []string{sign(other, testChain, "remove", root, time.Minute)}, 403, "only a DID that pinned it removes its pin"},
		{"the owner, for another chain", []string{sign(owner.Key, "another-chain", "remove", root, time.Minute)}, 401, "does not verify"},
		{"the owner, for another CID", []string{sign(owner.Key, testChain, "remove", otherCID, time.Minute)}, 401, "signed for dataset"},
		{"the owner, an import request", []string{sign(owner.Key, testChain, "import", root, time.Minute)}, 401, `signed for \"import\", not \"remove\"`},
		{"the owner, expired", []string{sign(owner.Key, testChain, "remove", root, -time.Second)}, 401, "expired"},
		{"the owner, too far ahead", []string{sign(owner.Key, testChain, "remove", root, time.Hour)}, 401, "more than 15m0s from now"},
	} {
		status, body := post(t, owner.Base, "/api/dataset/remove", q, nil, c.headers...)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d %q", c.name, status, body, c.status, c.want)
		}
		if !held(t, n, root) {
			t.Fatalf("%s removed the dataset", c.name)
		}
	}
	// The owner's signed remove works once; a replay of its bytes is refused.
	good := sign(owner.Key, testChain, "remove", root, time.Minute)
	if status, body := post(t, owner.Base, "/api/dataset/remove", q, nil, good); status != 200 || !strings.Contains(body, `"removed"`) {
		t.Fatalf("owner's remove: %d %s", status, body)
	}
	if held(t, n, root) {
		t.Fatal("still held after the owner's remove")
	}
	if _, err := owner.Add(ctx, path, AddOptions{Layout: DefaultLayout}); err != nil {
		t.Fatal(err)
	}
	if status, body := post(t, owner.Base, "/api/dataset/remove", q, nil, good); status != 401 || !strings.Contains(body, "was used already") {
		t.Fatalf("replayed remove: %d %s", status, body)
	}
	if !held(t, n, root) {
		t.Fatal("a replayed remove removed the re-imported dataset")
	}
	// An unsigned import is refused and stores nothing.
	before := countBlocks(t, n)
	_, car := carOf(t, path, DefaultLayout)
	status, body := post(t, owner.Base, "/api/dataset/import", url.Values{"root": {rec.CID}}, car)
	if status != 401 || countBlocks(t, n) != before {
		t.Fatalf("unsigned import: %d %s", status, body)
	}
	// A signed import whose CAR has another root than the one signed.
	p2, _ := randomFile(t, 1000)
	r2, car2 := carOf(t, p2, DefaultLayout)
	status, body = post(t, owner.Base, "/api/dataset/import", url.Values{"root": {rec.CID}}, car2, sign(owner.Key, testChain, "import", root, time.Minute))
	if status != 401 || !strings.Contains(body, "the CAR's root is "+r2.String()) || held(t, n, r2) {
		t.Fatalf("import of another root: %d %s", status, body)
	}
	// A dataset fetched without a signature is the node's own: no DID removes it.
	if status, body := post(t, owner.Base, "/api/dataset/fetch", url.Values{"ref": {"ipfs://" + rec.CID}}, nil); status != 200 {
		t.Fatalf("anonymous fetch of a held dataset: %d %s", status, body)
	}
}

// Two DIDs that pin the same dataset each hold a pin: one's remove drops
// its own pin only; the dataset goes with the last one.
func TestDatasetSharedPins(t *testing.T) {
	ctx := context.Background()
	n := newTestNode(t, Options{}, nil)
	a, b := serve(t, n), serve(t, n)
	path, _ := randomFile(t, 200_000)
	rec, err := a.Add(ctx, path, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = b.Fetch(ctx, rec.Ref, 0); err != nil || len(rec.Owners) != 2 {
		t.Fatalf("b's signed fetch of a held dataset: %+v %v", rec, err)
	}
	res, err := a.Remove(ctx, rec.Ref)
	if err != nil || res.Removed != "" || len(res.StillPinnedBy) != 1 || res.StillPinnedBy[0] != b.Key.DID.String() {
		t.Fatalf("a's remove: %+v %v", res, err)
	}
	root, _ := ParseCID(rec.CID)
	if !held(t, n, root) {
		t.Fatal("a's remove removed b's pin")
	}
	if _, err := a.Remove(ctx, rec.Ref); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a's second remove: %v", err)
	}
	if res, err = b.Remove(ctx, rec.Ref); err != nil || res.Removed != rec.CID || held(t, n, root) || countBlocks(t, n) != 0 {
		t.Fatalf("b's remove: %+v %v (%d blocks left)", res, err, countBlocks(t, n))
	}
	// A dataset only the node pinned (unsigned fetch) is removed by no DID.
	c := serve(t, n)
	rec2, err := c.Add(ctx, path, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatal(err)
	}
	n.svc.recMu.Lock()
	r, _ := n.svc.Get(ctx, root)
	r.Owners = nil
	_ = n.svc.put(ctx, root, r)
	n.svc.recMu.Unlock()
	if _, err := c.Remove(ctx, rec2.Ref); err == nil || !strings.Contains(err.Error(), "fetched for this node itself") {
		t.Fatalf("remove of the node's own pin: %v", err)
	}
}

// Issue 22 finding 6: imports had no per-DID limit (512 MiB in 26 s,
// unbounded count). Each DID now pins at most QuotaCount datasets and
// QuotaBytes bytes; past either, the import is refused with the numbers
// and the flag, and nothing of it is kept.
func TestDatasetPerDIDQuota(t *testing.T) {
	ctx := context.Background()
	n := newTestNode(t, Options{QuotaCount: 2, QuotaBytes: 500_000}, nil)
	a := serve(t, n)
	p1, _ := randomFile(t, 100_000)
	p2, _ := randomFile(t, 100_000)
	p3, _ := randomFile(t, 100_000)
	big, _ := randomFile(t, 450_000)
	for _, p := range []string{p1, p2} {
		if _, err := a.Add(ctx, p, AddOptions{Layout: DefaultLayout}); err != nil {
			t.Fatal(err)
		}
	}
	before := countBlocks(t, n)
	_, err := a.Add(ctx, p3, AddOptions{Layout: DefaultLayout})
	if err == nil || !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "pins 2 datasets") ||
		!strings.Contains(err.Error(), "per-DID limit is 2 datasets (node flag --dataset-did-count)") {
		t.Fatalf("third import: %v", err)
	}
	if countBlocks(t, n) != before {
		t.Fatal("a refused import kept blocks")
	}
	// Another DID has its own quota; bytes: 450 kB fits 500 kB, a second
	// dataset of 100 kB does not.
	b := serve(t, n)
	if _, err := b.Add(ctx, big, AddOptions{Layout: DefaultLayout}); err != nil {
		t.Fatalf("b's first import: %v", err)
	}
	_, err = b.Add(ctx, p3, AddOptions{Layout: DefaultLayout})
	if err == nil || !strings.Contains(err.Error(), "429") || !strings.Contains(err.Error(), "per-DID limit of 500000 bytes (node flag --dataset-did-bytes)") {
		t.Fatalf("b past its bytes: %v", err)
	}
	r3, _ := RootCID(ctx, p3, DefaultLayout)
	if held(t, n, r3) {
		t.Fatal("the refused import is held")
	}
	// A signed fetch of a held dataset charges the fetcher too.
	var ofA []Record
	l, _ := a.List(ctx)
	for _, r := range l {
		if len(r.Owners) == 1 && r.Owners[0] == a.Key.DID.String() {
			ofA = append(ofA, r)
		}
	}
	if len(ofA) != 2 {
		t.Fatalf("a pins %d datasets, want 2: %+v", len(ofA), l)
	}
	if _, err := b.Fetch(ctx, ofA[0].Ref, 0); err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("b's fetch past its quota: %v", err)
	}
	// Removing one pin makes room again.
	if _, err := a.Remove(ctx, ofA[0].Ref); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add(ctx, p3, AddOptions{Layout: DefaultLayout}); err != nil {
		t.Fatalf("import after a remove: %v", err)
	}
}

// Issue 22 (left from item 4): per-DID quotas were bypassed with many DIDs,
// since a DID costs nothing. With Options.Funds (the node prices pins per
// byte of balance, as it prices unreferenced blob uploads) a fresh,
// unfunded DID's import is refused before any byte is read, with 402 and
// the reason; a DID whose balance funds less than its import is refused
// when the bytes pass what it funds, and nothing is kept; a funded DID
// passes.
func TestDatasetImportNeedsFunds(t *testing.T) {
	ctx := context.Background()
	funded := map[string]int64{}
	n := newTestNode(t, Options{QuotaBytes: 1 << 20, Funds: func(_ context.Context, did string) (int64, string, error) {
		b := funded[did]
		return b, "balance " + strconv.FormatInt(b*10, 10), nil
	}}, nil)
	fresh, poor, rich := serve(t, n), serve(t, n), serve(t, n)
	funded[poor.Key.DID.String()] = 50_000
	funded[rich.Key.DID.String()] = 400_000
	p, _ := randomFile(t, 100_000)
	root, err := RootCID(ctx, p, DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cl   *Client
		want []string
	}{
		{"fresh DID", fresh, []string{"402", fresh.Key.DID.String() + " pins 0 bytes of datasets and its balance funds 0 (balance 0, node flag --blob-price per byte)", "a pin needs balance"}},
		{"balance funds too little", poor, []string{"402", "would pass the 50000 bytes its balance funds (balance 500000, node flag --blob-price per byte)"}},
	} {
		before := countBlocks(t, n)
		_, err := c.cl.Add(ctx, p, AddOptions{Layout: DefaultLayout})
		if err == nil {
			t.Fatalf("%s: import accepted", c.name)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %v\nwant %q", c.name, err, w)
			}
		}
		if countBlocks(t, n) != before || held(t, n, root) {
			t.Fatalf("%s: the refused import kept blocks", c.name)
		}
	}
	rec, err := rich.Add(ctx, p, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatalf("funded import: %v", err)
	}
	if len(rec.Owners) != 1 || rec.Owners[0] != rich.Key.DID.String() || !held(t, n, root) {
		t.Fatalf("funded import: %+v", rec)
	}
	// A signed fetch pins too: the fresh DID cannot pin the held dataset.
	if _, err := fresh.Fetch(ctx, rec.Ref, 0); err == nil || !strings.Contains(err.Error(), "402") {
		t.Fatalf("fresh DID's signed fetch: %v", err)
	}
}

// Off --dev (Options.SignedFetch) a fetch without a Tenzro-Dataset-Request
// is refused with 401 and pins nothing; a signed fetch of the same dataset
// pins it for its DID; a bad signature is still refused.
func TestDatasetUnsignedFetchRefusedOnNetworks(t *testing.T) {
	ctx := context.Background()
	n := newTestNode(t, Options{SignedFetch: true}, nil)
	owner := serve(t, n)
	path, _ := randomFile(t, 100_000)
	rec, err := owner.Add(ctx, path, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatal(err)
	}
	root, _ := ParseCID(rec.CID)
	q := url.Values{"ref": {"ipfs://" + rec.CID}}
	status, body := post(t, owner.Base, "/api/dataset/fetch", q, nil)
	if status != 401 || !strings.Contains(body, "takes only signed fetches") || !strings.Contains(body, wire.DatasetRequestHeader) {
		t.Fatalf("unsigned fetch on a network: %d %s", status, body)
	}
	// Nothing changed: the importer is still the only owner.
	if l, err := n.svc.List(ctx); err != nil || len(l) != 1 || len(l[0].Owners) != 1 {
		t.Fatalf("after the refused fetch: %+v %v", l, err)
	}
	other := newKey(t)
	bad := SignRequest(other, "another-chain", wire.DatasetOpFetch, root, time.Minute)
	if status, body := post(t, owner.Base, "/api/dataset/fetch", q, nil, bad); status != 401 || !strings.Contains(body, "does not verify") {
		t.Fatalf("fetch signed for another chain: %d %s", status, body)
	}
	b := serve(t, n)
	got, err := b.Fetch(ctx, rec.Ref, 0)
	if err != nil || len(got.Owners) != 2 || !slices.Contains(got.Owners, b.Key.DID.String()) {
		t.Fatalf("signed fetch on a network: %+v %v", got, err)
	}
	// The same node with SignedFetch off (--dev) takes an unsigned fetch.
	dev := newTestNode(t, Options{}, nil)
	d := serve(t, dev)
	if _, err := d.Add(ctx, path, AddOptions{Layout: DefaultLayout}); err != nil {
		t.Fatal(err)
	}
	if status, body := post(t, d.Base, "/api/dataset/fetch", q, nil); status != 200 {
		t.Fatalf("unsigned fetch on --dev: %d %s", status, body)
	}
}

// The CLI's signer (SignRequestAt, which SignRequest calls) writes the
// header bytes of the cross-language vector, which the trainer's signer
// (tenzro_trainer.rpc.dataset_request) reproduces too.
func TestSignRequestMatchesVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "wire", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		DatasetRequests []struct {
			ChainID string `json:"chain_id"`
			Seed    string `json:"seed"`
			Kind    string `json:"kind"`
			Op      string `json:"op"`
			CID     string `json:"cid"`
			Expires uint64 `json:"expires"`
			Nonce   uint64 `json:"nonce"`
			Header  string `json:"header"`
		} `json:"dataset_requests"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range v.DatasetRequests {
		c, err := cid.Decode(r.CID)
		if err != nil { // a placeholder CID (QmAccept): wire's vector only
			continue
		}
		seed, _ := hex.DecodeString(r.Seed)
		k, err := did.FromSeed(r.Kind, seed)
		if err != nil {
			t.Fatal(err)
		}
		if got := SignRequestAt(k, r.ChainID, r.Op, c, r.Expires, r.Nonce); got != r.Header {
			t.Errorf("%s: SignRequestAt\n %s\nwant\n %s", r.Op, got, r.Header)
		}
		checked++
	}
	if checked < 2 {
		t.Fatalf("%d dataset request vectors checked, want at least 2", checked)
	}
}
