// Package enclave is what runs inside a TEE: quote providers for TDX and
// SEV-SNP (Linux configfs-tsm, /sys/kernel/config/tsm/report), SEV-SNP
// without configfs-tsm (SEVGuestProvider: extended reports through the
// /dev/sev-guest ioctls, via go-sev-guest's client) and AWS Nitro (/dev/nsm
// via github.com/hf/nsm), chosen by Detect; key custody for the syncer's
// Ed25519 signing key (born inside, its public key bound in the evidence,
// never written in clear); and the Confidential tier's key broker and
// dataset sealing.
//
// Sealing keys: SEV-SNP derives them with MSG_KEY_REQ (SNPSealingKey, via
// go-sev-guest's client); TDX and Nitro have no local sealing primitive and
// return ErrNoLocalSealing (keys come from the key broker instead). Key
// custody is therefore sealed where a sealing key exists (the key survives
// restarts as an AES-256-GCM blob) and ephemeral elsewhere (the key lives in
// enclave memory only; a restart gives a new syncer DID); KeyCustody.Sealed
// says which.
//
// Simulated (simulated.go, simulated_tdx.go) is a clearly labelled provider
// for machines without a TEE: it emits TDX quotes v4 (with signed
// collateral), SEV-SNP reports (Milan, Genoa or Turin) and Nitro documents
// in the vendors' exact binary formats, signed by test roots that verifiers
// accept only under a policy with "allow_simulated": true. A build with the
// `production` tag does not contain it.
package enclave
