package chain

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cometbft/cometbft/light"
	"github.com/cometbft/cometbft/light/provider"
	"github.com/cometbft/cometbft/light/provider/mock"
	"github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// logBuf is a slog handler's output, safe to read while the client logs.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startStoredLight starts a light client keeping its headers in dir.
func startStoredLight(t *testing.T, c *headerChain, gen *types.GenesisDoc, dir string, rpc lightRPC, primary provider.Provider, witness provider.Provider, log *logBuf) (*Light, error) {
	t.Helper()
	lg := quiet
	if log != nil {
		lg = slog.New(slog.NewTextHandler(log, nil))
	}
	return StartLight(context.Background(), LightOptions{Genesis: gen, Log: lg, primary: primary, witnesses: []provider.Provider{witness}, rpc: rpc,
		CommitTimeout: 5 * time.Second, Store: dir, StoreKeep: 4})
}

// TestLightStoreResumes: a light client keeps its verified headers under
// its store directory; a restart resumes from the last one with the
// primary and the witness unreachable (so nothing was asked of them for a
// trust root), reads at the same verified height by proofs, and follows on
// from there once the primary is back.
func TestLightStoreResumes(t *testing.T) {
	h, w, _ := lightWorld(t)
	top, _ := h.app.LastCommit()
	vals, privs := types.RandValidatorSet(4, 10)
	c := newHeaderChain(t, vals, privs, top+4, appHashAt(h.app), nil)
	early := c.upTo(top + 1)
	dir := t.TempDir()
	rpc := &appRPC{app: h.app}
	l, err := startStoredLight(t, c, c.genesis(), dir, rpc, mock.New(lightChainID, early, c.valsAt), mock.New(lightChainID, early, c.valsAt), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Height() != top {
		t.Fatalf("first start reads at %d, want %d", l.Height(), top)
	}
	l.Close()

	var logs logBuf
	l, err = startStoredLight(t, c, c.genesis(), dir, rpc, mock.NewDeadMock(lightChainID), mock.NewDeadMock(lightChainID), &logs)
	if err != nil {
		t.Fatalf("restart with the primary and witness down: %v (a restart must resume from the stored header)", err)
	}
	if l.Height() != top || !strings.Contains(logs.String(), "resuming from its stored trusted header") {
		t.Fatalf("restart reads at %d (want %d); log:\n%s", l.Height(), top, logs.String())
	}
	balance := func(l *Light) error {
		return l.View(context.Background(), func(v machine.View) error {
			if !bytes.Equal(v.Block.Hash, c.headers[top].Hash()) {
				t.Fatalf("resumed view block %d %X, want header %d", v.Block.Height, v.Block.Hash, top)
			}
			_, err := v.KV.Get(context.Background(), machine.KSLedger, []byte("bal/did:"+w.t2.DID.String()))
			return err
		})
	}
	if err := balance(l); err != nil {
		t.Fatalf("proven read after the restart: %v", err)
	}
	l.Close()

	// The primary is back with newer headers: the resumed client follows.
	l, err = startStoredLight(t, c, c.genesis(), dir, rpc, c.provider("primary"), c.provider("witness"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	waitLightHeight(t, l, top+3, "the resumed client")
}

// TestLightStoreFallback: a store whose last record is torn, whose bytes
// are corrupted, or that is no store at all is not trusted: the client
// logs it, keeps the file aside, re-derives trust from the primary and
// starts a new store that a later restart resumes from. A store past the
// trusting period is likewise not resumed from.
func TestLightStoreFallback(t *testing.T) {
	h, _, c := lightWorld(t)
	top, _ := h.app.LastCommit()
	rpc := &appRPC{app: h.app}
	for _, tc := range []struct {
		name   string
		damage func(raw []byte) []byte
		want   string
	}{
		{"torn last record", func(raw []byte) []byte { return raw[:len(raw)-7] }, "torn write"},
		{"torn record head", func(raw []byte) []byte { return append(raw, 0, 0, 1) }, "torn write"},
		{"flipped byte", func(raw []byte) []byte { raw[len(raw)-40] ^= 0x20; return raw }, "checksum mismatch"},
		{"not a store", func([]byte) []byte { return []byte("{\"chain_id\": \"light-test\", \"headers\": []}\n") }, "length"},
		{"empty", func([]byte) []byte { return nil }, "empty file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, raw := storeOnce(t, c, rpc)
			path := filepath.Join(dir, LightStoreFile)
			if err := os.WriteFile(path, tc.damage(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs logBuf
			l, err := startStoredLight(t, c, c.genesis(), dir, rpc, c.provider("primary"), c.provider("witness"), &logs)
			if err != nil {
				t.Fatalf("start over a damaged store: %v", err)
			}
			l.Close()
			if out := logs.String(); !strings.Contains(out, "stored trusted headers are damaged") || !strings.Contains(out, tc.want) || strings.Contains(out, "resuming") {
				t.Fatalf("log does not say the store was damaged (%q) and trust re-derived:\n%s", tc.want, out)
			}
			if _, err := os.Stat(path + ".damaged"); err != nil {
				t.Fatalf("the damaged store was not kept aside: %v", err)
			}
			// The new store is whole: the next start resumes from it.
			logs = logBuf{}
			l, err = startStoredLight(t, c, c.genesis(), dir, rpc, mock.NewDeadMock(lightChainID), mock.NewDeadMock(lightChainID), &logs)
			if err != nil {
				t.Fatalf("restart from the new store: %v", err)
			}
			l.Close()
			if l.Height() != top {
				t.Fatalf("resumed at %d, want %d", l.Height(), top)
			}
		})
	}

	t.Run("past the trusting period", func(t *testing.T) {
		_, raw := storeOnce(t, c, rpc)
		_, stored, err := parseLightStore(raw)
		if err != nil || len(stored) == 0 {
			t.Fatalf("store after a start: %d headers, %v", len(stored), err)
		}
		var logs logBuf
		o := LightOptions{Genesis: c.genesis(), TrustingPeriod: time.Hour}
		got, err := resumable(o, light.TrustOptions{Period: o.TrustingPeriod}, stored, stored[len(stored)-1].Time.Add(time.Hour), slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil || got != nil || !strings.Contains(logs.String(), "older than the trusting period") {
			t.Fatalf("expired header: resumed from %v, %v; log %s", got, err, logs.String())
		}
		if got, err := resumable(o, light.TrustOptions{Period: o.TrustingPeriod}, stored, stored[len(stored)-1].Time.Add(time.Hour-time.Second), quiet); err != nil || got == nil {
			t.Fatalf("header within the trusting period not resumed from: %v", err)
		}
	})
}

// storeOnce starts a light client keeping its headers in a new directory
// and closes it: the directory and its store file's bytes.
func storeOnce(t *testing.T, c *headerChain, rpc lightRPC) (dir string, raw []byte) {
	t.Helper()
	dir = t.TempDir()
	l, err := startStoredLight(t, c, c.genesis(), dir, rpc, c.provider("primary"), c.provider("witness"), nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	return dir, mustRead(t, filepath.Join(dir, LightStoreFile))
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestLightStoreOtherNetwork: a store written for another chain id, or for
// another genesis of the same chain id, is refused with a precise error
// and left as it is; an operator's trust root that contradicts a stored
// header is refused.
func TestLightStoreOtherNetwork(t *testing.T) {
	h, _, c := lightWorld(t)
	rpc := &appRPC{app: h.app}
	dir, before := storeOnce(t, c, rpc)
	path := filepath.Join(dir, LightStoreFile)

	otherChain := c.genesis()
	otherChain.ChainID = "another-chain"
	otherGenesis := c.genesis()
	otherGenesis.AppState = []byte(`{"another":"genesis"}`)
	for _, tc := range []struct {
		name string
		gen  *types.GenesisDoc
		want string
	}{
		{"other chain id", otherChain, `holds headers of chain "light-test"`},
		{"other genesis, same chain id", otherGenesis, "belongs to another network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := startStoredLight(t, c, tc.gen, dir, rpc, c.provider("primary"), c.provider("witness"), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal with %q", err, tc.want)
			}
			if !bytes.Equal(mustRead(t, path), before) {
				t.Fatal("a refused store was changed")
			}
		})
	}

	t.Run("trust root contradicting a stored header", func(t *testing.T) {
		_, stored, err := parseLightStore(before)
		if err != nil || len(stored) == 0 {
			t.Fatalf("%d stored, %v", len(stored), err)
		}
		at := stored[0].Height
		_, err = StartLight(context.Background(), LightOptions{Genesis: c.genesis(), Log: quiet, primary: c.provider("primary"),
			witnesses: []provider.Provider{c.provider("witness")}, rpc: rpc, Store: dir, TrustHeight: at, TrustHash: sum("not the header")})
		if err == nil || !strings.Contains(err.Error(), "contradicts the stored trusted header") {
			t.Fatalf("got %v, want the contradiction refused", err)
		}
	})
}

// TestLightStorePrunes: the store keeps at most 2×keep headers on disk and
// the last keep after pruning, and its file parses back to the headers
// appended, in order.
func TestLightStorePrunes(t *testing.T) {
	vals, privs := types.RandValidatorSet(4, 10)
	c := newHeaderChain(t, vals, privs, 30, func(h int64) []byte { return sum(string(rune(h))) }, nil)
	dir := t.TempDir()
	head := lightStoreHead{chainID: lightChainID, genesis: wire.Hash{7}}
	s, got, err := openLightStore(dir, head, 4, quiet)
	if err != nil || got != nil {
		t.Fatalf("new store: %v %v", got, err)
	}
	for h := int64(1); h <= 30; h++ {
		if err := s.append(&types.LightBlock{SignedHeader: c.headers[h], ValidatorSet: vals}); err != nil {
			t.Fatal(err)
		}
		_, blocks, err := parseLightStore(mustRead(t, filepath.Join(dir, LightStoreFile)))
		if err != nil {
			t.Fatalf("after height %d: %v", h, err)
		}
		if len(blocks) > 8 || blocks[len(blocks)-1].Height != h {
			t.Fatalf("after height %d: %d blocks on disk, last %d", h, len(blocks), blocks[len(blocks)-1].Height)
		}
		for i := 1; i < len(blocks); i++ {
			if blocks[i].Height != blocks[i-1].Height+1 || !bytes.Equal(blocks[i].Hash(), c.headers[blocks[i].Height].Hash()) {
				t.Fatalf("after height %d: block %d is %d", h, i, blocks[i].Height)
			}
		}
	}
	// A height already stored is not appended again.
	if err := s.append(&types.LightBlock{SignedHeader: c.headers[30], ValidatorSet: vals}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, got, err = openLightStore(dir, head, 4, quiet)
	if err != nil || len(got) < 4 || got[len(got)-1].Height != 30 {
		t.Fatalf("reopened: %d blocks, %v", len(got), err)
	}
	s.Close()
}

// FuzzLightStore: no file makes the store's parser panic, and a file it
// accepts encodes back to the same bytes (no record is read loosely).
func FuzzLightStore(f *testing.F) {
	vals, privs := types.RandValidatorSet(2, 10)
	c := newHeaderChain(f, vals, privs, 2, func(h int64) []byte { return sum(string(rune(h))) }, nil)
	head := lightStoreHead{chainID: lightChainID, genesis: wire.Hash{1}}
	seed := lightRecord(head.payload())
	f.Add(append([]byte(nil), seed...))
	for h := int64(1); h <= 2; h++ {
		rec, err := lightBlockRecord(&types.LightBlock{SignedHeader: c.headers[h], ValidatorSet: vals})
		if err != nil {
			f.Fatal(err)
		}
		seed = append(seed, rec...)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)-5])
	f.Fuzz(func(t *testing.T, raw []byte) {
		head, blocks, err := parseLightStore(raw)
		if err != nil {
			return
		}
		out := lightRecord(head.payload())
		for _, lb := range blocks {
			rec, err := lightBlockRecord(lb)
			if err != nil {
				t.Fatalf("accepted block %d does not encode: %v", lb.Height, err)
			}
			out = append(out, rec...)
		}
		if !bytes.Equal(out, raw) {
			t.Fatalf("accepted %d bytes that encode back to %d other bytes", len(raw), len(out))
		}
	})
}
