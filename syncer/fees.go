package syncer

import (
	"context"
	"math/big"
	"sync"
	"time"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// Rate-limit defaults: per DID, at most RateBurst requests of one kind in
// any RateWindow.
const (
	DefaultRateBurst  = 10
	DefaultRateWindow = time.Minute
)

// FeeConfig sets the per-DID rate limits; zero fields take the defaults.
// The fees themselves are chain parameters (Genesis.Params).
type FeeConfig struct {
	RateBurst  int
	RateWindow time.Duration
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
		return machine.Errf(machine.KindConflict, "rate limited: %s made %d %s requests in the last %s; the next is allowed in %s",
			d, l.burst, what, l.window, wait.Round(time.Millisecond))
	}
	return nil
}

// needFunds refuses early, before any costly work, a DID whose committed
// balance cannot cover amount (the chain refuses it too; this saves the
// work and the round trip).
func (n *Node) needFunds(ctx context.Context, d string, amount *big.Int, what string) error {
	var bal *big.Int
	err := n.view(ctx, func(v machine.View) error {
		var err error
		bal, err = machine.AccountBalance(ctx, v.KV, machine.AcctDID(d))
		return err
	})
	if err != nil {
		return err
	}
	if bal.Cmp(amount) < 0 {
		return machine.Errf(machine.KindFunds, "balance of %s is %s attoTNZO, needs %s for %s", d, bal, amount, what)
	}
	return nil
}

// fee is the chain's current fee for which ("posting" or "publish"), read
// from the committed state by the machine's own lookup.
func (n *Node) fee(ctx context.Context, which string) (*big.Int, error) {
	var out *big.Int
	err := n.view(ctx, func(v machine.View) error {
		var err error
		out, err = machine.Fee(ctx, v.KV, which)
		return err
	})
	return out, err
}

// PublishFee returns the fee the chain burns per plugin publication.
func (n *Node) PublishFee(ctx context.Context) (*big.Int, error) { return n.fee(ctx, "publish") }

// PostingFee returns the fee the chain burns per posted run.
func (n *Node) PostingFee(ctx context.Context) (*big.Int, error) { return n.fee(ctx, "posting") }

// GatePublish puts a plugin publication behind the publisher's rate limit
// and fee, then records it on chain. The caller has checked the request's
// signature. A DID over its limit or without the fee is refused before
// publish runs (so before any module is compiled or probed); the chain
// burns the fee when it records the publication.
func (n *Node) GatePublish(ctx context.Context, p *wire.PublishPluginParams, publish func(context.Context) (*wire.PluginInfo, error)) (*wire.PluginInfo, error) {
	if _, err := did.Parse(p.DID); err != nil {
		return nil, machine.Errf(machine.KindInvalid, "did: %v", err)
	}
	fee, err := n.fee(ctx, "publish")
	if err != nil {
		return nil, err
	}
	if err := n.needFunds(ctx, p.DID, fee, "the plugin publication fee"); err != nil {
		return nil, err
	}
	if err := n.limit(n.publishLimit, "plugin publication", p.DID); err != nil {
		return nil, err
	}
	info, err := publish(ctx)
	if err != nil {
		return nil, err
	}
	tx := wire.PublishPluginTx{DID: p.DID, Hash: info.Hash, Size: uint64(len(p.Module)), Signed: p.Signed}
	if _, err := n.broadcast(ctx, wire.TxPublishPlugin, tx, nil); err != nil {
		if machine.KindOf(err) == machine.KindFunds {
			// Spent elsewhere while the module was checked: it stays
			// registered here (content-addressed), the publisher is told.
			return nil, machine.Errf(machine.KindFunds, "plugin %s was registered but its fee could not be charged: %v", info.Hash, err)
		}
		return nil, err
	}
	return info, nil
}
