package dataset

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/boxo/ipld/merkledag"
	uio "github.com/ipfs/boxo/ipld/unixfs/io"
)

// heliaDir installs the pinned Helia packages (testdata/helia/package.json
// and its lock file) once per lock-file version into a cache outside the
// clone (~/.cache/tenzro/helia-<hash>, or $TENZRO_HELIA_DIR) and returns it.
func heliaDir(t *testing.T) string {
	t.Helper()
	_, err1 := exec.LookPath("node")
	npm, err2 := exec.LookPath("npm")
	if err1 != nil || err2 != nil {
		t.Skip("node and npm are not installed: the Helia interop test needs Node.js ≥ 20 and npm (`make tools` installs them)")
	}
	lock, err := os.ReadFile("testdata/helia/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := os.Getenv("TENZRO_HELIA_DIR")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(cache, "tenzro", "helia-"+hex.EncodeToString(sum[:8]))
	}
	for _, f := range []string{"package.json", "package-lock.json", "interop.mjs"} {
		b, err := os.ReadFile(filepath.Join("testdata/helia", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".installed")); err == nil {
		return dir
	}
	t.Logf("installing Helia (npm ci) into %s", dir)
	// --ignore-scripts: nothing we use has a build step (no native modules).
	cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	_ = os.WriteFile(filepath.Join(dir, "node_modules", ".installed"), lock, 0o644)
	return dir
}

// TestHeliaInterop: Helia, connected to our node over libp2p, fetches a CID
// our node added and gets identical bytes; our node fetches a file Helia
// added (Helia's own layout) over bitswap and reads identical bytes.
func TestHeliaInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Node.js")
	}
	dir := heliaDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a := newTestNode(t, Options{StallTimeout: 2 * time.Minute}, nil)
	ours, ourData := randomFile(t, 3<<20+999)
	root, car := carOf(t, ours, DefaultLayout)
	if _, err := a.svc.Import(ctx, bytes.NewReader(car), ImportMeta{}); err != nil {
		t.Fatal(err)
	}
	theirs, theirData := randomFile(t, 2<<20+333)
	out := filepath.Join(t.TempDir(), "out.bin")

	cmd := exec.CommandContext(ctx, "node", "interop.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"TENZRO_PEER="+a.h.Addrs()[0].String()+"/p2p/"+a.h.ID().String(),
		"GET_CID="+root.String(), "OUT_FILE="+out, "ADD_FILE="+theirs)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	next := func(key string) json.RawMessage {
		for lines.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(lines.Bytes(), &m) != nil {
				continue
			}
			if v, ok := m[key]; ok {
				return v
			}
		}
		t.Fatalf("helia ended before %q: %v\nstderr: %s", key, lines.Err(), stderr.String())
		return nil
	}
	next("dialed")
	next("got")
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, ourData) {
		t.Fatalf("Helia read %d bytes (want %d identical): %v", len(got), len(ourData), err)
	}
	var added string
	if err := json.Unmarshal(next("added"), &added); err != nil {
		t.Fatal(err)
	}
	c, err := ParseCID(added)
	if err != nil {
		t.Fatal(err)
	}
	// Connected already (Helia dialed us); the fetch asks it over bitswap.
	if len(a.h.Network().Peers()) == 0 {
		t.Fatal("not connected to Helia")
	}
	rec, err := a.svc.Fetch(ctx, c, 0)
	if err != nil {
		t.Fatalf("fetch Helia's %s: %v", c, err)
	}
	nd, err := merkledag.NewDAGService(a.svc.local).Get(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	r, err := uio.NewDagReader(ctx, nd, merkledag.NewDAGService(a.svc.local))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(b, theirData) {
		t.Fatalf("read %d bytes of Helia's file (want %d identical): %v", len(b), len(theirData), err)
	}
	// Helia's default layout (CIDv1, raw leaves, 1 MiB chunks, balanced) is
	// ours: the same CID.
	same, err := RootCID(ctx, theirs, DefaultLayout)
	if err != nil || same != c {
		t.Fatalf("our CID of Helia's file %s, Helia's %s (%v)", same, c, err)
	}
	if rec.Source != "fetched" || rec.Size != uint64(len(theirData)) {
		t.Fatalf("record %+v", rec)
	}
}
