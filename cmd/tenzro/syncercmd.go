package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/syncer/election"
	"github.com/tenzro/train/syncer/vrf"
	"github.com/tenzro/train/wire"
)

func newSyncerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "syncer", Short: "Syncer candidacy for the election of a run's syncer", RunE: groupRunE}
	cmd.AddCommand(newSyncerRegisterCmd(), newSyncerListCmd(), newSyncerProveCmd(), newSyncerUnbondCmd())
	return cmd
}

func newSyncerRegisterCmd() *cobra.Command {
	var stake, keyPath string
	c := &cobra.Command{
		Use:   "register --stake AMOUNT --key FILE",
		Short: "Register the key's DID as a syncer candidate with a stake",
		Long: `Register as a syncer candidate. Elections among candidates use RFC 9381 ECVRF
weighted by stake. A node started with --dev registers itself as the only
candidate.`,
		Example: `  tenzro syncer register --stake 1000000000000000000 --key syncer.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := wire.ParseAmount(stake); err != nil {
				return usagef("--stake: %v", err)
			}
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.RegisterSyncerParams{DID: key.DID.String(), Stake: stake, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage())
			res, err := nodeClient(cmd).RegisterSyncer(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "registered %s as a syncer candidate with stake %s\n", res.DID, res.Stake)
			return nil
		},
	}
	c.Flags().StringVar(&stake, "stake", "", "stake in attoTNZO (decimal)")
	c.Flags().StringVar(&keyPath, "key", "", "candidate key file")
	_ = c.MarkFlagRequired("stake")
	_ = c.MarkFlagRequired("key")
	return c
}

func newSyncerListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List syncer candidates",
		Example: `  tenzro syncer list --format json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := nodeClient(cmd).ListSyncers(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				if cs == nil {
					cs = []wire.SyncerCandidate{}
				}
				return emitJSON(cmd, cs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DID\tSTAKE")
			for _, c := range cs {
				fmt.Fprintf(tw, "%s\t%s\n", c.DID, c.Stake)
			}
			return tw.Flush()
		},
	}
}

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Inspect the node", RunE: groupRunE}
	cmd.AddCommand(&cobra.Command{
		Use:     "info",
		Short:   "Show the node's version, DID, role, dev mode and engine",
		Example: `  tenzro node info --format json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, err := nodeClient(cmd).Info(cmd.Context())
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, info)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "version %s\ndid     %s\nrole    %s\ndev     %v\nengine  %s (%s)\n", info.Version, info.NodeDID, info.Role, info.Dev, info.Engine.Engine, info.Engine.Hash)
			return nil
		},
	})
	return cmd
}

func newSyncerProveCmd() *cobra.Command {
	var task, keyPath string
	c := &cobra.Command{
		Use:   "prove --task-id ID --key FILE",
		Short: "Enter a run's syncer election: send this candidate's VRF proof",
		Long: `Compute the RFC 9381 ECVRF-EDWARDS25519-SHA512-TAI proof of the candidate's key
over the run's election input (tenzro/train/election/v1, task id, spec hash) and
send it to the node. The candidate must be registered ('tenzro syncer register')
and the run must not have started; when M trainers have enrolled, the node elects
among every candidate that sent a proof (its own included), lowest stake-weighted
ticket wins, and stores all proofs in the run for anyone to re-check.`,
		Example: `  tenzro syncer prove --task-id train-2026-04-25-timesfm-200m --key syncer.key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			cl := nodeClient(cmd)
			run, err := cl.GetRun(cmd.Context(), task)
			if err != nil {
				return err
			}
			proof, err := vrf.Prove(key.Priv, election.Alpha(task, run.SpecHash))
			if err != nil {
				return err
			}
			cid, err := nodeChainID(cmd)
			if err != nil {
				return err
			}
			p := &wire.ElectionProofParams{TaskID: task, DID: key.DID.String(), Proof: proof, Signed: wire.Signed{ChainID: cid, Nonce: newNonce()}}
			p.Signature = key.Sign(p.Preimage())
			res, err := cl.SubmitElectionProof(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "entered the election of %s as %s (VRF output %x)\n", res.TaskID, res.DID, []byte(res.Output))
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&keyPath, "key", "", "candidate key file")
	_ = c.MarkFlagRequired("task-id")
	_ = c.MarkFlagRequired("key")
	return c
}
