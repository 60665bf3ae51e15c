package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/attest"
)

func init() { registerCommand(newAttestCmd) }

func newAttestCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "attest", Short: "Verify TEE attestation evidence and write policies"}
	cmd.AddCommand(newAttestVerifyCmd(), newAttestPolicyCmd())
	return cmd
}

func newAttestVerifyCmd() *cobra.Command {
	var evidence, vendor, at, collateral, policy, format string
	var certs []string
	c := &cobra.Command{
		Use:   "verify --evidence F",
		Short: "Verify evidence: authenticity only, or with --policy also validation",
		Long: "Without --policy: parse, signature chain to the vendor root, validity at --at (default now), debug refused; claims printed.\n" +
			"With --policy: the policy is validated too. Exit 0 accepted, 1 refused, 2 usage.",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			usage := func(err error) error {
				fmt.Fprintln(cmd.ErrOrStderr(), "usage:", err)
				os.Exit(2)
				return nil
			}
			if evidence == "" {
				return usage(errors.New("--evidence is required"))
			}
			raw, err := readLimited(evidence, attest.MaxEnvelope)
			if err != nil {
				return usage(err)
			}
			env := raw
			if vendor != "" { // raw evidence file: wrap it
				e := &attest.Envelope{Vendor: vendor, Evidence: raw}
				for _, f := range certs {
					b, err := readLimited(f, 64<<10)
					if err != nil {
						return usage(err)
					}
					e.Certs = append(e.Certs, b)
				}
				env = e.Marshal()
			} else if len(certs) > 0 {
				return usage(errors.New("--cert needs --vendor (raw evidence)"))
			}
			when := time.Now()
			if at != "" {
				if when, err = time.Parse(time.RFC3339, at); err != nil {
					return usage(fmt.Errorf("--at: %w", err))
				}
			}
			var pol *attest.Policy
			if policy != "" {
				b, err := readLimited(policy, attest.MaxPolicy)
				if err != nil {
					return usage(err)
				}
				if pol, err = attest.ParsePolicy(b, ""); err != nil {
					return usage(err)
				}
			}
			if format != "" && format != "json" && format != "text" {
				return usage(fmt.Errorf("--format %q (json or text)", format))
			}
			ch := attest.NewChecker(attest.Options{CollateralDir: collateral})
			res, verr := ch.Verify(context.Background(), env, pol, when, nil)
			if format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(res)
			} else {
				printResult(out, res)
			}
			if verr != nil {
				os.Exit(1)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&evidence, "evidence", "", "evidence envelope (JSON), or raw evidence with --vendor")
	f.StringVar(&vendor, "vendor", "", "raw evidence vendor: tdx, snp or nitro")
	f.StringVar(&at, "at", "", "verification time, RFC3339 (default now)")
	f.StringVar(&collateral, "collateral", "", "TDX collateral cache directory (<fmspc>.json files)")
	f.StringArrayVar(&certs, "cert", nil, "extra DER certificate (SNP VCEK/VLEK); repeatable")
	f.StringVar(&policy, "policy", "", "policy file (JSON); without it only authenticity is checked")
	f.StringVar(&format, "format", "text", "output: text or json")
	return c
}

func printResult(w io.Writer, r *attest.Result) {
	fmt.Fprintf(w, "vendor:     %s\nverified at: %s\n", r.Vendor, r.At.Format(time.RFC3339))
	for _, c := range r.Checks {
		st := "ok  "
		if !c.OK {
			st = "FAIL"
		}
		fmt.Fprintf(w, "  [%s] %-32s %s\n", st, c.Name, c.Detail)
	}
	if r.Claims != nil {
		b, _ := json.MarshalIndent(r.Claims, "  ", "  ")
		fmt.Fprintf(w, "claims:\n  %s\n", b)
	}
	if r.TCBStatus != "" {
		fmt.Fprintf(w, "tcb status: %s\n", r.TCBStatus)
	}
	fmt.Fprintf(w, "digest:     %s\nsimulated:  %v\n", r.Digest, r.Simulated)
	if r.Accepted {
		fmt.Fprintln(w, "result:     ACCEPTED")
	} else {
		fmt.Fprintf(w, "result:     REFUSED (check %s)\n", r.FailedAt)
	}
}

func newAttestPolicyCmd() *cobra.Command {
	p := &cobra.Command{Use: "policy", Short: "Attestation policies"}
	var tier, vendor, out string
	initCmd := &cobra.Command{
		Use:          "init --tier verified --vendor snp",
		Short:        "Write a documented policy template (see attest/EVIDENCE.md)",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t := map[string]string{"verified": "Verified", "confidential": "Confidential", "Verified": "Verified", "Confidential": "Confidential"}[tier]
			if t == "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "usage: --tier verified|confidential")
				os.Exit(2)
			}
			pol, err := attest.Template(t, vendor)
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), "usage:", err)
				os.Exit(2)
			}
			b, _ := json.MarshalIndent(pol, "", "  ")
			b = append(b, '\n')
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(b)
				fmt.Fprintln(cmd.ErrOrStderr(), "# template: replace the all-zero measurements with your image's; fields are documented in attest/EVIDENCE.md")
				return err
			}
			return os.WriteFile(out, b, 0o644)
		},
	}
	initCmd.Flags().StringVar(&tier, "tier", "verified", "verified or confidential")
	initCmd.Flags().StringVar(&vendor, "vendor", "snp", "tdx, snp or nitro")
	initCmd.Flags().StringVarP(&out, "out", "o", "", "output file (default stdout)")
	p.AddCommand(initCmd)
	return p
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}
