package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/wire"
)

func newLedgerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "Money: balances and signed transfers in attoTNZO (and the faucet of a --dev node)",
		Long: `ledger moves and shows attoTNZO (1 TNZO = 10^18 attoTNZO) through any node's JSON-RPC (--rpc), on
every kind of chain: a --dev node, a testnet validator, a full node or a light client.

On a network, funds come only from the genesis allocations and move by signed transfers:
a funded key (say the sponsor's) funds a second trainer with

  tenzro ledger transfer --to <trainer DID> --amount 200000000000000000000 --key sponsor.key --rpc http://<node>

'faucet' mints only on a node started with --dev (a one-validator chain for trying things out).`,
		RunE: groupRunE}
	cmd.AddCommand(newTransferCmd(), newBalanceCmd(), newFaucetCmd())
	return cmd
}

func printBalance(cmd *cobra.Command, b *wire.Balance) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, b)
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: %s attoTNZO\n", b.DID, b.Balance)
	return err
}

func newTransferCmd() *cobra.Command {
	var to, amount, keyPath string
	c := &cobra.Command{
		Use:   "transfer --to DID --amount AMOUNT [--key FILE]",
		Short: "Send attoTNZO from your key's DID to another DID (signed; answered once committed)",
		Example: `  tenzro ledger transfer --to did:tenzro:machine:z6Mk... --amount 200000000000000000000 --key sponsor.key
  tenzro ledger transfer --to did:tenzro:machine:z6Mk... --amount 1000 --rpc http://127.0.0.1:8548`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := wire.ParseAmount(amount); err != nil {
				return usagef("--amount: %v", err)
			}
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			p := &wire.TransferParams{From: k.DID.String(), To: to, Amount: amount, Signed: wire.Signed{Nonce: newNonce()}}
			p.Signature = k.Sign(p.Preimage())
			b, err := nodeClient(cmd).Transfer(cmd.Context(), p)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return emitJSON(cmd, b)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "sent %s attoTNZO to %s (committed at height %d); %s now holds %s attoTNZO\n",
				amount, to, b.Height, b.DID, b.Balance)
			return err
		},
	}
	c.Flags().StringVar(&to, "to", "", "recipient DID")
	c.Flags().StringVar(&amount, "amount", "", "amount in attoTNZO (decimal)")
	c.Flags().StringVar(&keyPath, "key", "", "sender's key file (default: $TENZRO_KEY, then ~/.tenzro/key.json)")
	_ = c.MarkFlagRequired("to")
	_ = c.MarkFlagRequired("amount")
	return c
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
