package dataset

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Who may do what with a node's datasets (docs/protocol/datasets.md
// §Requests, RATIONALE "Who may remove a dataset"): imports and removes are
// signed (wire.DatasetRequest, the blob intent's scheme), a fetch may be.
// A signed import or fetch pins the dataset for its DID, within that DID's
// quota; a remove drops only the signer's own pin, and the dataset goes
// when no DID pins it any more.

// MaxRequestLifetime bounds how far ahead a request's expiry may lie: a
// captured request is void after at most this long, and within it the
// node refuses a second use of the same signature.
const MaxRequestLifetime = 15 * time.Minute

// maxSeen bounds the signatures remembered against replay.
const maxSeen = 1 << 16

// authorize checks r's Tenzro-Dataset-Request for op on c and returns the
// signer's DID. required: a request without the header is refused (else
// it is anonymous, "").
func (s *Service) authorize(r *http.Request, op string, c cid.Cid, required bool) (string, error) {
	hv := r.Header.Values(wire.DatasetRequestHeader)
	if len(hv) == 0 && !required {
		return "", nil
	}
	if len(hv) != 1 {
		return "", fmt.Errorf("%s needs exactly one %s header, a request signed by the DID that makes it (tenzro dataset signs with --key); got %d: %w",
			op, wire.DatasetRequestHeader, len(hv), ErrUnsigned)
	}
	in, err := wire.ParseDatasetRequest(hv[0])
	if err != nil {
		return "", fmt.Errorf("%v: %w", err, ErrUnsigned)
	}
	if in.Op != op {
		return "", fmt.Errorf("the request is signed for %q, not %q: %w", in.Op, op, ErrUnsigned)
	}
	if c.Defined() {
		hc, err := cid.Decode(in.CID)
		if err != nil || !hc.Equals(c) {
			return "", fmt.Errorf("the request is signed for dataset %s, not %s: %w", trunc(in.CID), c, ErrUnsigned)
		}
	}
	now := time.Now()
	switch exp := time.Unix(int64(min(in.Expires, 1<<62)), 0); {
	case !exp.After(now):
		return "", fmt.Errorf("the request expired at %s (now %s): %w", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), ErrUnsigned)
	case exp.After(now.Add(MaxRequestLifetime)):
		return "", fmt.Errorf("the request expires at %s, more than %s from now: %w", exp.UTC().Format(time.RFC3339), MaxRequestLifetime, ErrUnsigned)
	}
	if s.o.ChainID == nil {
		return "", fmt.Errorf("this node takes no signed dataset requests (no chain id): %w", ErrUnsigned)
	}
	chain, err := s.o.ChainID(r.Context())
	if err != nil {
		return "", fmt.Errorf("chain id: %w", err)
	}
	if err := did.Verify(in.DID, in.Preimage(chain), in.Sig); err != nil {
		return "", fmt.Errorf("the signature does not verify for %s over %s %s on chain %q: %v: %w", in.DID, op, in.CID, chain, err, ErrUnsigned)
	}
	if err := s.useOnce(in.DID+" "+strconv.FormatUint(in.Nonce, 10), int64(in.Expires), now); err != nil {
		return "", err
	}
	return in.DID, nil
}

// useOnce records a request's (did, nonce) until it expires and refuses a
// second use.
func (s *Service) useOnce(key string, expires int64, now time.Time) error {
	s.quotaMu.Lock()
	defer s.quotaMu.Unlock()
	if _, ok := s.seen[key]; ok {
		return fmt.Errorf("this signed request (its DID and nonce) was used already; sign a new one, with a fresh random nonce, for each request: %w", ErrUnsigned)
	}
	if len(s.seen) >= maxSeen {
		for k, exp := range s.seen {
			if exp < now.Unix() {
				delete(s.seen, k)
			}
		}
		if len(s.seen) >= maxSeen {
			return fmt.Errorf("more than %d signed dataset requests in %s; try again shortly: %w", maxSeen, MaxRequestLifetime, ErrQuota)
		}
	}
	s.seen[key] = expires
	return nil
}

// SignRequest makes the header value of a request by k for op on c,
// valid for lifetime, with a random nonce.
func SignRequest(k *did.Key, chainID, op string, c cid.Cid, lifetime time.Duration) string {
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	return SignRequestAt(k, chainID, op, c, uint64(time.Now().Add(lifetime).Unix()), binary.BigEndian.Uint64(nb[:]))
}

// SignRequestAt is SignRequest with the expiry (Unix seconds) and nonce
// given: the bytes the cross-language vector (wire/testdata/vectors.json
// "dataset_requests") pins for Go and the trainer alike.
func SignRequestAt(k *did.Key, chainID, op string, c cid.Cid, expires, nonce uint64) string {
	in := wire.DatasetRequest{DID: k.DID.String(), Op: op, CID: c.String(), Expires: expires, Nonce: nonce}
	in.Sig = k.Sign(in.Preimage(chainID))
	return in.String()
}

// held reports what owner pins now: datasets and bytes of blocks.
func (s *Service) pinnedBy(ctx context.Context, owner string) (n int, bytes int64, err error) {
	l, err := s.List(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range l {
		if slices.Contains(r.Owners, owner) {
			n++
			bytes += r.DAGBytes
		}
	}
	return n, bytes, nil
}

// charge is one transfer's claim on its owner's quota.
type charge struct {
	s       *Service
	owner   string
	pinned  int64 // bytes the owner pinned when the transfer started
	charged int64
	// limit is the owner's byte bound: QuotaBytes, or less when its
	// balance funds less (Options.Funds); basis says why.
	limit int64
	basis string
}

// reserve starts a transfer for owner: refused when its pins (and its
// transfers in flight) are at the count quota, or when its balance funds
// no more bytes than it pins (Options.Funds).
func (s *Service) reserve(ctx context.Context, owner string) (*charge, error) {
	n, bytes, err := s.pinnedBy(ctx, owner)
	if err != nil {
		return nil, err
	}
	limit, basis := s.o.QuotaBytes, "at most per DID, node flag --dataset-did-bytes"
	if s.o.Funds != nil {
		funded, why, err := s.o.Funds(ctx, owner)
		if err != nil {
			return nil, fmt.Errorf("dataset quota of %s: %w", owner, err)
		}
		if funded < limit {
			limit, basis = max(funded, 0), why+", node flag --blob-price per byte"
		}
		if limit <= bytes {
			return nil, fmt.Errorf("%s pins %d bytes of datasets and its balance funds %d (%s): a pin needs balance, as an unreferenced blob upload does; fund the DID (tenzro ledger transfer) or sign with a funded key: %w",
				owner, bytes, limit, basis, ErrFunds)
		}
	}
	s.quotaMu.Lock()
	defer s.quotaMu.Unlock()
	if n+s.imports[owner] >= s.o.QuotaCount {
		return nil, fmt.Errorf("%s pins %d datasets and has %d transfers in flight; the per-DID limit is %d datasets (node flag --dataset-did-count); remove one first (tenzro dataset rm): %w",
			owner, n, s.imports[owner], s.o.QuotaCount, ErrQuota)
	}
	s.imports[owner]++
	return &charge{s: s, owner: owner, pinned: bytes, limit: limit, basis: basis}, nil
}

// room is how many more bytes the owner may take now.
func (q *charge) room() int64 {
	q.s.quotaMu.Lock()
	defer q.s.quotaMu.Unlock()
	return max(q.limit-q.pinned-q.s.inflight[q.owner], 0)
}

// add counts n more bytes, refused past the owner's byte quota. A nil
// charge (an anonymous transfer) counts nothing.
func (q *charge) add(n int64) error {
	if q == nil {
		return nil
	}
	q.s.quotaMu.Lock()
	defer q.s.quotaMu.Unlock()
	if used := q.pinned + q.s.inflight[q.owner]; used+n > q.limit {
		if q.limit < q.s.o.QuotaBytes {
			return fmt.Errorf("%s pins %d bytes of datasets and has %d in flight; %d more would pass the %d bytes its balance funds (%s): %w",
				q.owner, q.pinned, q.s.inflight[q.owner], n, q.limit, q.basis, ErrFunds)
		}
		return fmt.Errorf("%s pins %d bytes of datasets and has %d in flight; %d more would pass the per-DID limit of %d bytes (node flag --dataset-did-bytes): %w",
			q.owner, q.pinned, q.s.inflight[q.owner], n, q.limit, ErrQuota)
	}
	q.s.inflight[q.owner] += n
	q.charged += n
	return nil
}

// done ends the transfer (its bytes are pinned, or dropped, by now).
func (q *charge) done() {
	q.s.quotaMu.Lock()
	defer q.s.quotaMu.Unlock()
	if q.s.inflight[q.owner] -= q.charged; q.s.inflight[q.owner] <= 0 {
		delete(q.s.inflight, q.owner)
	}
	if q.s.imports[q.owner]--; q.s.imports[q.owner] <= 0 {
		delete(q.s.imports, q.owner)
	}
}

func addOwner(owners []string, d string) []string {
	if d == "" || slices.Contains(owners, d) {
		return owners
	}
	out := append(slices.Clone(owners), d)
	slices.Sort(out)
	return out
}
