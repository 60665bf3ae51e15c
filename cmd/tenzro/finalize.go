package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/rpc"
	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
)

func newFinalizeCmd() *cobra.Command {
	var task, keyPath string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "finalize-round --task-id ID [--key SYNCER_KEY] [--wait 90s]",
		Short: "Close the current round as soon as the protocol allows, or say why not",
		Long: `A fragment commits when every active trainer has submitted for it, or when K
have and its grace window τ (counted from the K-th acceptance) has passed; the
round closes when every fragment has committed, or at the round deadline. The
syncer node does this by itself on its timers.

With --key (the key of the run's elected syncer) finalize-round sends the
signed request tenzro_training_finalizeRound, which commits at once whatever
those rules allow now. It never shortens τ for trainers that are still active:
a request before the window closes is refused with, per fragment, why not and
when its window closes. Without --key nothing is sent; the command only watches
the run until the node closes the round on its own.

--wait keeps trying (with --key) or watching (without) for up to that long,
printing progress on stderr; --wait 0 tries once. Exit 0 when the round closed
(or the run sealed), 1 when it could not close in time.`,
		Example: `  tenzro train finalize-round --task-id train-1 --key syncer.key
  tenzro train finalize-round --task-id train-1 --wait 2m   # watch only`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wait < 0 {
				return usagef("--wait must be ≥ 0")
			}
			cl := nodeClient(cmd)
			ctx := cmd.Context()
			run, err := cl.GetRun(ctx, task)
			if err != nil {
				return err
			}
			if run.Status != wire.StatusRunning {
				return &exitError{code: exitFailed, msg: fmt.Sprintf("run %s is %s, not running: there is no round to finalize", task, run.Status)}
			}
			round := run.Round
			deadline := time.Now().Add(wait)
			if keyPath == "" {
				return watchRound(cmd, cl, task, round, deadline, wait)
			}
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			if run.Syncer != "" && run.Syncer != key.DID.String() {
				return usagef("--key is %s, but run %s's elected syncer is %s: only it may finalize rounds", key.DID, task, run.Syncer)
			}
			for attempt := 0; ; attempt++ {
				cid, err := nodeChainID(cmd)
				if err != nil {
					return err
				}
				p := &wire.FinalizeParams{TaskID: task, SyncerDID: key.DID.String(), Round: round, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
				p.Signature = key.Sign(p.Preimage())
				res, err := cl.FinalizeRound(ctx, p)
				if err == nil {
					return printFinalize(cmd, res)
				}
				if client.CodeOf(err) != rpc.CodeConflict || !strings.Contains(err.Error(), "cannot be finalized yet") || !time.Now().Before(deadline) {
					if v, gerr := cl.GetRun(ctx, task); gerr == nil && (v.Round > round || v.Status != wire.StatusRunning) {
						// The node's own timers closed it meanwhile.
						fmt.Fprintf(cmd.OutOrStdout(), "%s round %d: closed (run %s, now at round %d)\n", task, round, v.Status, v.Round)
						return nil
					}
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "round %d not finalizable yet (%v); retrying until %s\n", round, trimRPC(err), deadline.Format(time.TimeOnly))
				if err := sleepCtx(ctx, time.Second); err != nil {
					return err
				}
			}
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&keyPath, "key", "", "key file of the run's elected syncer (without it the command only watches)")
	c.Flags().DurationVar(&wait, "wait", 90*time.Second, "how long to keep trying or watching (0: once)")
	_ = c.MarkFlagRequired("task-id")
	return c
}

// watchRound polls the run until round has closed.
func watchRound(cmd *cobra.Command, cl *client.Client, task string, round uint64, deadline time.Time, wait time.Duration) error {
	ctx := cmd.Context()
	fmt.Fprintf(cmd.ErrOrStderr(), "no --key: only the elected syncer may finalize; watching round %d of %s close on the node's timers (up to %s)\n", round, task, wait)
	last := time.Now()
	for {
		v, err := cl.GetRun(ctx, task)
		if err != nil {
			return err
		}
		if v.Round > round || v.Status != wire.StatusRunning {
			fmt.Fprintf(cmd.OutOrStdout(), "%s round %d: closed (run %s, now at round %d)\n", task, round, v.Status, v.Round)
			return nil
		}
		if !time.Now().Before(deadline) {
			var parts []string
			for _, f := range v.Fragments {
				if !f.Committed {
					parts = append(parts, fmt.Sprintf("fragment %d has %d accepted", f.Index, f.Accepted))
				}
			}
			return &exitError{code: exitFailed, msg: fmt.Sprintf("round %d of %s did not close within %s: %s", round, task, wait, strings.Join(parts, "; "))}
		}
		if time.Since(last) >= 10*time.Second {
			fmt.Fprintf(cmd.ErrOrStderr(), "still waiting for round %d of %s\n", round, task)
			last = time.Now()
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func printFinalize(cmd *cobra.Command, res *wire.FinalizeResult) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, res)
	}
	w := cmd.OutOrStdout()
	state := "not finalized"
	if res.Advanced {
		state = "finalized"
	}
	fmt.Fprintf(w, "%s round %d: %s (run %s)\n", res.TaskID, res.Round, state, res.Status)
	for _, f := range res.Fragments {
		line := fmt.Sprintf("  fragment %d: %d accepted", f.Index, f.Accepted)
		if f.Committed {
			line += ", committed"
		}
		if f.Reason != "" {
			line += " — " + f.Reason
		}
		fmt.Fprintln(w, line)
	}
	if !res.Advanced {
		var why []string
		for _, f := range res.Fragments {
			if !f.Committed && f.Reason != "" {
				why = append(why, fmt.Sprintf("fragment %d: %s", f.Index, f.Reason))
			}
		}
		msg := fmt.Sprintf("round %d of %s cannot be finalized yet", res.Round, res.TaskID)
		if len(why) > 0 {
			msg += ": " + strings.Join(why, "; ")
		}
		return &exitError{code: exitFailed, msg: msg}
	}
	return nil
}

func trimRPC(err error) string {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
