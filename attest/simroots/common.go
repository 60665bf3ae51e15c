package simroots

import (
	"crypto/x509"
	"errors"
)

// ErrProduction is returned by every accessor in a production build.
var ErrProduction = errors.New("simulated test roots are not compiled into a production build")

// Label is the marker every simulated certificate made here carries in its
// subject's organization, so a verifier can say "this is simulated evidence"
// when it refuses it.
const Label = "SIMULATED Tenzro test root - not a TEE"

// IsSimulated reports whether a certificate carries the simulated label.
func IsSimulated(c *x509.Certificate) bool {
	if c == nil {
		return false
	}
	for _, o := range append(append([]string{}, c.Subject.Organization...), c.Issuer.Organization...) {
		if o == Label {
			return true
		}
	}
	return false
}
