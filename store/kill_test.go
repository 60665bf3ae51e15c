package store

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tenzro/train/machine"
)

// The kill -9 test re-executes the test binary as a child that commits
// numbered batches to a directory and prints each index after its Commit
// returned. The parent SIGKILLs the child part-way, reopens the directory and
// checks that every printed batch is there and that no batch is partial. It
// repeats this on the same directory, the child resuming after the last
// batch it finds.

const killChildEnv = "TENZRO_STORE_KILL_CHILD_DIR"

func TestKill9(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	printed := int64(-1)
	for round, killAfter := range []int{5, 37, 1, 80} {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKill9$", "-test.count=1")
		cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		seen := 0
		for sc.Scan() {
			line := sc.Text()
			idx, ok := strings.CutPrefix(line, "committed ")
			if !ok {
				continue
			}
			i, err := strconv.ParseInt(idx, 10, 64)
			if err != nil {
				t.Fatalf("child printed %q", line)
			}
			// A child may resume past printed: a batch can be committed
			// and killed before its line was written.
			if i <= printed || (seen > 0 && i != printed+1) {
				t.Fatalf("child committed %d after %d", i, printed)
			}
			printed = i
			if seen++; seen == killAfter {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		// Drain whatever the child printed before it died: those batches
		// returned from Commit too.
		rest, _ := io.ReadAll(out)
		for _, line := range strings.Split(string(rest), "\n") {
			if idx, ok := strings.CutPrefix(line, "committed "); ok {
				if i, err := strconv.ParseInt(idx, 10, 64); err == nil && i > printed {
					printed = i
				}
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL: %v", round, err)
		}
		db, err := Open(ctx, dir, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("round %d: reopen after kill -9: %v", round, err)
		}
		checkWriters(t, db, 1, []int64{printed}, isLarge)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after batch %d", round, printed)
	}
}

// killChild commits batches forever, resuming after the store's head.
func killChild(dir string) {
	ctx := context.Background()
	db, err := Open(ctx, dir, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	next := 0
	if v, err := db.Get(ctx, machine.KSMeta, []byte("head/w0")); err == nil {
		next = int(binary.BigEndian.Uint64(v)) + 1
	}
	for i := next; ; i++ {
		if err := db.Commit(ctx, testBatch(0, i, isLarge(i))); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		fmt.Printf("committed %d\n", i)
	}
}
