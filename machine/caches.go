package machine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/tenzro/train/wire"
)

// Memo caches of pure functions on the transaction path (issue 24 item 5:
// a node checks each transaction's signatures at CheckTx, again at every
// mempool recheck and again when its block executes, and parsed a run's
// spec for every record). Each maps its exact input to the result that
// input always gives, so a hit answers what the computation would have:
// no consensus result depends on whether an entry is there. Each is
// bounded: when full it starts over.

const (
	maxSigCache  = 1 << 15
	maxSpecCache = 256
)

var sigCache = struct {
	sync.Mutex
	ok map[[32]byte]struct{}
}{ok: map[[32]byte]struct{}{}}

// sigKey identifies one (signer, message, signature) triple.
func sigKey(signer string, pre, sig []byte) [32]byte {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(signer), pre, sig} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// verifiedBefore says whether this exact triple verified before.
func verifiedBefore(k [32]byte) bool {
	sigCache.Lock()
	defer sigCache.Unlock()
	_, ok := sigCache.ok[k]
	return ok
}

// noteVerified remembers a triple that verified.
func noteVerified(k [32]byte) {
	sigCache.Lock()
	defer sigCache.Unlock()
	if len(sigCache.ok) >= maxSigCache {
		sigCache.ok = map[[32]byte]struct{}{}
	}
	sigCache.ok[k] = struct{}{}
}

var specCache = struct {
	sync.Mutex
	m map[string]*wire.TaskSpec
}{m: map[string]*wire.TaskSpec{}}

// parseRunSpec is wire.ParseSpec of a run's stored (canonical) spec,
// memoised by its bytes; each caller gets its own copy of the struct.
func parseRunSpec(raw []byte) (*wire.TaskSpec, error) {
	specCache.Lock()
	s, ok := specCache.m[string(raw)]
	specCache.Unlock()
	if !ok {
		var err error
		if s, _, err = wire.ParseSpec(raw); err != nil {
			return nil, err
		}
		specCache.Lock()
		if len(specCache.m) >= maxSpecCache {
			specCache.m = map[string]*wire.TaskSpec{}
		}
		specCache.m[string(raw)] = s
		specCache.Unlock()
	}
	cp := *s
	return &cp, nil
}

var paramsCache = struct {
	sync.Mutex
	raw []byte
	ok  bool
	p   Params
}{}

// decodeParams is the chain's parameters from their stored bytes (nil:
// none stored) over DefaultParams, memoised for the last bytes seen; each
// caller gets its own copy (the fee map is shared and only read).
func decodeParams(raw []byte) (*Params, error) {
	paramsCache.Lock()
	defer paramsCache.Unlock()
	if paramsCache.ok && string(paramsCache.raw) == string(raw) && (raw == nil) == (paramsCache.raw == nil) {
		p := paramsCache.p
		return &p, nil
	}
	p := DefaultParams()
	if raw != nil {
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, err
		}
	}
	paramsCache.raw, paramsCache.ok, paramsCache.p = append([]byte(nil), raw...), true, p
	if raw == nil {
		paramsCache.raw = nil
	}
	cp := p
	return &cp, nil
}
