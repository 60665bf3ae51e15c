// Package enclave is what runs inside a TEE: quote providers for TDX and
// SEV-SNP (Linux configfs-tsm, /sys/kernel/config/tsm/report) and AWS Nitro
// (/dev/nsm via github.com/hf/nsm), chosen by Detect; key custody for the
// syncer's Ed25519 signing key (born inside, sealed with AES-256-GCM under a
// provider-derived key, never written in clear, its public key bound in the
// evidence); and the Confidential tier's key broker and dataset sealing.
//
// Sealing keys: SEV-SNP derives them with MSG_KEY_REQ (SNPSealingKey, via
// go-sev-guest's client); TDX and Nitro have no local sealing primitive and
// return ErrNoLocalSealing (keys come from the key broker instead).
//
// Simulated (simulated.go, simulated_tdx.go) is a clearly labelled provider
// for machines without a TEE: it emits TDX quotes v4 (with signed
// collateral), SEV-SNP reports (Milan, Genoa or Turin) and Nitro documents
// in the vendors' exact binary formats, signed by test roots that verifiers
// accept only under a policy with "allow_simulated": true. A build with the
// `production` tag does not contain it.
package enclave
