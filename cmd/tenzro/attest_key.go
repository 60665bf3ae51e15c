package main

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

func init() { registerAttestSub(newAttestDatasetKeyCmd) }

func newAttestDatasetKeyCmd() *cobra.Command {
	var task, enc, gpu string
	c := &cobra.Command{
		Use:   "dataset-key --task ID --enclave E",
		Short: "Confidential tier: get the run's dataset key from the key broker with this enclave's evidence",
		Long: "Asks the node's key broker for a nonce, makes an X25519 key in memory, gets evidence binding\n" +
			"attest.KeyReportData(\"dataset-key-request\", public key, nonce) from --enclave (with --gpu, composite\n" +
			"evidence), sends it, unwraps the released key and prints it (hex) on stdout — for a pipe into the process\n" +
			"that decrypts the dataset in memory (the reference trainer does this); it is never written to a file.\n" +
			"The broker releases the key only to evidence that passes the run's attestation policy.",
		Example:      "  tenzro attest dataset-key --task conf-run --enclave simulated-snp --rpc http://127.0.0.1:8545",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if task == "" {
				return usagef("--task is required")
			}
			ctx := cmd.Context()
			cl := nodeClient(cmd)
			var nr struct {
				Nonce []byte `json:"nonce"`
			}
			if err := cl.Call(ctx, wire.MethodReleaseKey, enclave.KeyRequest{TaskID: task}, &nr); err != nil {
				return err
			}
			priv, err := ecdh.X25519().GenerateKey(rand.Reader)
			if err != nil {
				return err
			}
			rd := attest.KeyReportData(enclave.PurposeDatasetKey, priv.PublicKey().Bytes(), nr.Nonce)
			prov, err := cpuProvider(cmd, enc)
			if err != nil {
				return err
			}
			var ev []byte
			if gpu == "simulated" {
				gp, err := simulatedGPU()
				if err != nil {
					return err
				}
				dp, ok := prov.(enclave.DataProvider)
				if !ok {
					return fmt.Errorf("--gpu: the %s provider has no 64-byte report data", prov.Vendor())
				}
				ev, err = enclave.CompositeEvidence(ctx, dp, gp, rd)
				if err != nil {
					return err
				}
			} else if gpu == "none" || gpu == "" {
				if ev, err = prov.Evidence(ctx, rd); err != nil {
					return err
				}
			} else {
				return usagef("--gpu %q (none or simulated)", gpu)
			}
			var w enclave.WrappedKey
			if err := cl.Call(ctx, wire.MethodReleaseKey, enclave.KeyRequest{TaskID: task, Evidence: ev, RecipientKey: priv.PublicKey().Bytes(), Nonce: nr.Nonce}, &w); err != nil {
				return err
			}
			key, err := enclave.Unwrap(priv, task, &w)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(key))
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&task, "task", "", "the Confidential run's task id")
	f.StringVar(&enc, "enclave", "auto", "CPU TEE provider (as for attest quote)")
	f.StringVar(&gpu, "gpu", "none", "none or simulated (composite evidence when the policy has nvidia_cc)")
	return c
}
