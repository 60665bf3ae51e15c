// Package simroots holds the test roots of trust used by the simulated
// attestation provider (enclave.Simulated) and accepted by the verifiers only
// when a policy says "allow_simulated": true.
//
// Every certificate here is labelled SIMULATED in its subject. The keys are
// derived deterministically from public labels, so simulated evidence made in
// one process verifies in another: they are not secret and give no security.
//
// A build with the `production` tag compiles this package without the roots
// (Available reports false and every accessor returns ErrProduction), so a
// production binary can neither make nor accept simulated evidence.
package simroots
