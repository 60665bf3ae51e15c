package syncer

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Posting a run and publishing a plugin each cost a flat fee that is burned
// (moved to the issuer account, out of circulation), and each is limited
// per DID (see RATIONALE "core: posting and publishing cost a burned fee").
// A refused request pays nothing.
var (
	// DefaultPostingFee is burned at each accepted postTask (attoTNZO).
	DefaultPostingFee = big.NewInt(1_000_000_000)
	// DefaultPublishFee is burned at each accepted plugin publication.
	DefaultPublishFee = big.NewInt(1_000_000_000)
)

// Rate-limit defaults: per DID, at most RateBurst requests of one kind in
// any RateWindow.
const (
	DefaultRateBurst  = 10
	DefaultRateWindow = time.Minute
)

// FeeConfig sets the fees and rate limits; zero fields take the defaults.
type FeeConfig struct {
	PostingFee *big.Int
	PublishFee *big.Int
	RateBurst  int
	RateWindow time.Duration
}

func (f FeeConfig) posting() *big.Int { return orBig(f.PostingFee, DefaultPostingFee) }
func (f FeeConfig) publish() *big.Int { return orBig(f.PublishFee, DefaultPublishFee) }

func orBig(v, d *big.Int) *big.Int {
	if v == nil || v.Sign() < 0 {
		return d
	}
	return v
}

// rateLimiter admits at most burst events per key in any window. It is
// local admission control, not replicated state: a restart forgets it.
type rateLimiter struct {
	mu     sync.Mutex
	burst  int
	window time.Duration
	hits   map[string][]time.Time
}

func newRateLimiter(burst int, window time.Duration) *rateLimiter {
	if burst <= 0 {
		burst = DefaultRateBurst
	}
	if window <= 0 {
		window = DefaultRateWindow
	}
	return &rateLimiter{burst: burst, window: window, hits: map[string][]time.Time{}}
}

// allow records an event for key at now, or says how long until one is allowed.
func (l *rateLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.hits) > 100_000 { // drop keys whose events have all aged out
		for k, v := range l.hits {
			if len(v) == 0 || now.Sub(v[len(v)-1]) >= l.window {
				delete(l.hits, k)
			}
		}
	}
	h := l.hits[key]
	i := 0
	for i < len(h) && now.Sub(h[i]) >= l.window {
		i++
	}
	h = h[i:]
	if len(h) >= l.burst {
		l.hits[key] = h
		return false, h[0].Add(l.window).Sub(now)
	}
	l.hits[key] = append(h, now)
	return true, 0
}

func (n *Node) limit(l *rateLimiter, what, d string) error {
	if ok, wait := l.allow(d, n.now()); !ok {
		return Errf(KindConflict, "rate limited: %s made %d %s requests in the last %s; the next is allowed in %s",
			d, l.burst, what, l.window, wait.Round(time.Millisecond))
	}
	return nil
}

// needFunds refuses early, before any costly work, a DID whose balance
// cannot cover amount.
func (n *Node) needFunds(ctx context.Context, d string, amount *big.Int, what string) error {
	bal, err := newLedgerTx(ctx, n.kv).balance(acctDID(d))
	if err != nil {
		return err
	}
	if bal.Cmp(amount) < 0 {
		return Errf(KindFunds, "balance of %s is %s attoTNZO, needs %s for %s", d, bal, amount, what)
	}
	return nil
}

// PublishFee returns the fee burned per plugin publication.
func (n *Node) PublishFee() *big.Int { return new(big.Int).Set(n.cfg.Fees.publish()) }

// PostingFee returns the fee burned per posted run.
func (n *Node) PostingFee() *big.Int { return new(big.Int).Set(n.cfg.Fees.posting()) }

// GatePublish puts a plugin publication behind the publisher's rate limit
// and fee. The caller has checked the request's signature by d. A DID over
// its limit or without the fee is refused before publish runs (so before any
// module is compiled or probed); the fee is burned once publish succeeds.
func (n *Node) GatePublish(ctx context.Context, d string, publish func(context.Context) (*wire.PluginInfo, error)) (*wire.PluginInfo, error) {
	if _, err := did.Parse(d); err != nil {
		return nil, Errf(KindInvalid, "did: %v", err)
	}
	fee := n.cfg.Fees.publish()
	if err := n.needFunds(ctx, d, fee, "the plugin publication fee"); err != nil {
		return nil, err
	}
	if err := n.limit(n.publishLimit, "plugin publication", d); err != nil {
		return nil, err
	}
	info, err := publish(ctx)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	lt := newLedgerTx(ctx, n.kv)
	if err := lt.transfer(acctDID(d), acctIssuer, fee, "plugin publication fee (burned)"); err != nil {
		if KindOf(err) == KindFunds {
			// Spent elsewhere while the module was checked: it stays
			// registered (content-addressed), the publisher is told.
			return nil, Errf(KindFunds, "plugin %s was registered but its fee could not be charged: %v", info.Hash, err)
		}
		return nil, err
	}
	var b Batch
	if err := lt.flush(&b); err != nil {
		return nil, err
	}
	if err := n.kv.Commit(ctx, &b); err != nil {
		return nil, fmt.Errorf("charge publication fee: %w", err)
	}
	return info, nil
}
