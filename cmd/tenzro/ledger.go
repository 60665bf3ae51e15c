package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/wire"
)

func newLedgerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "Balances in attoTNZO (and the dev faucet)", RunE: groupRunE}
	cmd.AddCommand(newFaucetCmd(), newBalanceCmd())
	return cmd
}

func printBalance(cmd *cobra.Command, b *wire.Balance) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, b)
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: %s attoTNZO\n", b.DID, b.Balance)
	return err
}

func newFaucetCmd() *cobra.Command {
	var didStr, amount string
	c := &cobra.Command{
		Use:     "faucet --did DID --amount AMOUNT",
		Short:   "Mint attoTNZO to a DID (only on a node started with --dev)",
		Example: `  tenzro ledger faucet --did did:tenzro:human:z6Mk... --amount 2000000000000000000000`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := wire.ParseAmount(amount); err != nil {
				return usagef("--amount: %v", err)
			}
			b, err := nodeClient(cmd).Faucet(cmd.Context(), wire.FaucetParams{DID: didStr, Amount: amount})
			if err != nil {
				return err
			}
			return printBalance(cmd, b)
		},
	}
	c.Flags().StringVar(&didStr, "did", "", "recipient DID")
	c.Flags().StringVar(&amount, "amount", "", "amount in attoTNZO (decimal)")
	_ = c.MarkFlagRequired("did")
	_ = c.MarkFlagRequired("amount")
	return c
}

func newBalanceCmd() *cobra.Command {
	var didStr string
	c := &cobra.Command{
		Use:     "balance --did DID",
		Short:   "Show a DID's balance",
		Example: `  tenzro ledger balance --did did:tenzro:machine:z6Mk...`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := nodeClient(cmd).Balance(cmd.Context(), didStr)
			if err != nil {
				return err
			}
			return printBalance(cmd, b)
		},
	}
	c.Flags().StringVar(&didStr, "did", "", "DID")
	_ = c.MarkFlagRequired("did")
	return c
}
