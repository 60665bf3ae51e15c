package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tenzro/train/machine"
)

func mustOpenMem(t *testing.T) *DB {
	t.Helper()
	db, err := OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestKeyspacePrefixesDistinct(t *testing.T) {
	seen := map[byte]machine.Keyspace{}
	for _, ks := range machine.AllKeyspaces {
		p, ok := keyspacePrefix[ks]
		if !ok {
			t.Fatalf("keyspace %q has no prefix: add one (and bump FormatVersion if needed)", ks)
		}
		if p == internalPrefix {
			t.Fatalf("keyspace %q uses the reserved prefix", ks)
		}
		if o, dup := seen[p]; dup {
			t.Fatalf("keyspaces %q and %q share prefix %#x", ks, o, p)
		}
		seen[p] = ks
	}
	if len(keyspacePrefix) != len(machine.AllKeyspaces) {
		t.Fatalf("%d prefixes for %d keyspaces", len(keyspacePrefix), len(machine.AllKeyspaces))
	}
}

func TestGetSetDeleteIsolation(t *testing.T) {
	ctx := context.Background()
	db := mustOpenMem(t)
	var b machine.Batch
	for _, ks := range machine.AllKeyspaces {
		b.Set(ks, []byte("k"), []byte("v-"+string(ks)))
	}
	b.Set(machine.KSRuns, []byte("empty"), nil)
	if err := db.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	for _, ks := range machine.AllKeyspaces {
		v, err := db.Get(ctx, ks, []byte("k"))
		if err != nil || string(v) != "v-"+string(ks) {
			t.Fatalf("%s: got %q, %v", ks, v, err)
		}
	}
	v, err := db.Get(ctx, machine.KSRuns, []byte("empty"))
	if err != nil || v == nil || len(v) != 0 {
		t.Fatalf("empty value: got %#v, %v", v, err)
	}
	// Get returns a copy.
	v, _ = db.Get(ctx, machine.KSLedger, []byte("k"))
	v[0] = 'X'
	if w, _ := db.Get(ctx, machine.KSLedger, []byte("k")); w[0] != 'v' {
		t.Fatal("Get did not return a copy")
	}
	var d machine.Batch
	d.Delete(machine.KSRuns, []byte("k"))
	if err := db.Commit(ctx, &d); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Get(ctx, machine.KSRuns, []byte("k")); !errors.Is(err, machine.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	if _, err := db.Get(ctx, machine.KSReceipts, []byte("k")); err != nil {
		t.Fatalf("delete leaked into another keyspace: %v", err)
	}
}

func TestScan(t *testing.T) {
	ctx := context.Background()
	db := mustOpenMem(t)
	keys := [][]byte{
		[]byte("a"), []byte("ab"), []byte("ab\x00"), []byte("ab\xff"), []byte("ac"), []byte("b"),
		{0xff}, {0xff, 0xff}, {0xff, 0xff, 0x01},
	}
	var b machine.Batch
	for _, k := range keys {
		b.Set(machine.KSTranscript, k, append([]byte("v"), k...))
		b.Set(machine.KSWeights, k, []byte("other")) // neighbouring keyspace must not show up
	}
	if err := db.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a", "ab", "ab\x00", "ab\xff", "ac", "b", "\xff", "\xff\xff", "\xff\xff\x01"}},
		{"a", []string{"a", "ab", "ab\x00", "ab\xff", "ac"}},
		{"ab", []string{"ab", "ab\x00", "ab\xff"}},
		{"ab\xff", []string{"ab\xff"}},
		{"\xff", []string{"\xff", "\xff\xff", "\xff\xff\x01"}},
		{"\xff\xff", []string{"\xff\xff", "\xff\xff\x01"}},
		{"z", nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.prefix), func(t *testing.T) {
			var got []string
			err := db.Scan(ctx, machine.KSTranscript, []byte(tc.prefix), func(k, v []byte) error {
				if !bytes.Equal(v, append([]byte("v"), k...)) {
					t.Errorf("key %q: value %q", k, v)
				}
				got = append(got, string(k))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	stop := errors.New("stop")
	n := 0
	if err := db.Scan(ctx, machine.KSTranscript, nil, func(k, v []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("callback error: got %v after %d keys", err, n)
	}
	cctx, cancel := context.WithCancel(ctx)
	n = 0
	err := db.Scan(cctx, machine.KSTranscript, nil, func(k, v []byte) error { n++; cancel(); return nil })
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("cancelled scan: got %v after %d keys", err, n)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	db := mustOpenMem(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	big := make([]byte, MaxKeySize+1)
	tests := []struct {
		name string
		ctx  context.Context
		ops  []machine.Op
		want error
	}{
		{"unknown keyspace", ctx, []machine.Op{{KS: "nope", Key: []byte("k"), Value: []byte{}}}, ErrUnknownKeyspace},
		{"empty key", ctx, []machine.Op{{KS: machine.KSRuns, Key: nil, Value: []byte{}}}, ErrLimit},
		{"key too large", ctx, []machine.Op{{KS: machine.KSRuns, Key: big, Value: []byte{}}}, ErrLimit},
		{"cancelled", cancelled, []machine.Op{{KS: machine.KSRuns, Key: []byte("k"), Value: []byte{}}}, context.Canceled},
		// One bad op refuses the whole batch: the good op before it must not land.
		{"partial", ctx, []machine.Op{{KS: machine.KSRuns, Key: []byte("good"), Value: []byte{}}, {KS: "nope", Key: []byte("k")}}, ErrUnknownKeyspace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := db.Commit(tc.ctx, &machine.Batch{Ops: tc.ops})
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := db.Get(ctx, machine.KSRuns, []byte("good")); !errors.Is(err, machine.ErrNotFound) {
		t.Fatalf("refused batch left a write: %v", err)
	}
	if _, err := db.Get(ctx, "nope", []byte("k")); !errors.Is(err, ErrUnknownKeyspace) {
		t.Fatalf("get unknown keyspace: %v", err)
	}
	if err := db.Scan(ctx, "nope", nil, func(k, v []byte) error { return nil }); !errors.Is(err, ErrUnknownKeyspace) {
		t.Fatalf("scan unknown keyspace: %v", err)
	}

	small, err := open(ctx, "small", Options{MaxValueSize: 10}, vfs.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	var b machine.Batch
	b.Set(machine.KSBlobs, []byte("k"), make([]byte, 11))
	if err := small.Commit(ctx, &b); !errors.Is(err, ErrLimit) {
		t.Fatalf("oversized value: %v", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	db, err := OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	var b machine.Batch
	b.Set(machine.KSRuns, []byte("k"), []byte("v"))
	if err := db.Commit(ctx, &b); !errors.Is(err, ErrClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	if _, err := db.Get(ctx, machine.KSRuns, []byte("k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	if err := db.Scan(ctx, machine.KSRuns, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("scan after close: %v", err)
	}
}

func TestReopenPersists(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b machine.Batch
	b.Set(machine.KSReceipts, []byte("r1"), []byte("receipt"))
	if err := db.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := db.Get(ctx, machine.KSReceipts, []byte("r1")); err != nil || string(v) != "receipt" {
		t.Fatalf("after reopen: %q, %v", v, err)
	}
}

func TestOpenRefusesForeignDirs(t *testing.T) {
	ctx := context.Background()

	t.Run("foreign pebble", func(t *testing.T) {
		dir := t.TempDir()
		p, err := pebble.Open(dir, &pebble.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Set([]byte("someone else's key"), []byte("v"), pebble.Sync); err != nil {
			t.Fatal(err)
		}
		p.Close()
		if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrNotStore) {
			t.Fatalf("got %v, want ErrNotStore", err)
		}
	})

	t.Run("unrelated files", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, dir, Options{}); !errors.Is(err, ErrNotStore) {
			t.Fatalf("got %v, want ErrNotStore", err)
		}
	})

	t.Run("empty pebble is claimed", func(t *testing.T) {
		dir := t.TempDir()
		p, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebbleFormat})
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		db, err := Open(ctx, dir, Options{})
		if err != nil {
			t.Fatalf("empty database from an interrupted creation: %v", err)
		}
		db.Close()
	})

	for _, tc := range []struct {
		name  string
		value []byte
		check func(error) bool
	}{
		{"other version", encodeFormat(FormatVersion + 1), func(err error) bool {
			var fe *FormatError
			return errors.As(err, &fe) && fe.Found == FormatVersion+1 && fe.Want == FormatVersion
		}},
		{"garbled record", []byte("tenzro-train/store"), func(err error) bool { return errors.Is(err, ErrNotStore) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db, err := Open(ctx, dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.db.Set(formatKey, tc.value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			db.Close()
			_, err = Open(ctx, dir, Options{})
			if !tc.check(err) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

func TestConcurrentCloseDoesNotPanic(t *testing.T) {
	ctx := context.Background()
	db, err := OpenInMemory()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			var b machine.Batch
			b.Set(machine.KSRuns, []byte(fmt.Sprint(i)), []byte("v"))
			if err := db.Commit(ctx, &b); err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("commit %d: %v", i, err)
				}
				return
			}
			// A nested call from inside Scan must not deadlock against Close.
			_ = db.Scan(ctx, machine.KSRuns, []byte("1"), func(k, v []byte) error {
				_, err := db.Get(ctx, machine.KSRuns, k)
				if err != nil && !errors.Is(err, ErrClosed) {
					return err
				}
				return nil
			})
		}
	}()
	var b machine.Batch
	b.Set(machine.KSRuns, []byte("x"), []byte("v"))
	for i := 0; i < 50; i++ {
		if err := db.Commit(ctx, &b); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
}

func FuzzDecodeFormat(f *testing.F) {
	f.Add(encodeFormat(FormatVersion))
	f.Add([]byte("tenzro-train/store"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeFormat(b)
		if err != nil {
			return
		}
		if !bytes.Equal(encodeFormat(v), b) {
			t.Fatalf("accepted %x which does not round-trip", b)
		}
	})
}

func FuzzEncodeKey(f *testing.F) {
	f.Add("runs", []byte("k"))
	f.Add("blobs", []byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, ks string, key []byte) {
		k, err := encodeKey(machine.Keyspace(ks), key)
		if err != nil {
			return
		}
		if k[0] == internalPrefix || !bytes.Equal(k[1:], key) {
			t.Fatalf("bad encoding %x of %q/%x", k, ks, key)
		}
		if u := upperBound(k); u == nil || bytes.Compare(u, k) <= 0 || bytes.Compare(u, append(bytes.Clone(k), 0xff, 0xff, 0xff)) <= 0 {
			t.Fatalf("bad upper bound %x for %x", u, k)
		}
	})
}
