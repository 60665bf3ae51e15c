package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/wire/did"
)

func newKeyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "Make and inspect Ed25519 identities (did:tenzro)", RunE: groupRunE}
	cmd.AddCommand(newKeyGenerateCmd(), newKeyShowCmd())
	return cmd
}

type keyOut struct {
	DID       string `json:"did"`
	PublicKey string `json:"public_key"`
}

func newKeyGenerateCmd() *cobra.Command {
	var kind, out string
	c := &cobra.Command{
		Use:   "generate [--kind machine|human] [--out FILE]",
		Short: "Generate a key file and print its DID",
		Long: `Generate a fresh Ed25519 key and write it to --out (mode 0600, never overwritten).
The DID is self-certifying: did:tenzro:<human|machine>:z<base58btc key>.
Sponsors use human keys; trainers and syncers machine keys.

Without --out the key becomes the default key: $TENZRO_KEY when set, else
~/.tenzro/key.json. Commands that sign (post-task, enroll-trainer,
submit-gradient, ...) use the default key when --key is not given.`,
		Example: `  tenzro key generate                      # the default key, ~/.tenzro/key.json
  tenzro key generate --kind machine --out trainer.key
  tenzro key generate --kind human --out sponsor.key --format json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind != did.KindHuman && kind != did.KindMachine {
				return usagef("--kind %q: want machine or human", kind)
			}
			if out == "" {
				p, err := defaultKeyPath()
				if err != nil {
					return usageError{err}
				}
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					return fmt.Errorf("default key directory: %w", err)
				}
				out = p
			}
			k, err := did.Generate(kind, nil)
			if err != nil {
				return err
			}
			if err := k.Save(out); err != nil {
				return err
			}
			return printKey(cmd, k)
		},
	}
	c.Flags().StringVar(&kind, "kind", did.KindMachine, "identity kind: machine or human")
	c.Flags().StringVar(&out, "out", "", "key file to create (refuses to overwrite; default $TENZRO_KEY, then ~/.tenzro/key.json)")
	return c
}

func newKeyShowCmd() *cobra.Command {
	var keyPath string
	c := &cobra.Command{
		Use:     "show --key FILE",
		Short:   "Print the DID of a key file",
		Example: `  tenzro key show --key trainer.key --format json`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := loadKeyFile(keyPath)
			if err != nil {
				return err
			}
			return printKey(cmd, k)
		},
	}
	c.Flags().StringVar(&keyPath, "key", "", "key file (default $TENZRO_KEY, then ~/.tenzro/key.json)")
	return c
}

func printKey(cmd *cobra.Command, k *did.Key) error {
	if jsonOutput(cmd) {
		return emitJSON(cmd, keyOut{DID: k.DID.String(), PublicKey: hex.EncodeToString(k.DID.Key)})
	}
	_, err := fmt.Fprintln(cmd.OutOrStdout(), k.DID.String())
	return err
}
