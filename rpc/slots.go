package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Large-request slots are what a slow or hostile client would hold to starve
// honest submissions (issue 8, finding 5: two bodies declared at 100 MB and
// sent at 1 byte/s held both slots for the 10-minute read timeout). Three
// rules bound that:
//
//   - a minimum transfer rate: once a large body has had LargeGrace, it must
//     have delivered at least LargeMinRate bytes per second since it got its
//     slot, or the read fails and the connection is closed (HTTP 408);
//   - a per-peer cap: one remote IP holds at most MaxLargePerPeer slots; its
//     further large requests queue behind its own (they are not refused, so
//     trainers behind one address still get through, one at a time);
//   - bodies without a Content-Length (chunked) are capped at
//     MaxChunkedBytes and refused as soon as they cross it, instead of being
//     buffered up to MaxRequestBytes.

// Defaults for the rules above.
const (
	// DefaultLargeMinRate is the slowest accepted large body, in bytes/s
	// (a 46 MB submission then has about 3 minutes).
	DefaultLargeMinRate = 256 << 10
	// DefaultLargeGrace is how long a large body may deliver nothing at all.
	DefaultLargeGrace = 10 * time.Second
	// DefaultMaxChunkedBytes bounds a body sent without Content-Length.
	DefaultMaxChunkedBytes = 4 << 20
)

// peerSlots limits the large requests of one remote IP.
type peerSlots struct {
	mu    sync.Mutex
	peers map[string]*peerSlot
}

type peerSlot struct {
	sem  *semaphore.Weighted
	refs int
}

// acquire takes one of ip's n slots, waiting until ctx ends.
func (p *peerSlots) acquire(ctx context.Context, ip string, n int) (release func(), err error) {
	p.mu.Lock()
	if p.peers == nil {
		p.peers = map[string]*peerSlot{}
	}
	ps := p.peers[ip]
	if ps == nil {
		ps = &peerSlot{sem: semaphore.NewWeighted(int64(n))}
		p.peers[ip] = ps
	}
	ps.refs++
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		if ps.refs--; ps.refs == 0 {
			delete(p.peers, ip)
		}
		p.mu.Unlock()
	}
	if err := ps.sem.Acquire(ctx, 1); err != nil {
		done()
		return nil, err
	}
	return func() { ps.sem.Release(1); done() }, nil
}

// peerIP is the remote IP of a request (the whole RemoteAddr when it has no port).
func peerIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// acquireLarge takes the peer's slot and then a global one, waiting up to
// LargeWait in all. It writes the refusal itself when it fails.
func (s *Server) acquireLarge(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.LargeWait)
	defer cancel()
	ip := peerIP(r)
	relPeer, err := s.peerSlots.acquire(ctx, ip, s.opts.MaxLargePerPeer)
	if err != nil {
		writeRaw(w, http.StatusServiceUnavailable, rawError(nil, newError(CodeBusy, nil,
			"server busy: %s already has %d large request(s) in flight (per-peer limit) and none finished within %s; retry later",
			ip, s.opts.MaxLargePerPeer, s.opts.LargeWait)))
		return nil, false
	}
	if !s.large.TryAcquire(1) {
		if err := s.large.Acquire(ctx, 1); err != nil {
			relPeer()
			writeRaw(w, http.StatusServiceUnavailable, rawError(nil, newError(CodeBusy, nil,
				"server busy: %d large requests in flight and no slot freed within %s; retry later", s.opts.MaxLargeInFlight, s.opts.LargeWait)))
			return nil, false
		}
	}
	s.largeInFlight.Add(1)
	return func() { s.largeInFlight.Add(-1); s.large.Release(1); relPeer() }, true
}

// LargeInFlight is the number of large-request slots taken now.
func (s *Server) LargeInFlight() int { return int(s.largeInFlight.Load()) }

// errTooSlow is returned when a large body falls under the minimum rate.
var errTooSlow = errors.New("request body too slow")

// rateReader enforces the minimum transfer rate through the connection's
// read deadline: having read n bytes, the next byte must arrive before
// start + grace + n/minRate. A client that keeps the rate never sees it.
//
// Read may run in another goroutine than disarm and count (a blob upload
// reads ahead of its writer): the counters are atomic.
type rateReader struct {
	r       io.Reader
	rc      *http.ResponseController
	start   time.Time
	grace   time.Duration
	minRate int64
	n       atomic.Int64
	armed   atomic.Bool
}

func (rr *rateReader) deadline() time.Time {
	return rr.start.Add(rr.grace + time.Duration(float64(rr.n.Load())/float64(rr.minRate)*float64(time.Second)))
}

func (rr *rateReader) Read(p []byte) (int, error) {
	if err := rr.rc.SetReadDeadline(rr.deadline()); err == nil {
		rr.armed.Store(true)
	}
	n, err := rr.r.Read(p)
	total := rr.n.Add(int64(n))
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, fmt.Errorf("%w: %d bytes in %s, below the minimum of %d bytes/s after a %s grace",
			errTooSlow, total, time.Since(rr.start).Round(time.Millisecond), rr.minRate, rr.grace)
	}
	return n, err
}

// count is the number of body bytes read so far.
func (rr *rateReader) count() int64 { return rr.n.Load() }

// disarm clears the deadline once the body is read: a deadline left on the
// connection would fail the server's background read and cancel the
// handler's context in the middle of its work.
func (rr *rateReader) disarm() {
	if rr.armed.Load() {
		_ = rr.rc.SetReadDeadline(time.Time{})
	}
}

// readLimited reads a body of unknown length, refusing it with an
// *http.MaxBytesError as soon as it passes limit; the buffer grows with what
// actually arrived.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	buf := make([]byte, 0, 64<<10)
	for {
		if int64(len(buf)) > limit {
			return nil, &http.MaxBytesError{Limit: limit}
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		want := cap(buf) - len(buf)
		if rem := limit + 1 - int64(len(buf)); int64(want) > rem {
			want = int(rem)
		}
		n, err := r.Read(buf[len(buf) : len(buf)+want])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) > limit {
				return nil, &http.MaxBytesError{Limit: limit}
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
