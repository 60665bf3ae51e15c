// Command tenzro is the Tenzro Train CLI: keys, training runs, the ledger,
// syncer candidacy and offline receipt verification. It talks to a node
// over JSON-RPC (--rpc, default http://127.0.0.1:8545) and holds no logic
// beyond flag parsing, signing and printing.
//
// Exit codes: 0 ok, 1 refused or failed, 2 usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tenzro/train/plugins"
)

func main() {
	plugins.ServeWorkerIfChild() // the plugin workers of `tenzro plugin run/hash/list`
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
