package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenzro/train/wire"
)

// The blob kill -9 test re-executes the test binary as a child that stores
// blobs forever (each through a reader that yields a little at a time, so a
// kill usually lands in the middle of a write) and prints each index once
// PutStream returned. The parent SIGKILLs it, reopens the directory and
// checks that every printed blob is whole, that every named file hashes to
// its name, and that no temporary file survives the reopen.

const (
	blobKillChildEnv = "TENZRO_BLOB_KILL_CHILD_DIR"
	blobKillStartEnv = "TENZRO_BLOB_KILL_CHILD_START"
)

func blobKillData(i int) []byte { return blobData(uint64(i)+1000, 50000+(i*7919)%(3<<20)) }

func TestBlobsKill9(t *testing.T) {
	if dir := os.Getenv(blobKillChildEnv); dir != "" {
		blobKillChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	printed, interrupted := -1, 0
	for round, killAfter := range []time.Duration{30 * time.Millisecond, 170 * time.Millisecond, 5 * time.Millisecond, 400 * time.Millisecond, 90 * time.Millisecond} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBlobsKill9$", "-test.count=1")
		cmd.Env = append(os.Environ(), blobKillChildEnv+"="+dir, blobKillStartEnv+"="+strconv.Itoa(printed+1))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the child to be writing, then kill it after killAfter.
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("child did not start: %q", sc.Text())
		}
		time.Sleep(killAfter)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(out)
		for _, line := range strings.Split(string(rest), "\n") {
			if idx, ok := strings.CutPrefix(line, "stored "); ok {
				if i, err := strconv.Atoi(idx); err == nil && i > printed {
					printed = i
				}
			}
		}
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL", round)
		}
		tmps := len(leftovers(t, dir))
		s, err := OpenBlobs(dir, BlobOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		if l := leftovers(t, dir); len(l) > 0 {
			t.Fatalf("round %d: temporary files survived the reopen: %v", round, l)
		}
		n := checkAllBlobs(t, s)
		for i := 0; i <= printed; i++ {
			if ok, err := s.Has(context.Background(), wire.ContentHash(blobKillData(i))); err != nil || !ok {
				t.Fatalf("round %d: blob %d was acknowledged and is missing after kill -9", round, i)
			}
		}
		s.Close()
		t.Logf("round %d: killed after %s, %d blobs acknowledged, %d on disk, %d interrupted writes cleaned", round, killAfter, printed+1, n, tmps)
		interrupted += tmps
	}
	if interrupted == 0 {
		t.Log("no kill landed inside a write this time (the checks above still hold)")
	}
}

func blobKillChild(dir string) {
	s, err := OpenBlobs(dir, BlobOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	start, _ := strconv.Atoi(os.Getenv(blobKillStartEnv))
	fmt.Println("ready")
	for i := start; ; i++ {
		data := blobKillData(i)
		r := &slowReader{r: bytes.NewReader(data)}
		if _, err := s.PutStream(ctx, wire.ContentHash(data), r, 0); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		fmt.Printf("stored %d\n", i)
	}
}

// slowReader yields at most 64 KiB per Read and pauses before each, so
// that most of the child's time is spent inside a write.
type slowReader struct{ r io.Reader }

func (s *slowReader) Read(p []byte) (int, error) {
	time.Sleep(200 * time.Microsecond)
	return s.r.Read(p[:min(len(p), 64<<10)])
}
