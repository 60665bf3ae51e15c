package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/plugins"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

func newReceiptReplayCmd() *cobra.Command {
	var path, transcriptPath, task, engine string
	var round, fragment uint64
	var local bool
	c := &cobra.Command{
		Use:   "replay --receipt FILE [--transcript FILE] [--rpc URL] | --task-id T --round R --fragment F [--rpc URL]",
		Short: "Re-execute a run from its transcript and stored payloads (exit 0 match, 1 divergence)",
		Long: `Replay re-runs every round of a sealed run: it takes the transcript (--transcript
FILE, else fetched from the node by the receipt's transcript_hash) and checks it
against the receipt, fetches the initial weights and
every accepted payload by hash from a node (--rpc), checks each hash, re-runs the
aggregation rule and the outer step with the engine the receipt names (the Wasm
plugins by hash, fetched from the node when they are not built in, with the
receipt's memory and fuel limits), and compares every aggregate, weights and
momentum hash with the transcript. It reports the first divergence (round,
fragment, what differs) or that the final model hash matches.

With --task-id, --round and --fragment instead, the node (--rpc) re-executes that
fragment commit of a running run while it can still be challenged — its inputs,
weights and momentum fetched by hash, the verifiers, rule and outer step the
syncer ran — and this prints its FragmentResultHash (the hash
'tenzro train challenge --result-hash' takes; docs/protocol/challenges.md).
With --local this process re-executes it instead (the same code, this build's
--engine): the node gives only the committed state it reads and the bytes by
hash, each checked, so the result does not depend on trusting its computation
(the node serves only the blobs it holds: name your own node, or one that has
re-executed the commit).`,
		Example: `  tenzro receipt replay --receipt receipt.json --rpc http://127.0.0.1:8545
  tenzro receipt replay --task-id train-1 --round 3 --fragment 1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("round") || cmd.Flags().Changed("fragment") || task != "" {
				if task == "" || !cmd.Flags().Changed("round") || !cmd.Flags().Changed("fragment") || path != "" {
					return fmt.Errorf("replaying one fragment takes --task-id, --round and --fragment (and no --receipt)")
				}
				return replayFragment(cmd, task, round, fragment, local, engine)
			}
			if path == "" {
				return fmt.Errorf("required flag(s) \"receipt\" not set (or --task-id, --round and --fragment)")
			}
			b, err := readInputFile("receipt", path, maxReceiptFile)
			if err != nil {
				return err
			}
			rc, err := audit.ParseReceipt(b)
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			ctx := cmd.Context()
			cl := nodeClient(cmd)
			var transcript []byte
			if transcriptPath != "" {
				if transcript, err = readInputFile("transcript", transcriptPath, audit.MaxTranscriptBytes); err != nil {
					return err
				}
			} else if transcript, err = fetchTranscript(ctx, cl, rc); err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			eng, closeEng, err := replayEngine(ctx, rc, cl)
			if err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			defer closeEng()
			errw := cmd.ErrOrStderr()
			rep, err := syncer.Replay(ctx, b, transcript, cl, eng, func(r uint64, of int) {
				fmt.Fprintf(errw, "round %d/%d reproduced\n", r+1, of)
			})
			if err != nil {
				return &exitError{code: exitFailed, msg: "replay: " + err.Error()}
			}
			if jsonOutput(cmd) {
				if err := emitJSON(cmd, rep); err != nil {
					return err
				}
			} else if rep.Match {
				fmt.Fprintf(cmd.OutOrStdout(), "match: %d rounds, %d aggregations reproduced; final model hash %s\n", rep.Rounds, rep.Aggregations, rep.FinalModelHash)
			}
			if !rep.Match {
				return &exitError{code: exitFailed, msg: "divergence: " + rep.Divergence.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&path, "receipt", "", "receipt JSON file (from 'tenzro train get-receipt')")
	c.Flags().StringVar(&transcriptPath, "transcript", "", "transcript blob ('tenzro train get-transcript --out'); default: fetched from --rpc")
	c.Flags().StringVar(&task, "task-id", "", "with --round and --fragment: the run whose commit to re-execute")
	c.Flags().Uint64Var(&round, "round", 0, "round of the commit to re-execute")
	c.Flags().Uint64Var(&fragment, "fragment", 0, "fragment of the commit to re-execute")
	c.Flags().BoolVar(&local, "local", false, "with --round/--fragment: re-execute in this process (the node gives state and bytes only)")
	c.Flags().StringVar(&engine, "engine", "wasm", "with --local: wasm (the plugin sandbox) or native; the run's syncer ran the node default, wasm")
	return c
}

// replayEngine builds the engine the receipt says ran, with its limits, and
// loads every plugin the receipt names that is not built in.
func replayEngine(ctx context.Context, rc *wire.Receipt, cl interface {
	GetPlugin(ctx context.Context, h wire.Hash) (*wire.PluginInfo, []byte, error)
}) (syncer.Engine, func(), error) {
	var prof syncer.EngineProfile
	if err := json.Unmarshal(rc.Engine, &prof); err != nil {
		return nil, nil, fmt.Errorf("receipt engine profile: %w", err)
	}
	if strings.HasPrefix(prof.Engine, "native") {
		eng := syncer.NewNativeEngine()
		if eng.Profile().Hash != prof.Hash {
			return nil, nil, fmt.Errorf("the receipt's native engine %s (%s) is not this build's (%s)", prof.Engine, prof.Hash, eng.Profile().Hash)
		}
		return eng, func() {}, nil
	}
	var d plugins.ProfileDetails
	if err := json.Unmarshal(prof.Details, &d); err != nil {
		return nil, nil, fmt.Errorf("receipt engine details: %w", err)
	}
	dir, err := os.MkdirTemp("", "tenzro-replay-cache-")
	if err != nil {
		return nil, nil, err
	}
	eng, err := plugins.NewEngine(ctx, plugins.Config{CacheDir: dir, MemoryPages: d.MemoryPages, Fuel: d.Fuel, Workers: 1})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	closeFn := func() { _ = eng.Close(context.WithoutCancel(ctx)); os.RemoveAll(dir) }
	if eng.Profile().Hash != prof.Hash {
		closeFn()
		return nil, nil, fmt.Errorf("engine profile mismatch: the receipt ran %s with profile %s, this build gives %s (different runtime or cost table)", prof.Engine, prof.Hash, eng.Profile().Hash)
	}
	for _, h := range rc.PluginHashes {
		if _, err := eng.Get(ctx, h); err == nil {
			continue
		}
		_, mod, err := cl.GetPlugin(ctx, h)
		if err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("plugin sha256:%s: %w", h, err)
		}
		if got := wire.SHA256(mod); got != h {
			closeFn()
			return nil, nil, fmt.Errorf("plugin sha256:%s: the node served a module hashing to %s", h, got)
		}
		if _, err := eng.Publish(ctx, mod); err != nil {
			closeFn()
			return nil, nil, fmt.Errorf("plugin sha256:%s: %w", h, err)
		}
	}
	return eng, closeFn, nil
}
