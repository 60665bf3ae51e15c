package nitro

import (
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/hf/nitrite"
)

// MaxDocument bounds an attestation document.
const MaxDocument = 32 << 10

type coseSign1 struct {
	_           struct{} `cbor:",toarray"`
	Protected   []byte
	Unprotected cbor.RawMessage
	Payload     []byte
	Signature   []byte
}

// Evidence is a parsed, not yet verified, attestation document.
type Evidence struct {
	Raw      []byte
	Doc      nitrite.Document
	Leaf     *x509.Certificate
	Bundle   []*x509.Certificate
	IssuedAt time.Time

	// cose is the decoded COSE_Sign1 (nil when the Evidence was not made
	// by Parse: Verify then decodes Raw).
	cose *coseSign1
}

// Parse decodes a COSE_Sign1 attestation document without verifying it.
func Parse(raw []byte) (*Evidence, error) {
	return (*Cache)(nil).Parse(raw)
}

// Parse is Parse with the certificates parsed through the cache.
func (pc *Cache) Parse(raw []byte) (ev *Evidence, err error) {
	if len(raw) == 0 || len(raw) > MaxDocument {
		return nil, fmt.Errorf("nitro document is %d bytes, want 1..%d", len(raw), MaxDocument)
	}
	defer func() { // the CBOR decoder is old; never let a malformed input crash the node
		if r := recover(); r != nil {
			ev, err = nil, fmt.Errorf("nitro document: malformed CBOR (%v)", r)
		}
	}()
	var c coseSign1
	direct := true // decoded from raw as nitrite decodes it
	// AWS emits an untagged COSE_Sign1; tag 18 is accepted too.
	if err := cbor.Unmarshal(raw, &c); err != nil {
		direct = false
		var tagged cbor.Tag
		if err2 := cbor.Unmarshal(raw, &tagged); err2 != nil || tagged.Number != 18 {
			return nil, fmt.Errorf("nitro document: not a COSE_Sign1: %w", err)
		}
		b, _ := cbor.Marshal(tagged.Content)
		if err := cbor.Unmarshal(b, &c); err != nil {
			return nil, fmt.Errorf("nitro document: not a COSE_Sign1: %w", err)
		}
	}
	if len(c.Payload) == 0 || len(c.Signature) == 0 || len(c.Protected) == 0 {
		return nil, errors.New("nitro document: empty protected header, payload or signature")
	}
	ev = &Evidence{Raw: append([]byte(nil), raw...)}
	if direct {
		ev.cose = &c
	}
	if err := cbor.Unmarshal(c.Payload, &ev.Doc); err != nil {
		return nil, fmt.Errorf("nitro document payload: %w", err)
	}
	if len(ev.Doc.Certificate) == 0 {
		return nil, errors.New("nitro document: no certificate")
	}
	if ev.Leaf, err = pc.parseCert(ev.Doc.Certificate); err != nil {
		return nil, fmt.Errorf("nitro document certificate: %w", err)
	}
	if len(ev.Doc.CABundle) > 8 {
		return nil, fmt.Errorf("nitro document: cabundle has %d entries, limit 8", len(ev.Doc.CABundle))
	}
	for i, der := range ev.Doc.CABundle {
		c, err := pc.parseCert(der)
		if err != nil {
			return nil, fmt.Errorf("nitro document cabundle[%d]: %w", i, err)
		}
		ev.Bundle = append(ev.Bundle, c)
	}
	if ev.Doc.Timestamp > 1<<62 {
		return nil, fmt.Errorf("nitro document: timestamp %d out of range", ev.Doc.Timestamp)
	}
	ev.IssuedAt = time.UnixMilli(int64(ev.Doc.Timestamp)).UTC()
	return ev, nil
}

// Claims are what the document says.
type Claims struct {
	ModuleID  string            `json:"module_id"`
	Timestamp string            `json:"timestamp"`
	Digest    string            `json:"digest"`
	PCRs      map[string]string `json:"pcrs"`
	Debug     bool              `json:"debug"`
	UserData  string            `json:"user_data,omitempty"`
	Nonce     string            `json:"nonce,omitempty"`
	PublicKey string            `json:"public_key,omitempty"`
}

// Claims extracts the claims of the document. Long fields are hex-encoded
// in full.
func (e *Evidence) Claims() Claims {
	c := Claims{ModuleID: e.Doc.ModuleID, Timestamp: e.IssuedAt.Format(time.RFC3339Nano), Digest: e.Doc.Digest, PCRs: map[string]string{},
		UserData: hex.EncodeToString(e.Doc.UserData), Nonce: hex.EncodeToString(e.Doc.Nonce), PublicKey: hex.EncodeToString(e.Doc.PublicKey)}
	idx := make([]int, 0, len(e.Doc.PCRs))
	for k := range e.Doc.PCRs {
		idx = append(idx, int(k))
	}
	sort.Ints(idx)
	for _, k := range idx {
		c.PCRs[fmt.Sprintf("pcr%d", k)] = hex.EncodeToString(e.Doc.PCRs[uint(k)])
	}
	c.Debug = allZero(e.Doc.PCRs[0])
	return c
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
