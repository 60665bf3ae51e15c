package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/wire"
)

func newCancelRunCmd() *cobra.Command {
	var task, keyPath string
	c := &cobra.Command{
		Use:   "cancel-run --task-id ID --key SPONSOR_KEY",
		Short: "Cancel a run that has not started; escrow and stakes are refunded",
		Long: `The sponsor cancels a run still awaiting enrolment (signed with the key of the
spec's sponsor_did). The escrowed reward pool goes back to the sponsor and every
enrolled trainer gets its stake back, in one step. A run that has started cannot
be cancelled.

Runs that never fill also end by themselves: when the spec's enroll_window_ms
(default 7 days) has passed since posting, the node expires the run with the
same refunds (get-run shows enroll_deadline_ms and, after, cancel_reason).`,
		Example: `  tenzro train cancel-run --task-id train-1 --key sponsor.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.CancelRunParams{TaskID: task, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage(key.DID.String()))
			res, err := nodeClient(cmd).CancelRun(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelled %s: %s attoTNZO refunded to the sponsor, %d trainer stake(s) refunded\n",
				res.TaskID, res.Refunded, res.StakesRefunded)
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&keyPath, "key", "", "sponsor key file (the spec's sponsor_did)")
	_ = c.MarkFlagRequired("task-id")
	_ = c.MarkFlagRequired("key")
	return c
}

func newSyncerUnbondCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:   "unbond --key FILE",
		Short: "Withdraw this candidate's syncer stake (released after the unbonding delay)",
		Long: `Withdraw the key's DID from syncer candidacy. Its whole stake moves at once to
an unbonding account, where it stays locked for the node's unbonding delay
(default 7 days), so a syncer cannot take its stake out right after a round it
might be challenged for; the node then returns it to the DID. An unbonding
candidate is not entered in any election. A candidate that is the elected
syncer of a running run must wait until that run ends.`,
		Example: `  tenzro syncer unbond --key syncer.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.UnbondParams{DID: key.DID.String(), Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage())
			res, err := nodeClient(cmd).Unbond(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "unbonding %s: stake %s is released at %s\n", res.DID, res.Stake,
				time.UnixMilli(res.ReleaseMs).UTC().Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().StringVar(&keyPath, "key", "", "candidate key file")
	_ = c.MarkFlagRequired("key")
	return c
}
