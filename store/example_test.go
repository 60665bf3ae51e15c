package store_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/store"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tenzro-store")
	defer os.RemoveAll(dir)

	db, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	// One state transition, one synced batch.
	var b machine.Batch
	b.Set(machine.KSRuns, []byte("task-1"), []byte(`{"status":"running"}`))
	b.Set(machine.KSLedger, []byte("escrow/task-1"), []byte("1000"))
	if err := db.Commit(ctx, &b); err != nil {
		fmt.Println(err)
		return
	}
	v, _ := db.Get(ctx, machine.KSRuns, []byte("task-1"))
	fmt.Println(string(v))
	_, err = db.Get(ctx, machine.KSRuns, []byte("task-2"))
	fmt.Println(err == machine.ErrNotFound)
	// Output:
	// {"status":"running"}
	// true
}
