package gossip

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"

	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// A trainer's light-client node and a syncer's node cooperate like this:
// the trainer's node hands each OuterGradient to a Forwarder, which keeps
// the payload for serving and announces it on TopicTraining; the syncer's
// node runs a Receiver, which on each announcement fetches the payload from
// the announcing peer and calls the node's submit path.

// Forwarder announces locally submitted outer gradients.
type Forwarder struct{ n *Node }

// NewForwarder returns a Forwarder publishing through n.
func NewForwarder(n *Node) *Forwarder { return &Forwarder{n: n} }

// Forward checks g (payload hash, size), keeps its payload for serving
// over BlobProtocol and publishes its announcement. The payload is g's
// inline bytes, or, when g has none, the blob PayloadHash already in the
// node's blob store (uploaded with PUT /blobs). With a blob store inline
// bytes are stored there; without one they go to the memory cache. It
// returns the announcement published.
func (f *Forwarder) Forward(ctx context.Context, g *wire.OuterGradient) (SubmissionAnnouncement, error) {
	if len(g.Attestation) > MaxAttestation {
		return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: attestation of %d bytes, limit %d", len(g.Attestation), MaxAttestation)
	}
	size := int64(len(g.GradientPayload))
	if size == 0 {
		if f.n.blobs == nil {
			return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: no payload, and no blob store to hold one by reference: %w", ErrNoBlobStore)
		}
		sz, err := f.n.blobs.Size(ctx, g.PayloadHash)
		if err != nil {
			return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: payload %s: %w", g.PayloadHash, err)
		}
		size = sz
	} else if got, ok := g.CheckPayloadHash(); !ok {
		return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: payload_hash mismatch: payload hashes to %s, request says %s", got, g.PayloadHash)
	}
	if size == 0 || size > f.n.maxBlob {
		return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: payload of %d bytes, want 1..%d", size, f.n.maxBlob)
	}
	a := AnnouncementFor(g)
	a.PayloadSize = size
	if err := a.Verify(f.n.maxBlob); err != nil {
		return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: %w", err)
	}
	if len(g.GradientPayload) > 0 {
		if err := f.n.keep(ctx, g.PayloadHash, g.GradientPayload); err != nil {
			return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: %w", err)
		}
	}
	if len(g.Attestation) > 0 {
		// The evidence travels like the payload: by hash, over BlobProtocol.
		if err := f.n.keep(ctx, a.AttestationHash, []byte(g.Attestation)); err != nil {
			return SubmissionAnnouncement{}, fmt.Errorf("gossip: forward: attestation: %w", err)
		}
	}
	if err := f.n.PublishSubmission(ctx, a); err != nil {
		return SubmissionAnnouncement{}, err
	}
	return a, nil
}

// keep holds b (whose hash h the caller checked) for serving: in the blob
// store, else in the memory cache.
func (n *Node) keep(ctx context.Context, h wire.Hash, b []byte) error {
	if n.blobs != nil {
		return n.blobs.Put(ctx, h, b)
	}
	return n.cache.put(h, bytes.Clone(b))
}

// SubmitFunc is the syncer node's submit path, e.g. the service's
// submitOuterGradient. On a node with a blob store the gradient comes by
// reference (no GradientPayload: the payload is in the store under
// PayloadHash); without one it carries the payload inline. Its errors (duplicate, wrong round, …) are logged and
// counted; they do not stop the Receiver.
type SubmitFunc func(ctx context.Context, g *wire.OuterGradient) error

// ReceiverOptions tune a Receiver. The zero value is usable.
type ReceiverOptions struct {
	// Filter, when set, selects the announcements to act on (e.g. runs this
	// node is the syncer of). Others are skipped without fetching.
	Filter func(SubmissionAnnouncement) bool
	// Concurrency bounds fetch+submit in flight (default 4).
	Concurrency int
	// Timeout bounds one fetch+submit (default 2 minutes).
	Timeout time.Duration
}

// Receiver turns announcements into submissions. It has its own
// subscription to TopicTraining, so it sees only validated messages.
type Receiver struct {
	n      *Node
	submit SubmitFunc
	opts   ReceiverOptions
	sub    *pubsub.Subscription
	sem    chan struct{}
	wg     sync.WaitGroup
	log    *slog.Logger

	mu   sync.Mutex
	seen map[receiverKey]bool
}

type receiverKey struct {
	task, trainer   string
	round, fragment uint64
	hash            wire.Hash
}

// maxSeen bounds the Receiver's memory of handled announcements; it is
// reset when full (the submit path rejects duplicates anyway).
const maxSeen = 1 << 16

// NewReceiver starts a Receiver on n that calls submit for each announced
// submission whose payload it could fetch and check. Close stops it.
func (n *Node) NewReceiver(submit SubmitFunc, opts ReceiverOptions) (*Receiver, error) {
	if submit == nil {
		return nil, errors.New("gossip: receiver needs a submit function")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Timeout <= 0 {
		opts.Timeout = blobTimeout
	}
	sub, err := n.topics[TopicTraining].Subscribe()
	if err != nil {
		return nil, fmt.Errorf("gossip: receiver: subscribe: %w", err)
	}
	r := &Receiver{n: n, submit: submit, opts: opts, sub: sub, sem: make(chan struct{}, opts.Concurrency),
		log: n.log.With("part", "receiver"), seen: map[receiverKey]bool{}}
	r.wg.Add(1)
	go r.loop()
	return r, nil
}

// Close stops the Receiver and waits for work in flight.
func (r *Receiver) Close() {
	r.sub.Cancel()
	r.wg.Wait()
}

func (r *Receiver) loop() {
	defer r.wg.Done()
	for {
		m, err := r.sub.Next(r.n.ctx)
		if err != nil {
			return
		}
		a, ok := m.ValidatorData.(*SubmissionAnnouncement)
		if !ok || m.GetFrom() == r.n.h.ID() {
			continue
		}
		if r.opts.Filter != nil && !r.opts.Filter(*a) {
			continue
		}
		k := receiverKey{a.TaskID, a.TrainerDID, a.Round, a.FragmentIndex, a.PayloadHash}
		r.mu.Lock()
		dup := r.seen[k]
		if len(r.seen) >= maxSeen {
			clear(r.seen)
		}
		r.seen[k] = true
		r.mu.Unlock()
		if dup {
			continue
		}
		select {
		case r.sem <- struct{}{}:
		case <-r.n.ctx.Done():
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.sem }()
			r.handle(*a, m.GetFrom().String(), m.ReceivedFrom.String())
		}()
	}
}

// forget lets a later announcement of a failed fetch be tried again.
func (r *Receiver) forget(a SubmissionAnnouncement) {
	r.mu.Lock()
	delete(r.seen, receiverKey{a.TaskID, a.TrainerDID, a.Round, a.FragmentIndex, a.PayloadHash})
	r.mu.Unlock()
}

func (r *Receiver) handle(a SubmissionAnnouncement, from, via string) {
	ctx, cancel := context.WithTimeout(r.n.ctx, r.opts.Timeout)
	defer cancel()
	// Re-check the signature before fetching anything (the validator checked
	// it against the announcement; the hash ties it to the payload).
	if err := did.Verify(a.TrainerDID, a.Preimage(), a.Signature); err != nil {
		r.n.c.receiverSubmitFails.Add(1)
		return
	}
	peers := []string{from}
	if via != from {
		// The publisher may be unreachable from here; the peer that
		// forwarded the announcement may have fetched it.
		peers = append(peers, via)
	}
	g := &wire.OuterGradient{
		TaskID: a.TaskID, TrainerDID: a.TrainerDID, Round: a.Round, FragmentIndex: a.FragmentIndex,
		PayloadHash: a.PayloadHash, ChainID: a.ChainID, Signature: a.Signature, Metrics: a.Metrics,
	}
	limit := min(a.PayloadSize, r.n.maxBlob)
	var err error
	if r.n.blobs != nil {
		// Into the blob store as it arrives, resuming across broken
		// streams; the submission then refers to it by hash, and the
		// stored blob is served on to peers that cannot reach the publisher.
		var size int64
		size, err = r.n.FetchBlobTo(ctx, a.PayloadHash, limit, peers...)
		if err == nil && size != a.PayloadSize {
			err = fmt.Errorf("payload %s is %d bytes, announced %d", a.PayloadHash, size, a.PayloadSize)
		}
	} else {
		var payload []byte
		for _, p := range peers {
			if payload, err = r.n.fetchBlob(ctx, p, a.PayloadHash, limit, a.PayloadSize); err == nil {
				break
			}
		}
		if err == nil {
			_ = r.n.cache.put(a.PayloadHash, payload)
			g.GradientPayload = payload
			g.MarkPayloadHashed() // fetchBlob checked it: the submit path does not hash it again
		}
	}
	if err != nil {
		r.forget(a)
		r.n.c.receiverSubmitFails.Add(1)
		r.log.Warn("announced payload unavailable", "task", a.TaskID, "trainer", a.TrainerDID, "round", a.Round,
			"fragment", a.FragmentIndex, "err", err)
		return
	}
	if !a.AttestationHash.IsZero() {
		var att []byte
		for _, p := range peers {
			if att, err = r.n.fetchBlob(ctx, p, a.AttestationHash, MaxAttestation, a.AttestationSize); err == nil {
				break
			}
		}
		if err != nil {
			r.forget(a)
			r.n.c.receiverSubmitFails.Add(1)
			r.log.Warn("announced attestation unavailable", "task", a.TaskID, "trainer", a.TrainerDID, "round", a.Round, "err", err)
			return
		}
		_ = r.n.keep(ctx, a.AttestationHash, att)
		g.Attestation = att
	}
	if err := r.submit(ctx, g); err != nil {
		r.n.c.receiverSubmitFails.Add(1)
		r.log.Info("forwarded submission refused", "task", a.TaskID, "trainer", a.TrainerDID, "round", a.Round,
			"fragment", a.FragmentIndex, "err", err)
		return
	}
	r.n.c.receiverSubmitted.Add(1)
	r.log.Debug("forwarded submission accepted", "task", a.TaskID, "trainer", a.TrainerDID, "round", a.Round, "fragment", a.FragmentIndex)
}
