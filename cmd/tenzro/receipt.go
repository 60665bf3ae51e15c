package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// maxReceiptFile bounds a receipt read from disk.
const maxReceiptFile = 256 << 20

func newReceiptCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipt",
		Short: "Verify receipts offline, prove round inclusion, replay a run",
		Long: `Offline commands: they need no node. verify mirrors the 0x1008 TRAINING_VERIFY
precompile (valid or invalid, with the reason).`,
		RunE: groupRunE,
	}
	cmd.AddCommand(newReceiptVerifyCmd(), newReceiptProveCmd(), newReceiptReplayCmd())
	return cmd
}

func newReceiptVerifyCmd() *cobra.Command {
	var path, root string
	c := &cobra.Command{
		Use:   "verify --receipt FILE [--root HEX]",
		Short: "Verify a receipt offline (exit 0 valid, 1 invalid, 2 usage)",
		Long: `Verify a training receipt without a node: the run root recomputed from the spec
hash, every round commit and the final model hash (RFC 6962 Merkle tree with the
tenzro/train/run-root/v1 prefix), the syncer's signature, and the reward
distribution. --root checks against a claimed run root instead of the receipt's
own. Exit 0 valid, 1 invalid (the reason is printed), 2 usage.`,
		Example: `  tenzro receipt verify --receipt receipt.json
  tenzro receipt verify --receipt receipt.json --root 0x3f1c...`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readInputFile("receipt", path, maxReceiptFile)
			if err != nil {
				return err
			}
			var rootBytes []byte
			if root != "" {
				if rootBytes, err = syncer.ParseRoot(root); err != nil {
					return usagef("--root: %v", err)
				}
			}
			res := wire.VerifyReceiptResult{Valid: 1}
			if err := syncer.CheckReceipt(b, rootBytes); err != nil {
				res = wire.VerifyReceiptResult{Valid: 0, Reason: err.Error()}
			}
			if jsonOutput(cmd) {
				if err := emitJSON(cmd, res); err != nil {
					return err
				}
			} else if res.Valid == 1 {
				var head struct {
					TaskID  string `json:"task_id"`
					RunRoot string `json:"run_root"`
				}
				_ = json.Unmarshal(b, &head)
				fmt.Fprintf(cmd.OutOrStdout(), "valid: receipt of %s, run root %s\n", head.TaskID, head.RunRoot)
			}
			if res.Valid != 1 {
				return &exitError{code: exitFailed, msg: "invalid: " + res.Reason}
			}
			return nil
		},
	}
	c.Flags().StringVar(&path, "receipt", "", "receipt JSON file (from 'tenzro train get-receipt')")
	c.Flags().StringVar(&root, "root", "", "claimed run root (64 hex digits; default: the receipt's own)")
	_ = c.MarkFlagRequired("receipt")
	return c
}

type inclusionOut struct {
	Round    uint64      `json:"round"`
	Leaf     wire.Hash   `json:"leaf"`
	Index    uint64      `json:"leaf_index"`
	TreeSize uint64      `json:"tree_size"`
	Proof    []wire.Hash `json:"proof"`
	RunRoot  string      `json:"run_root"`
}

func newReceiptProveCmd() *cobra.Command {
	var path string
	var round uint64
	c := &cobra.Command{
		Use:   "prove --receipt FILE --round N",
		Short: "Print the RFC 6962 inclusion proof of a round commit in the run root",
		Long: `Print the audit path proving that round N's commit is a leaf of the receipt's run
root (RFC 6962 §2.1.1). Leaves are, in order: the spec hash, each round commit,
the final model hash; so round N is leaf N+1.`,
		Example: `  tenzro receipt prove --receipt receipt.json --round 2 --format json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("round") {
				return usagef("--round is required")
			}
			b, err := readInputFile("receipt", path, maxReceiptFile)
			if err != nil {
				return err
			}
			leaf, index, size, proof, err := syncer.InclusionProof(b, round)
			if err != nil {
				return err
			}
			var head struct {
				RunRoot string `json:"run_root"`
			}
			_ = json.Unmarshal(b, &head)
			out := inclusionOut{Round: round, Leaf: leaf, Index: index, TreeSize: size, Proof: proof, RunRoot: head.RunRoot}
			if out.Proof == nil {
				out.Proof = []wire.Hash{}
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, out)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "round %d: leaf %s, index %d of %d, run root %s\n", round, leaf, index, size, head.RunRoot)
			for i, h := range proof {
				fmt.Fprintf(w, "  proof[%d] %s\n", i, h)
			}
			return nil
		},
	}
	c.Flags().StringVar(&path, "receipt", "", "receipt JSON file")
	c.Flags().Uint64Var(&round, "round", 0, "round number")
	_ = c.MarkFlagRequired("receipt")
	_ = c.MarkFlagRequired("round")
	return c
}
