package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/enclave"
	"github.com/tenzro/train/wire"
)

func init() { registerAttestSub(newAttestQuoteCmd) }

// quoteBinding is what `--nonce … --bind …` resolve to.
type quoteBinding struct {
	rd      wire.Hash
	nonce   []byte
	program wire.Hash
}

// parseBinding reads --bind: either the 32-byte report data itself (64 hex
// digits), or "program=HEX,shard=N,model=HEX,did=DID[,payload=HEX]" which,
// with the round nonce, gives attest.ReportData (the Verified-tier binding;
// payload is the hash of the gradient the evidence goes with, absent for an
// enrolment).
func parseBinding(bind, nonceHex string) (*quoteBinding, error) {
	var qb quoteBinding
	if nonceHex != "" {
		n, err := hex.DecodeString(strings.TrimPrefix(nonceHex, "0x"))
		if err != nil || len(n) == 0 || len(n) > 64 {
			return nil, fmt.Errorf("--nonce: want 1..64 bytes of hex")
		}
		qb.nonce = n
	}
	if b, err := hex.DecodeString(strings.TrimPrefix(bind, "0x")); err == nil && len(b) == 32 {
		if qb.nonce != nil {
			return nil, fmt.Errorf("--bind with raw report data takes no --nonce (the nonce is inside it)")
		}
		copy(qb.rd[:], b)
		return &qb, nil
	}
	if qb.nonce == nil {
		return nil, fmt.Errorf("--bind program=…,shard=…,model=…,did=… needs --nonce (the round nonce from tenzro_attest_getNonce)")
	}
	var model, payload wire.Hash
	var shard uint64
	var did string
	seen := map[string]bool{}
	for _, kv := range strings.Split(bind, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || seen[k] {
			return nil, fmt.Errorf("--bind: %q is not key=value (or repeats a key)", kv)
		}
		seen[k] = true
		var err error
		switch k {
		case "program":
			qb.program, err = wire.ParseHash(v)
		case "model":
			model, err = wire.ParseHash(v)
		case "shard":
			shard, err = strconv.ParseUint(v, 10, 64)
		case "did":
			did = v
		case "payload":
			payload, err = wire.ParseHash(v)
		default:
			err = fmt.Errorf("unknown key (want program, shard, model, did, payload)")
		}
		if err != nil {
			return nil, fmt.Errorf("--bind %s: %v", k, err)
		}
	}
	for _, k := range []string{"program", "shard", "model", "did"} {
		if !seen[k] {
			return nil, fmt.Errorf("--bind: missing %s=", k)
		}
	}
	qb.rd = attest.ReportData(qb.program, shard, model, did, qb.nonce, payload)
	return &qb, nil
}

// cpuProvider picks the CPU TEE provider named by --enclave.
func cpuProvider(cmd *cobra.Command, mode string) (enclave.Provider, error) {
	switch mode {
	case "auto":
		return enclave.Detect(cmd.Context())
	case "configfs-tsm", "configfs-tsm-tdx":
		return enclave.NewTSMProvider("tdx")
	case "configfs-tsm-snp":
		return enclave.NewTSMProvider("snp")
	case "sev-guest":
		return &enclave.SEVGuestProvider{Path: enclave.SEVGuestDev}, nil
	case "nsm":
		return &enclave.NitroProvider{}, nil
	}
	return simulatedCPU(mode, filepath.Join(os.TempDir(), "tenzro-simulated-enclave"))
}

func newAttestQuoteCmd() *cobra.Command {
	var enc, nonce, bind, gpu, gpuReport, gpuCert, format, collateral string
	var gpuNonceOnly bool
	c := &cobra.Command{
		Use:   "quote --nonce HEX --bind program=…,shard=…,model=…,did=…",
		Short: "Produce attestation evidence from this machine's TEE (and GPU) and print the envelope",
		Long: "Asks the TEE named by --enclave for evidence whose report data is the Verified-tier binding\n" +
			"(attest.ReportData of program, shard, model, trainer DID, the round nonce and, for a submission, the\n" +
			"payload hash (payload=HEX in --bind); or --bind HEX32 given\n" +
			"directly) and prints the evidence envelope (attest/EVIDENCE.md). With --gpu the evidence is composite:\n" +
			"the GPU report carries attest.GPUNonce(binding) and the CPU report data's second half commits to the GPU\n" +
			"report (docs/protocol/attestation-gpu.md). On a CC-mode NVIDIA GPU, print the GPU nonce with\n" +
			"--gpu-nonce-only, collect the report and chain through NVML (the reference trainer does), and pass them\n" +
			"with --gpu files --gpu-report F --gpu-cert F. On TDX, --collateral DIR carries the quote's collateral in the\n" +
			"envelope: every validator verifies evidence with only what it carries (docs/PROTOCOL.md §11). Simulated providers exist only in non-production builds\n" +
			"and are accepted only by policies with allow_simulated.\n" +
			"--enclave: auto, configfs-tsm (TDX), configfs-tsm-snp, sev-guest, nsm, simulated-snp, simulated-tdx, simulated-nitro.",
		Example: "  tenzro attest quote --enclave simulated-snp --nonce $NONCE --bind program=$P,shard=0,model=$M,did=$DID\n" +
			"  tenzro attest quote --enclave simulated-tdx --gpu simulated --nonce $NONCE --bind program=$P,shard=0,model=$M,did=$DID --format claim\n" +
			"  tenzro attest quote --enclave configfs-tsm --gpu-nonce-only --nonce $NONCE --bind …   # then NVML, then --gpu files",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bind == "" {
				return usagef("--bind is required")
			}
			qb, err := parseBinding(bind, nonce)
			if err != nil {
				return usageError{err}
			}
			if format != "envelope" && format != "claim" {
				return usagef("--format %q (envelope or claim)", format)
			}
			if format == "claim" && qb.nonce == nil {
				return usagef("--format claim needs --nonce and --bind program=…")
			}
			if gpuNonceOnly {
				n := attest.GPUNonce(qb.rd)
				fmt.Fprintln(cmd.OutOrStdout(), hex.EncodeToString(n[:]))
				return nil
			}
			var gp enclave.GPUProvider
			switch gpu {
			case "none", "":
			case "simulated":
				if gp, err = simulatedGPU(); err != nil {
					return usageError{err}
				}
			case "files":
				if gpuReport == "" || gpuCert == "" {
					return usagef("--gpu files needs --gpu-report and --gpu-cert")
				}
				rep, err := readLimited(gpuReport, 80<<10)
				if err != nil {
					return usageError{err}
				}
				ch, err := readLimited(gpuCert, 64<<10)
				if err != nil {
					return usageError{err}
				}
				gp = enclave.FileGPU{Report: rep, Chain: ch}
			default:
				return usagef("--gpu %q (none, simulated or files)", gpu)
			}
			prov, err := cpuProvider(cmd, enc)
			if err != nil {
				return err
			}
			var env []byte
			if gp != nil {
				dp, ok := prov.(enclave.DataProvider)
				if !ok {
					return fmt.Errorf("--gpu: the %s provider has no 64-byte report data (composite evidence needs TDX or SEV-SNP)", prov.Vendor())
				}
				env, err = enclave.CompositeEvidence(cmd.Context(), dp, gp, qb.rd)
			} else {
				env, err = prov.Evidence(cmd.Context(), qb.rd)
			}
			if err != nil {
				return err
			}
			if collateral != "" {
				if env, err = attest.AttachCollateral(env, collateral); err != nil {
					return fmt.Errorf("--collateral: %w", err)
				}
			}
			if prov.Simulated() {
				fmt.Fprintf(cmd.ErrOrStderr(), "# SIMULATED %s evidence: not a TEE; accepted only by policies with allow_simulated\n", prov.Vendor())
			}
			var out []byte = env
			if format == "claim" {
				out, err = json.Marshal(wire.AttestationClaim{Envelope: env, Nonce: qb.nonce, ProgramHash: qb.program})
				if err != nil {
					return err
				}
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return err
		},
	}
	f := c.Flags()
	f.StringVar(&enc, "enclave", "auto", "CPU TEE provider: auto, configfs-tsm, configfs-tsm-snp, sev-guest, nsm, simulated-snp, simulated-tdx, simulated-nitro")
	f.StringVar(&nonce, "nonce", "", "the round nonce (hex) from tenzro_attest_getNonce")
	f.StringVar(&bind, "bind", "", "program=HASH,shard=N,model=HASH,did=DID (with --nonce), or the 32-byte report data (hex)")
	f.StringVar(&gpu, "gpu", "none", "GPU evidence: none, simulated, or files (--gpu-report, --gpu-cert from NVML)")
	f.StringVar(&gpuReport, "gpu-report", "", "GPU attestation report collected with the GPU nonce (binary or hex)")
	f.StringVar(&gpuCert, "gpu-cert", "", "GPU device certificate chain (PEM, leaf first)")
	f.BoolVar(&gpuNonceOnly, "gpu-nonce-only", false, "print the nonce the GPU report must carry for this binding, and exit")
	f.StringVar(&format, "format", "envelope", "envelope (attest/EVIDENCE.md) or claim (wire.AttestationClaim for enrolment and submissions)")
	f.StringVar(&collateral, "collateral", os.Getenv("TENZRO_TDX_COLLATERAL"), "TDX: directory of Intel PCS collateral (<fmspc>.json) to carry inside the envelope; validators verify only what the evidence carries (default $TENZRO_TDX_COLLATERAL)")
	return c
}
