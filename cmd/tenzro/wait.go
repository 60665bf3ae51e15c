package main

// wait.go: `tenzro train wait`, the one way a user (or a pasted block) waits
// for a run, saying at every step what it is waiting for: trainers missing
// from enrolment, fragments committed in the round, rounds still inside
// their challenge window.

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/wire"
)

// waitReached reports whether the run is at or past the target (running,
// sealed or receipt); a cancelled run is an error, since no later state
// can come.
func waitReached(r *wire.RunView, target string) (reached bool, err error) {
	if r.Status == wire.StatusCancelled {
		reason := r.CancelReason
		if reason == "" {
			reason = "cancelled"
		}
		return false, fmt.Errorf("run %s was cancelled: %s", r.TaskID, reason)
	}
	switch target {
	case "running":
		return r.Status == wire.StatusRunning || r.Status == wire.StatusSealed, nil
	case "sealed", "receipt":
		return r.Status == wire.StatusSealed, nil
	}
	return false, fmt.Errorf("--for %q: want running, sealed or receipt", target)
}

// waitProgress is one line saying where the run stands and what it waits for.
func waitProgress(r *wire.RunView, height int64) string {
	var spec struct {
		TrainerCount int    `json:"trainer_count"`
		MaxRounds    uint64 `json:"max_rounds"`
	}
	_ = json.Unmarshal(r.TaskSpec, &spec)
	at := ""
	if height > 0 {
		at = fmt.Sprintf(" (height %d)", height)
	}
	switch r.Status {
	case wire.StatusAwaiting:
		enrolled := 0
		for _, t := range r.Trainers {
			if t.Status == wire.TrainerActive || t.Status == wire.TrainerJoining {
				enrolled++
			}
		}
		missing := max(spec.TrainerCount-enrolled, 0)
		return fmt.Sprintf("%s: awaiting enrolment: %d of M=%d trainers enrolled, %d missing%s", r.TaskID, enrolled, spec.TrainerCount, missing, at)
	case wire.StatusRunning:
		committed := 0
		for _, f := range r.Fragments {
			if f.Committed {
				committed++
			}
		}
		line := fmt.Sprintf("%s: round %d of %d: %d of %d fragments committed", r.TaskID, r.Round, spec.MaxRounds, committed, len(r.Fragments))
		if r.ChallengeWindowBlocks > 0 {
			line += fmt.Sprintf("; %d round(s) final (a commit is final %d blocks after its block; rewards follow finality)", r.FinalRounds, r.ChallengeWindowBlocks)
			if len(r.PendingFinal) > 0 && height > 0 {
				next := r.PendingFinal[0]
				line += fmt.Sprintf("; round %d final at height %d, %d blocks left", next.Round, next.FinalAt, max(next.FinalAt-height, 0))
			}
			if r.OpenChallenges > 0 {
				line += fmt.Sprintf("; %d open challenge(s): a challenged round is final only once its challenge is decided", r.OpenChallenges)
			}
		}
		return line + at
	case wire.StatusSealed:
		return fmt.Sprintf("%s: sealed%s", r.TaskID, at)
	}
	return fmt.Sprintf("%s: %s%s", r.TaskID, r.Status, at)
}

func newWaitCmd() *cobra.Command {
	var task, target, out string
	var timeout, every time.Duration
	c := &cobra.Command{
		Use:   "wait --task-id ID [--for running|sealed|receipt] [--out FILE]",
		Short: "Wait for a run to start, seal or have its receipt, printing what it is waiting for",
		Long: `wait follows a run and prints a line each time its progress changes: during enrolment how many
trainers are still missing, during rounds how many fragments of the round are committed and how many
rounds are final (on a network a commit is final only after its challenge window), and finally
that the run sealed and its receipt is signed.

--for running returns once the run has started, sealed once every round is final and the run is
sealed, receipt once the syncer's signed receipt is there (--out writes it). Exit 0 when reached,
1 when the run was cancelled or --timeout passed.`,
		Example: `  tenzro train wait --task-id testnet-run --for running
  tenzro train wait --task-id testnet-run --for receipt --out receipt.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := waitReached(&wire.RunView{}, target); err != nil {
				return usagef("%v", err)
			}
			cl := nodeClient(cmd)
			ctx := cmd.Context()
			deadline := time.Now().Add(timeout)
			w := cmd.ErrOrStderr()
			last := ""
			for {
				r, err := cl.GetRun(ctx, task)
				if err != nil {
					return err
				}
				var height int64
				if info, err := cl.Info(ctx); err == nil && info.Chain != nil {
					height = info.Chain.Height
				}
				reached, err := waitReached(r, target)
				if err != nil {
					return &exitError{code: exitFailed, msg: "error: " + err.Error()}
				}
				if line := waitProgress(r, height); line != last {
					fmt.Fprintln(w, line)
					last = line
				}
				if reached && target == "receipt" {
					raw, err := cl.GetReceiptRaw(ctx, task)
					if err == nil {
						fmt.Fprintf(w, "%s: receipt signed\n", task)
						if out != "" {
							pretty, err := indentRaw(raw)
							if err != nil {
								return fmt.Errorf("receipt from the node is not JSON: %w", err)
							}
							if err := os.WriteFile(out, append(pretty, '\n'), 0o644); err != nil {
								return fmt.Errorf("--out: %w", err)
							}
							fmt.Fprintf(w, "%s: receipt written to %s\n", task, out)
						}
						return nil
					}
					if line := fmt.Sprintf("%s: sealed, awaiting the syncer's signed receipt: %v", task, err); line != last {
						fmt.Fprintln(w, line)
						last = line
					}
				} else if reached {
					return nil
				}
				if time.Now().After(deadline) {
					return &exitError{code: exitFailed, msg: fmt.Sprintf("error: %s did not reach %q within %s (last: %s)", task, target, timeout, last)}
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(every):
				}
			}
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run to wait for")
	c.Flags().StringVar(&target, "for", "sealed", "running, sealed or receipt")
	c.Flags().StringVar(&out, "out", "", "with --for receipt: write the receipt JSON here")
	c.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "give up after this long (exit 1)")
	c.Flags().DurationVar(&every, "every", time.Second, "how often to ask the node")
	_ = c.MarkFlagRequired("task-id")
	return c
}
