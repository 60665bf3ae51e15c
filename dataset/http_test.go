package dataset

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

func serve(t *testing.T, n *testNode) *Client {
	t.Helper()
	routes, err := n.svc.Routes()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for p, h := range routes {
		mux.Handle(p, h)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &Client{Base: srv.URL, Key: newKey(t), ChainID: testChain}
}

// testChain is the chain id the test nodes take signed requests for.
const testChain = "tenzro-test"

func newKey(t testing.TB) *did.Key {
	t.Helper()
	k, err := did.Generate("human", rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestHTTPAddGatewayCAR: the CLI's client adds a directory through the API;
// the path gateway serves a file inside it and a CAR whose every block
// verifies; a second node fetches through its API and removes.
func TestHTTPAddGatewayCAR(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	b := newTestNode(t, Options{}, nil)
	connect(t, b, a)
	ca, cb := serve(t, a), serve(t, b)
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "train.csv"), []byte("x\n1\n2\n"), 0o600)
	_ = os.MkdirAll(filepath.Join(dir, "more"), 0o700)
	big := bytes.Repeat([]byte("0123456789abcdef"), 300_000)
	_ = os.WriteFile(filepath.Join(dir, "more", "big.bin"), big, 0o600)
	rec, err := ca.Add(ctx, dir, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Kind != "directory" || rec.Layout != DefaultLayout.String() {
		t.Fatalf("record %+v", rec)
	}
	var out bytes.Buffer
	if _, err := cb.Download(ctx, rec.Ref+"/more/big.bin", "", 0, &out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), big) {
		t.Fatal("gateway bytes differ")
	}
	out.Reset()
	if _, err := cb.Download(ctx, rec.Ref, "car", 0, &out); err != nil {
		t.Fatal(err)
	}
	cr, err := NewCARReader(&out)
	if err != nil || cr.Root.String() != rec.CID {
		t.Fatalf("car root %v: %v", cr, err)
	}
	n := 0
	for {
		_, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if int64(n) != rec.Blocks {
		t.Fatalf("CAR has %d blocks, the DAG %d", n, rec.Blocks)
	}
	l, err := cb.List(ctx)
	if err != nil || len(l) != 1 || l[0].Source != "fetched" {
		t.Fatalf("list %+v %v", l, err)
	}
	if _, err := cb.Remove(ctx, rec.Ref); err != nil {
		t.Fatal(err)
	}
	if k := countBlocks(t, b); k != 0 {
		t.Fatalf("%d blocks left after rm", k)
	}
	if _, err := cb.Remove(ctx, rec.Ref); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("second rm: %v", err)
	}
	for _, ref := range []string{"ipfs://nope", "ipfs://bafkqaaa"} {
		if _, err := cb.Fetch(ctx, ref, 0); err == nil || !strings.Contains(err.Error(), "400") {
			t.Fatalf("fetch %s: %v", ref, err)
		}
	}
	// A body that is not a CAR.
	resp, err := signedImport(t, ca, strings.NewReader("not a car"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("non-CAR import: %s", resp.Status)
	}
}

// Finding 10 of issue 22: HTML a stranger imported was served as text/html
// with no CSP on the origin of JSON-RPC. Gateway answers now sandbox it.
func TestGatewaySandboxesImportedHTML(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{}, nil)
	ca := serve(t, a)
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "index.html"), []byte("<html><script>fetch('/',{method:'POST'})</script></html>"), 0o600)
	rec, err := ca.Add(ctx, dir, AddOptions{Layout: DefaultLayout})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(ca.Base + "/ipfs/" + rec.CID + "/index.html")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway: %s", resp.Status)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.HasPrefix(csp, "sandbox") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q: want sandbox and frame-ancestors 'none'", csp)
	}
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q", got)
	}
}

// Finding 6 of issue 22: an import that sent one byte held the dataset lock
// for the server's 10-minute read timeout. A body below the minimum rate is
// now cut after the grace, nothing is kept, and the next import proceeds.
func TestImportTricklerIsCut(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{MinImportRate: 64 << 10, ImportGrace: time.Second}, nil)
	ca := serve(t, a)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte{0x3a}) // one byte of a CAR header, then nothing
		<-ctx.Done()
	}()
	t.Cleanup(func() { pw.Close() })
	start := time.Now()
	resp, err := signedImport(t, ca, pr)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "slower than") {
			t.Fatalf("trickled import: %s %s", resp.Status, b)
		}
	}
	if d := time.Since(start); d > 2*time.Minute {
		t.Fatalf("trickled import held for %s", d)
	}
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "x.csv"), []byte("x\n1\n"), 0o600)
	if _, err := ca.Add(ctx, dir, AddOptions{Layout: DefaultLayout}); err != nil {
		t.Fatalf("import after the trickler: %v", err)
	}
	if l, err := ca.List(ctx); err != nil || len(l) != 1 {
		t.Fatalf("held %+v, %v", l, err)
	}
}

// Finding 6 of issue 22: one import in flight (here a client that stalls,
// within a long grace) no longer blocks every other import: transfers
// share the lock, only removal takes it alone.
func TestStalledImportBlocksNoOther(t *testing.T) {
	ctx := context.Background()
	a := newTestNode(t, Options{ImportGrace: 10 * time.Minute}, nil)
	ca := serve(t, a)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go func() { _, _ = pw.Write([]byte{0x3a}) }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := signedImport(t, ca, pr)
		if err == nil {
			resp.Body.Close()
		}
	}()
	// Wait until the stalled import holds the transfer lock.
	for deadline := time.Now().Add(time.Minute); ; {
		if !a.svc.gc.TryLock() {
			break
		}
		a.svc.gc.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the stalled import never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "y.csv"), []byte("y\n2\n"), 0o600)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := ca.Add(cctx, dir, AddOptions{Layout: DefaultLayout}); err != nil {
		t.Fatalf("import while another is stalled: %v", err)
	}
	select {
	case <-done:
		t.Fatal("the stalled import ended before the other one; the test proves nothing")
	default:
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-done
}

// signedImport posts body to the import API as a signed import of a fixed
// root (the body is what the test makes of it).
func signedImport(t *testing.T, c *Client, body io.Reader) (*http.Response, error) {
	t.Helper()
	root, err := cid.Decode("bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu")
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.Base+"/api/dataset/import?root="+root.String(), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.ipld.car")
	req.Header.Set(wire.DatasetRequestHeader, SignRequest(c.Key, c.ChainID, wire.DatasetOpImport, root, time.Minute))
	return http.DefaultClient.Do(req)
}
