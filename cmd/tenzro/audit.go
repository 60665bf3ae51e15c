package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/wire"
)

func init() {
	auditCommands = append(auditCommands, newGetTranscriptCmd, newGetPayloadCmd)
}

// auditCommands are train subcommands for auditors replaying a run.
var auditCommands []func() *cobra.Command

func newGetTranscriptCmd() *cobra.Command {
	var task, out string
	c := &cobra.Command{
		Use:   "get-transcript --task-id ID [--out FILE]",
		Short: "Print a run's round commits so far (JSON), or write the transcript blob",
		Long: `Print the transcript: per round and fragment, the accepted submissions in
canonical order (trainer DID, payload hash), the rule and its hash, what it
selected, the aggregate and weights hashes, the syncer that committed it and its
ticket. Payloads are fetched by hash with get-payload, so a run can be replayed.

--out writes the transcript blob instead: the canonical (RFC 8785) JSON array of
the round commits, whose content hash a sealed run's receipt carries as
transcript_hash ('tenzro receipt verify --full --transcript FILE', 'tenzro receipt
replay --transcript FILE').`,
		Example: `  tenzro train get-transcript --task-id train-1 > transcript-pretty.json
  tenzro train get-transcript --task-id train-1 --out transcript.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				raw, err := nodeClient(cmd).CallRaw(cmd.Context(), wire.MethodGetTranscript, wire.TaskIDParams{TaskID: task})
				if err != nil {
					return err
				}
				return emitJSON(cmd, raw)
			}
			rounds, err := nodeClient(cmd).GetTranscript(cmd.Context(), task)
			if err != nil {
				return err
			}
			blob, _, err := audit.TranscriptBlob(rounds)
			if err != nil {
				return err
			}
			if err := os.WriteFile(out, blob, 0o644); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d rounds, %d bytes, transcript hash %s\n", out, len(rounds), len(blob), audit.BlobHash(blob))
			return nil
		},
	}
	c.Flags().StringVar(&task, "task-id", "", "run's task id")
	c.Flags().StringVar(&out, "out", "", "write the canonical transcript blob to this file")
	_ = c.MarkFlagRequired("task-id")
	return c
}

func newGetPayloadCmd() *cobra.Command {
	var hash, out string
	c := &cobra.Command{
		Use:     "get-payload --hash HEX --out FILE",
		Short:   "Download a stored payload (submission or weights) by its content hash (BLAKE3-256)",
		Example: `  tenzro train get-payload --hash 3f1c... --out g.safetensors`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := wire.ParseHash(hash)
			if err != nil {
				return usagef("--hash: %v", err)
			}
			if out == "" {
				return usagef("--out is required")
			}
			b, err := nodeClient(cmd).GetPayload(cmd.Context(), h)
			if err != nil {
				return err
			}
			if got := wire.ContentHash(b); got != h {
				return fmt.Errorf("node returned a payload hashing to %s, not %s", got, h)
			}
			if err := os.WriteFile(out, b, 0o644); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d bytes, blake3 %s\n", out, len(b), h)
			return nil
		},
	}
	c.Flags().StringVar(&hash, "hash", "", "payload content hash, BLAKE3-256 (64 hex digits)")
	c.Flags().StringVar(&out, "out", "", "file to write")
	_ = c.MarkFlagRequired("hash")
	_ = c.MarkFlagRequired("out")
	return c
}
