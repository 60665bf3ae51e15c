//go:build linux

package gossip

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tenzro/train/store"
	"github.com/tenzro/train/wire"
)

// TestBlobStreamBench moves a TENZRO_BLOB_BENCH_MB (default 33) MB blob
// between two processes on loopback over /tenzro/blob/2.0.0 and reports
// the fetching process's throughput and peak RSS: into its blob store
// (FetchBlobTo), into memory (FetchBlob), and into its blob store with the
// stream cut at 40% and resumed. Each case runs TENZRO_BLOB_BENCH_REPS
// (default 3) times in a fresh child; medians and ranges are printed.
// Nothing is asserted about speed.
//
//	TENZRO_BLOB_BENCH=1 nice go test ./rpc/gossip -run TestBlobStreamBench -v
func TestBlobStreamBench(t *testing.T) {
	if os.Getenv("TENZRO_BLOB_BENCH") != "1" {
		t.Skip("a benchmark: set TENZRO_BLOB_BENCH=1")
	}
	mb, reps := 33, 3
	if v, err := strconv.Atoi(os.Getenv("TENZRO_BLOB_BENCH_MB")); err == nil {
		mb = v
	}
	if v, err := strconv.Atoi(os.Getenv("TENZRO_BLOB_BENCH_REPS")); err == nil {
		reps = v
	}
	ctx := context.Background()
	data := blobBytes(9, mb<<20)
	h := wire.ContentHash(data)
	bs := newBlobStore(t)
	if err := bs.Put(ctx, h, data); err != nil {
		t.Fatal(err)
	}
	server := newNode(t, ctx, Config{Blobs: bs, MaxBlob: int64(len(data))}, Handlers{})
	addr := server.Addrs()[0]
	// The baseline of the same run: a loopback HTTP GET of the same stored
	// file (net/http, sendfile where the kernel offers it), written by the
	// child into its blob store as the stream is.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := bs.OpenBlob(r.Context(), h)
		if err != nil {
			http.Error(w, err.Error(), 404)
			return
		}
		defer b.Close()
		http.ServeContent(w, r, "", time.Time{}, io.NewSectionReader(b, 0, b.Size()))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	type res struct {
		Secs  float64 `json:"secs"`
		HWMKB int64   `json:"hwm_kb"`
		Base  int64   `json:"base_kb"`
	}
	results := map[string][]res{}
	modes := []string{"store", "memory", "store, cut at 40% and resumed", "http GET baseline (loopback, into the blob store)"}
	for rep := 0; rep < reps; rep++ {
		for _, mode := range modes {
			if strings.HasPrefix(mode, "store, cut") {
				server.cutServeAfter.Store(int64(len(data)) * 4 / 10)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestBlobStreamBenchChild$", "-test.v")
			cmd.Env = append(os.Environ(), "TENZRO_BLOB_CHILD="+strings.SplitN(mode, ",", 2)[0], "TENZRO_BLOB_ADDR="+addr,
				"TENZRO_BLOB_HASH="+h.String(), "TENZRO_BLOB_SIZE="+strconv.Itoa(len(data)), "TENZRO_BLOB_HTTP=http://"+ln.Addr().String()+"/")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", mode, err, out)
			}
			line := ""
			for _, l := range strings.Split(string(out), "\n") {
				if s, ok := strings.CutPrefix(strings.TrimSpace(l), "RESULT "); ok {
					line = s
				}
			}
			var r res
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: child output %q", mode, out)
			}
			results[mode] = append(results[mode], r)
		}
	}
	med := func(v []float64) string {
		sort.Float64s(v)
		return fmt.Sprintf("%.2f (%.2f–%.2f)", v[len(v)/2], v[0], v[len(v)-1])
	}
	fmt.Printf("| fetch into | MB | MB/s median (range) | fetching process peak RSS above its baseline, MB | × blob |\n|---|---|---|---|---|\n")
	for _, mode := range modes {
		var mbps, rss, x []float64
		for _, r := range results[mode] {
			mbps = append(mbps, float64(len(data))/1e6/r.Secs)
			d := float64(r.HWMKB-r.Base) / 1024
			rss = append(rss, d)
			x = append(x, d*1024*1024/float64(len(data)))
		}
		fmt.Printf("| %s | %.1f | %s | %s | %s |\n", mode, float64(len(data))/1e6, med(mbps), med(rss), med(x))
	}
}

// TestBlobStreamBenchChild is the fetching process of TestBlobStreamBench.
func TestBlobStreamBenchChild(t *testing.T) {
	mode := os.Getenv("TENZRO_BLOB_CHILD")
	if mode == "" {
		t.Skip("the child process of TestBlobStreamBench")
	}
	// A forked child inherits its parent's RSS high-water mark: reset it.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	size, _ := strconv.Atoi(os.Getenv("TENZRO_BLOB_SIZE"))
	h, err := wire.ParseHash(os.Getenv("TENZRO_BLOB_HASH"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bs, err := store.OpenBlobs(dir, store.BlobOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	n := newNode(t, ctx, Config{Blobs: bs, MaxBlob: int64(size), BootNodes: []string{os.Getenv("TENZRO_BLOB_ADDR")}}, Handlers{})
	ai, _ := peer.AddrInfoFromString(os.Getenv("TENZRO_BLOB_ADDR"))
	base := statusKB(t, "VmRSS")
	start := time.Now()
	switch mode {
	case "store":
		got, err := n.FetchBlobTo(ctx, h, int64(size), ai.ID.String())
		if err != nil || got != int64(size) {
			t.Fatalf("FetchBlobTo: %d, %v", got, err)
		}
	case "http GET baseline (loopback":
		resp, err := http.Get(os.Getenv("TENZRO_BLOB_HTTP"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := bs.Create(h, int64(size))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, resp.Body); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	case "memory":
		b, err := n.FetchBlob(ctx, ai.ID.String(), h)
		if err != nil || len(b) != size {
			t.Fatalf("FetchBlob: %d, %v", len(b), err)
		}
	}
	secs := time.Since(start).Seconds()
	out, _ := json.Marshal(map[string]any{"secs": secs, "hwm_kb": statusKB(t, "VmHWM"), "base_kb": base})
	fmt.Printf("RESULT %s\n", out)
}

func statusKB(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s", field)
	return 0
}
