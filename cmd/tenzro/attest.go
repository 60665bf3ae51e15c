package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/attest/nvidia"
)

func init() { registerCommand(newAttestCmd) }

// attestSubs are subcommands other files add to `tenzro attest`.
var attestSubs []func() *cobra.Command

func registerAttestSub(f func() *cobra.Command) { attestSubs = append(attestSubs, f) }

func newAttestCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "attest", Short: "Verify TEE attestation evidence and write policies"}
	cmd.AddCommand(newAttestVerifyCmd(), newAttestPolicyCmd())
	for _, f := range attestSubs {
		cmd.AddCommand(f())
	}
	return cmd
}

func newAttestVerifyCmd() *cobra.Command {
	var evidence, vendor, at, collateral, policy, format, nonce, driverRIM, vbiosRIM string
	var certs []string
	c := &cobra.Command{
		Use:   "verify --evidence F",
		Short: "Verify evidence: authenticity only, or with --policy also validation",
		Long: "Checks run in this order and every check that ran is listed with its result: parse, signatures, the chain to\n" +
			"the vendor's pinned root at --at (default now), then collateral (TDX TCB info, QE identity and CRLs; NVIDIA\n" +
			"OCSP answers and RIMs), then the policy. Missing collateral is reported as unknown (\"TCB status unknown\",\n" +
			"\"measurements/revocation unknown\") after the signature checks held, and refuses unless a policy allows it.\n" +
			"The first failed check is named (tdx.signature, nvidia.chain, nvidia.nonce, nvidia.measurements, ...).\n" +
			"Exit 0 accepted, 1 refused, 2 usage.",
		Example: "  tenzro attest verify --evidence envelope.json --policy policy.json\n" +
			"  tenzro attest verify --vendor tdx --evidence quote.bin --collateral ~/.tenzro/collateral\n" +
			"  tenzro attest verify --vendor nvidia --evidence hopperAttestationReport.txt --cert hopperCertChain.txt \\\n" +
			"      --nonce 931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb --collateral nvidia-collateral/ --format json",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if evidence == "" {
				return usagef("--evidence is required")
			}
			limit := int64(attest.MaxEnvelope)
			raw, err := readLimited(evidence, limit)
			if err != nil {
				return usageError{err}
			}
			env := raw
			if vendor != "" { // raw evidence file: wrap it
				e := &attest.Envelope{Vendor: vendor, Evidence: raw}
				for _, f := range certs {
					b, err := readLimited(f, 64<<10)
					if err != nil {
						return usageError{err}
					}
					if vendor == attest.VendorNvidia {
						chain, err := nvidia.ParseChain(b)
						if err != nil {
							return usagef("--cert %s: %v", f, err)
						}
						for _, c := range chain {
							e.Certs = append(e.Certs, c.Raw)
						}
						continue
					}
					e.Certs = append(e.Certs, b)
				}
				if vendor == attest.VendorNvidia {
					if len(e.Certs) == 0 {
						return usagef("--vendor nvidia needs --cert CHAIN (the device certificate chain, PEM)")
					}
					r, err := nvidia.Parse(raw) // hex text (NVIDIA's samples) or binary
					if err != nil {
						return usagef("--evidence: %v", err)
					}
					e.Evidence = r.Raw
				}
				env = e.Marshal()
			} else if len(certs) > 0 {
				return usagef("--cert needs --vendor (raw evidence)")
			}
			when := time.Now()
			if at != "" {
				if when, err = time.Parse(time.RFC3339, at); err != nil {
					return usagef("--at: %v", err)
				}
			}
			vp := attest.VerifyParams{At: when}
			if policy != "" {
				b, err := readLimited(policy, attest.MaxPolicy)
				if err != nil {
					return usageError{err}
				}
				if vp.Policy, err = attest.ParsePolicy(b, ""); err != nil {
					return usageError{err}
				}
			}
			if nonce != "" {
				if vp.GPUNonce, err = hex.DecodeString(strings.TrimPrefix(nonce, "0x")); err != nil || len(vp.GPUNonce) != nvidia.NonceSize {
					return usagef("--nonce: want %d bytes of hex", nvidia.NonceSize)
				}
			}
			for _, r := range []struct {
				path string
				dst  *[]byte
			}{{driverRIM, &vp.DriverRIM}, {vbiosRIM, &vp.VBIOSRIM}} {
				if r.path == "" {
					continue
				}
				if *r.dst, err = readLimited(r.path, nvidia.MaxRIM); err != nil {
					return usageError{err}
				}
			}
			if format != "" && format != "json" && format != "text" {
				return usagef("--format %q (json or text)", format)
			}
			ch := attest.NewChecker(attest.Options{CollateralDir: collateral})
			res, verr := ch.VerifyWith(cmd.Context(), env, vp)
			if format == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				_ = enc.Encode(res)
			} else {
				printResult(out, res)
			}
			if verr != nil {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&evidence, "evidence", "", "evidence envelope (JSON), or raw evidence with --vendor")
	f.StringVar(&vendor, "vendor", "", "raw evidence vendor: tdx, snp, nitro or nvidia (GPU report, binary or hex)")
	f.StringVar(&at, "at", "", "verification time, RFC3339 (default now)")
	f.StringVar(&collateral, "collateral", "", "collateral cache directory: TDX <fmspc>.json files; NVIDIA *.swidtag RIMs and ocsp/<serial>.der")
	f.StringArrayVar(&certs, "cert", nil, "certificates: SNP VCEK/VLEK (DER, repeatable); NVIDIA device chain (PEM, leaf first)")
	f.StringVar(&policy, "policy", "", "policy file (JSON); without it only authenticity is checked")
	f.StringVar(&nonce, "nonce", "", "NVIDIA: the nonce the GPU report must carry (64 hex digits)")
	f.StringVar(&driverRIM, "driver-rim", "", "NVIDIA: driver RIM to compare with (default: from --collateral by version)")
	f.StringVar(&vbiosRIM, "vbios-rim", "", "NVIDIA: VBIOS RIM to compare with (default: from --collateral by version)")
	f.StringVar(&format, "format", "text", "output: text or json")
	return c
}

func printResult(w io.Writer, r *attest.Result) {
	fmt.Fprintf(w, "vendor:     %s\nverified at: %s\n", r.Vendor, r.At.Format(time.RFC3339))
	for _, c := range r.Checks {
		st := "ok  "
		switch {
		case c.Unknown:
			st = "??  "
		case !c.OK:
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
	var simulated bool
	initCmd := &cobra.Command{
		Use:   "init --tier verified --vendor snp [--simulated]",
		Short: "Write a documented policy template (see attest/EVIDENCE.md)",
		Long: `init writes a policy for a tier and a TEE vendor. The template's measurements are all
zeros: replace them with your image's (attest/EVIDENCE.md documents every field).

--simulated writes a DEVELOPMENT policy instead: "allow_simulated": true and the measurements
of the simulated enclave (tenzro-node --enclave simulated-snp|simulated-tdx|simulated-nitro),
so a Verified or Confidential run can be tried on a machine without a TEE. Simulated evidence
proves nothing; production builds refuse this flag and such evidence.`,
		Example: `  tenzro attest policy init --tier verified --vendor snp --out policy.json
  tenzro attest policy init --tier verified --vendor snp --simulated --out dev-policy.json`,
		SilenceUsage: true,
		Args:         noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t := map[string]string{"verified": "Verified", "confidential": "Confidential", "Verified": "Verified", "Confidential": "Confidential"}[tier]
			if t == "" {
				return usagef("--tier %q: want verified or confidential", tier)
			}
			pol, err := attest.Template(t, vendor)
			if err != nil {
				return usagef("--vendor: %v", err)
			}
			note := "# template: replace the all-zero measurements with your image's; fields are documented in attest/EVIDENCE.md"
			if simulated {
				if err := simulatedPolicy(pol); err != nil {
					return err
				}
				note = "# DEVELOPMENT ONLY: this policy accepts the SIMULATED enclave (allow_simulated), which proves nothing; never use it for a real run"
			}
			b, _ := json.MarshalIndent(pol, "", "  ")
			b = append(b, '\n')
			if out == "" || out == "-" {
				_, err = cmd.OutOrStdout().Write(b)
				fmt.Fprintln(cmd.ErrOrStderr(), note)
				return err
			}
			if err := os.WriteFile(out, b, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n%s\n", out, note)
			return nil
		},
	}
	initCmd.Flags().StringVar(&tier, "tier", "verified", "verified or confidential")
	initCmd.Flags().StringVar(&vendor, "vendor", "snp", "tdx, snp, nitro, or nvidia (SEV-SNP + nvidia_cc, composite)")
	initCmd.Flags().StringVarP(&out, "out", "o", "", "output file (default stdout)")
	initCmd.Flags().BoolVar(&simulated, "simulated", false, "development policy that accepts the simulated enclave (allow_simulated + its measurements)")
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
