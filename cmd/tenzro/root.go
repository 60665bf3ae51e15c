package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/rpc/client"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // refused by the node, invalid receipt, I/O failure
	exitUsage  = 2 // bad flags or arguments
)

// extraCommands are top-level commands that other files of this package
// add from init() with registerCommand (plugin.go, attest.go, …), so that
// new commands need no edit here.
var extraCommands []func() *cobra.Command

// registerCommand adds a top-level command built by f.
func registerCommand(f func() *cobra.Command) { extraCommands = append(extraCommands, f) }

// usageError marks an error as a usage error (exit 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitError carries a specific exit code with an already-printed message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "tenzro",
		Short: "Tenzro Train: post, train, finalize and verify open training runs",
		Long: `tenzro drives a Tenzro Train node over JSON-RPC.

A sponsor posts a task spec and escrows the reward; trainers enrol with a stake
and submit one outer gradient per fragment per round; the elected syncer
aggregates and seals the run into a receipt that anyone can verify offline.

Every command that talks to a node takes --rpc (default http://127.0.0.1:8545,
or $TENZRO_RPC).
Signed commands take --key FILE (made by "tenzro key generate").
Exit codes: 0 ok, 1 refused or failed, 2 usage.`,
		Example: `  tenzro key generate --kind human --out sponsor.key
  tenzro ledger faucet --did did:tenzro:human:z6Mk... --amount 2000000000000000000000
  tenzro train post-task --spec spec.json --init-weights init.safetensors --key sponsor.key
  tenzro train get-run --task-id train-2026-04-25-timesfm-200m --format json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("format"); f != nil && f == cmd.Root().PersistentFlags().Lookup("format") {
				if v := f.Value.String(); v != "text" && v != "json" {
					return usagef("--format %q: want text or json", v)
				}
			}
			return nil
		},
	}
	defaultRPC := client.DefaultURL
	if env := os.Getenv("TENZRO_RPC"); env != "" {
		defaultRPC = env
	}
	root.PersistentFlags().String("rpc", defaultRPC, "node JSON-RPC endpoint (default from $TENZRO_RPC when set)")
	root.PersistentFlags().String("format", "text", "output format: text or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newKeyCmd(), newTrainCmd(), newLedgerCmd(), newSyncerCmd(), newReceiptCmd(), newNodeCmd())
	for _, f := range extraCommands {
		root.AddCommand(f())
	}
	return root
}

// execute runs the CLI with args and returns the exit code.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	}
	if isUsage(err) {
		fmt.Fprintf(stderr, "usage error: %v\nRun '%s --help' for usage.\n", err, commandPath(root, args))
		return exitUsage
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		fmt.Fprintf(stderr, "error: %s (code %d)\n", ce.Message, ce.Code)
		return exitFailed
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return exitFailed
}

func isUsage(err error) bool {
	var ue usageError
	if errors.As(err, &ue) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"required flag(s)", "unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "invalid argument", "flag needs an argument", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func commandPath(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == nil {
		return root.Name()
	}
	return c.CommandPath()
}

// noArgs refuses positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no positional arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// Helpers for commands (also for other files' commands).

// nodeClient returns a client for the --rpc endpoint.
func nodeClient(cmd *cobra.Command) *client.Client {
	url, _ := cmd.Flags().GetString("rpc")
	return client.New(url)
}

// jsonOutput reports whether --format json was asked for.
func jsonOutput(cmd *cobra.Command) bool {
	f, _ := cmd.Flags().GetString("format")
	return f == "json"
}

// emitJSON prints v as indented JSON on stdout.
func emitJSON(cmd *cobra.Command, v any) error {
	var b []byte
	var err error
	if raw, ok := v.(json.RawMessage); ok {
		b, err = indentRaw(raw)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
	return err
}

func indentRaw(raw json.RawMessage) ([]byte, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// readInputFile reads a file the user named, refusing files over limit.
func readInputFile(flag, path string, limit int64) ([]byte, error) {
	if path == "" {
		return nil, usagef("--%s is required", flag)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("--%s %s: larger than the %d-byte limit", flag, path, limit)
	}
	return b, nil
}

// newNonce is the request nonce: Unix nanoseconds, strictly increasing per
// signer as the node requires.
func newNonce() uint64 { return uint64(time.Now().UnixNano()) }

// groupRunE makes a command group refuse unknown subcommands (exit 2)
// instead of printing help with exit 0.
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}
