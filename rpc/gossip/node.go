package gossip

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/libp2p/go-libp2p/core/metrics"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/tenzro/train/wire"
)

// DefaultListenAddr is used when Config.ListenAddrs is empty.
const DefaultListenAddr = "/ip4/127.0.0.1/tcp/0"

// Config configures a gossip node.
type Config struct {
	// ListenAddrs are multiaddrs to listen on (default DefaultListenAddr).
	ListenAddrs []string
	// BootNodes are full multiaddrs with /p2p/<peer id> dialled at start and
	// redialled while disconnected.
	BootNodes []string
	// Identity is the node's Ed25519 key; the libp2p identity (and peer ID)
	// is derived from it. Nil generates an ephemeral key.
	Identity ed25519.PrivateKey
	// Logger receives the node's logs (slog.Default() when nil).
	Logger *slog.Logger
	// MaxBlob bounds a payload fetched over BlobProtocol and the payload_size
	// an announcement may claim (default DefaultMaxBlob).
	MaxBlob int64
	// BlobCacheBytes bounds the payloads a Forwarder keeps in memory for
	// serving when the node has no Blobs (default 1 GiB); the oldest are
	// evicted first.
	BlobCacheBytes int64
	// Blobs is the node's blob store (store.Blobs): BlobProtocol serves
	// from it, FetchBlobTo and the Receiver fetch into it, the Forwarder
	// keeps announced payloads in it. Without it payloads are kept in a
	// memory cache and fetched into memory.
	Blobs BlobStore
	// OnBlobIn, when set, is told the size of every blob fetched from a
	// peer over BlobProtocol (the node's tenzro_payload_bytes_total{in}).
	OnBlobIn func(n int64)
}

// Handlers receive validated messages. Each may be nil. They are called from
// one goroutine per topic, so a slow handler delays the next message of its
// topic (and, past pubsub's buffer, drops messages): hand long work off.
// Messages the node itself published are not delivered to it.
type Handlers struct {
	// OnSubmission receives a submission announcement; from is the peer ID
	// of the node that published it (the one to fetch the payload from).
	OnSubmission func(ctx context.Context, from string, a SubmissionAnnouncement)
	// OnFragment receives a fragment-weights announcement.
	OnFragment func(ctx context.Context, from string, f FragmentAnnouncement)
	// OnSyncerStatus receives a syncer status.
	OnSyncerStatus func(ctx context.Context, s SyncerStatus)
	// Blob serves payloads by hash over BlobProtocol, after the Forwarder's
	// cache. The returned bytes must hash to the requested hash.
	Blob func(hash wire.Hash) ([]byte, bool)
	// Nonce, when set, serves tenzro_attest_getNonce over NonceProtocol
	// (the syncer role). A refusal should be a *Refusal so that its kind
	// reaches the asking node; any other error travels as kind 0.
	Nonce func(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error)
	// ChainInfo, when set, serves ChainInfoProtocol: this node's chain (its
	// genesis and CometBFT peer address) for nodes that join it.
	ChainInfo func() (*ChainInfo, error)
}

// Stats counts what the node saw. Rejected messages failed validation (bad
// shape or signature) and were neither delivered nor forwarded; Ignored ones
// were valid but above this node's limits.
type Stats struct {
	Accepted, Rejected, Ignored            uint64
	BlobsServed, BlobServeErrors           uint64
	BlobsFetched, BlobFetchErrors          uint64
	ReceiverSubmitted, ReceiverSubmitFails uint64
	// BlobBytesServed counts blob bytes sent; BlobResumes counts fetches
	// that went on from a byte past 0 after a broken stream.
	BlobBytesServed, BlobResumes uint64
}

type counters struct {
	accepted, rejected, ignored            atomic.Uint64
	blobsServed, blobServeErrors           atomic.Uint64
	blobsFetched, blobFetchErrors          atomic.Uint64
	receiverSubmitted, receiverSubmitFails atomic.Uint64
	blobBytesServed, blobResumes           atomic.Uint64
}

// Node is a libp2p host with gossipsub on the two Tenzro topics and the
// blob stream protocol.
type Node struct {
	h        host.Host
	bw       *metrics.BandwidthCounter // every byte of every libp2p stream, by protocol
	ps       *pubsub.PubSub
	topics   map[string]*pubsub.Topic
	subs     []*pubsub.Subscription
	log      *slog.Logger
	hd       Handlers
	maxBlob  int64
	onBlobIn func(int64)
	cache    *blobCache
	boot     []peer.AddrInfo
	serveSem chan struct{} // blob serves
	ctrlSem  chan struct{} // nonce and chain-info serves: never held by blob streams
	idle     time.Duration // a served stream whose reader makes no progress for this long is reset
	mesh     *meshTracer
	blobs    BlobStore

	servingMu sync.Mutex
	serving   map[peer.ID]int // blob streams served per peer now
	// cutServeAfter, when > 0, makes the next blob serve reset its stream
	// after that many bytes (tests of resumption).
	cutServeAfter atomic.Int64

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	c         counters
}

// New starts a node: it listens, joins both topics with validators, serves
// blobs and dials the boot nodes. An unreachable boot node is logged, not
// fatal; a malformed address is an error.
func New(ctx context.Context, cfg Config, h Handlers) (*Node, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "gossip")
	if len(cfg.ListenAddrs) == 0 {
		cfg.ListenAddrs = []string{DefaultListenAddr}
	}
	if cfg.MaxBlob <= 0 {
		cfg.MaxBlob = DefaultMaxBlob
	}
	if cfg.BlobCacheBytes <= 0 {
		cfg.BlobCacheBytes = 1 << 30
	}
	priv := cfg.Identity
	if priv == nil {
		var err error
		if _, priv, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, fmt.Errorf("gossip: generate ephemeral identity: %w", err)
		}
		log.Warn("no identity configured: using an ephemeral peer ID")
	}
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("gossip: identity is %d bytes, want an Ed25519 private key of %d", len(priv), ed25519.PrivateKeySize)
	}
	key, err := crypto.UnmarshalEd25519PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("gossip: identity: %w", err)
	}
	var boot []peer.AddrInfo
	for _, a := range cfg.BootNodes {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return nil, fmt.Errorf("gossip: boot node %q: want a multiaddr ending in /p2p/<peer id>: %w", a, err)
		}
		boot = append(boot, *ai)
	}

	bw := metrics.NewBandwidthCounter()
	rm, cm, err := newLimits(boot)
	if err != nil {
		return nil, fmt.Errorf("gossip: resource limits: %w", err)
	}
	hst, err := libp2p.New(
		libp2p.Identity(key),
		libp2p.ListenAddrStrings(cfg.ListenAddrs...),
		libp2p.UserAgent("tenzro-node"),
		libp2p.BandwidthReporter(bw),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
	)
	if err != nil {
		return nil, fmt.Errorf("gossip: start libp2p host on %v: %w", cfg.ListenAddrs, err)
	}
	nctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		h: hst, bw: bw, topics: map[string]*pubsub.Topic{}, log: log, hd: h, maxBlob: cfg.MaxBlob, onBlobIn: cfg.OnBlobIn,
		cache: newBlobCache(cfg.BlobCacheBytes), boot: boot, serveSem: make(chan struct{}, maxConcurrentServes),
		ctrlSem: make(chan struct{}, maxControlServes), idle: streamIdle,
		ctx: nctx, cancel: cancel, mesh: newMeshTracer(), blobs: cfg.Blobs, serving: map[peer.ID]int{},
	}
	if err := n.start(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// messageID is the content address of a message: a valid announcement
// replayed by another peer is the same message and is dropped as a duplicate.
func messageID(m *pb.Message) string {
	s := wire.SHA256(m.Data)
	return hex.EncodeToString(s[:]) // IDs travel in protobuf strings: keep them UTF-8
}

func (n *Node) start(ctx context.Context) error {
	// Flood publishing: go-libp2p-pubsub v0.17.0 leaves it off, and then a
	// node's own message goes only to its mesh peers. The mesh is empty until
	// the first heartbeat after a peer subscribes (and never holds peers that
	// refuse a GRAFT, such as boot nodes with D=0), and a message published
	// then is lost: gossip goes only to peers outside the mesh, and after the
	// heartbeat every peer is inside. With it, our own announcements go to
	// every peer subscribed to the topic (all peers with a score at or above
	// the publish threshold; we run no scoring). They are small (at most
	// MaxMessageSize), so the extra copies are cheap.
	ps, err := pubsub.NewGossipSub(n.ctx, n.h,
		pubsub.WithFloodPublish(true),
		pubsub.WithRawTracer(n.mesh),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMessageIdFn(messageID),
		pubsub.WithSubscriptionFilter(pubsub.NewAllowlistSubscriptionFilter(TopicTraining, TopicSyncer)),
		pubsub.WithLogger(n.log),
	)
	if err != nil {
		return fmt.Errorf("gossip: start gossipsub: %w", err)
	}
	n.ps = ps
	for _, t := range []string{TopicTraining, TopicSyncer} {
		if err := ps.RegisterTopicValidator(t, n.validate, pubsub.WithValidatorTimeout(5*time.Second)); err != nil {
			return fmt.Errorf("gossip: validator for %s: %w", t, err)
		}
		top, err := ps.Join(t)
		if err != nil {
			return fmt.Errorf("gossip: join %s: %w", t, err)
		}
		n.topics[t] = top
		sub, err := top.Subscribe()
		if err != nil {
			return fmt.Errorf("gossip: subscribe %s: %w", t, err)
		}
		n.subs = append(n.subs, sub)
		n.wg.Add(1)
		go n.readLoop(sub)
	}
	n.h.SetStreamHandler(protocol.ID(BlobProtocol), n.serveBlob)
	if n.hd.Nonce != nil {
		n.h.SetStreamHandler(protocol.ID(NonceProtocol), n.serveNonce)
	}
	if n.hd.ChainInfo != nil {
		n.h.SetStreamHandler(protocol.ID(ChainInfoProtocol), n.serveChainInfo)
	}
	for _, ai := range n.boot {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := n.h.Connect(cctx, ai); err != nil {
			n.log.Warn("boot node unreachable; will retry", "peer", ai.ID, "err", err)
		}
		cancel()
	}
	if len(n.boot) > 0 {
		n.wg.Add(1)
		go n.redialBoot()
	}
	n.log.Info("gossip node started", "peer_id", n.PeerID(), "addrs", n.Addrs())
	return nil
}

// Boot node redial: a boot node that dropped is dialled again after
// redialFirst, then after twice as long each time it stays unreachable, up
// to redialMax; a restarted boot node does not dial us back, so this is
// how a light client finds its way back to the network.
const (
	redialCheck = time.Second
	redialFirst = time.Second
	redialMax   = 30 * time.Second
)

// redialBoot reconnects to boot nodes that dropped.
func (n *Node) redialBoot() {
	defer n.wg.Done()
	t := time.NewTicker(redialCheck)
	defer t.Stop()
	next := make([]time.Time, len(n.boot))
	wait := make([]time.Duration, len(n.boot))
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for i, ai := range n.boot {
			if n.h.Network().Connectedness(ai.ID) == network.Connected {
				wait[i] = 0
				continue
			}
			if now.Before(next[i]) {
				continue
			}
			cctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			err := n.h.Connect(cctx, ai)
			cancel()
			if err == nil {
				n.log.Info("boot node reconnected", "peer", ai.ID)
				wait[i] = 0
				continue
			}
			wait[i] = min(max(2*wait[i], redialFirst), redialMax)
			next[i] = time.Now().Add(wait[i])
			n.log.Debug("boot node still unreachable", "peer", ai.ID, "retry_in", wait[i], "err", err)
		}
	}
}

// validate is the topic validator of both topics: strict decode, the right
// message type for the topic, shape and signature. Accepted messages carry
// the decoded value to the read loop.
func (n *Node) validate(ctx context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
	v, err := Decode(m.Data)
	if err == nil {
		err = n.verify(m.GetTopic(), v)
	}
	switch {
	case err == nil:
		n.c.accepted.Add(1)
		m.ValidatorData = v
		return pubsub.ValidationAccept
	case errors.Is(err, errOverLocalLimit):
		n.c.ignored.Add(1)
		n.log.Debug("gossip message ignored", "topic", m.GetTopic(), "from", m.GetFrom(), "via", from, "err", err)
		return pubsub.ValidationIgnore
	default:
		n.c.rejected.Add(1)
		n.log.Info("gossip message rejected", "topic", m.GetTopic(), "from", m.GetFrom(), "via", from, "err", err)
		return pubsub.ValidationReject
	}
}

func (n *Node) verify(topic string, v any) error {
	switch x := v.(type) {
	case *SubmissionAnnouncement:
		if topic != TopicTraining {
			return fmt.Errorf("submission announcement on topic %s", topic)
		}
		return x.Verify(n.maxBlob)
	case *FragmentAnnouncement:
		if topic != TopicTraining {
			return fmt.Errorf("fragment announcement on topic %s", topic)
		}
		return x.Verify(n.maxBlob)
	case *SyncerStatus:
		if topic != TopicSyncer {
			return fmt.Errorf("syncer status on topic %s", topic)
		}
		return x.Verify()
	}
	return fmt.Errorf("unexpected message %T", v)
}

func (n *Node) readLoop(sub *pubsub.Subscription) {
	defer n.wg.Done()
	for {
		m, err := sub.Next(n.ctx)
		if err != nil {
			return // closed
		}
		if m.GetFrom() == n.h.ID() {
			continue
		}
		from := m.GetFrom().String()
		switch x := m.ValidatorData.(type) {
		case *SubmissionAnnouncement:
			if n.hd.OnSubmission != nil {
				n.hd.OnSubmission(n.ctx, from, *x)
			}
		case *FragmentAnnouncement:
			if n.hd.OnFragment != nil {
				n.hd.OnFragment(n.ctx, from, *x)
			}
		case *SyncerStatus:
			if n.hd.OnSyncerStatus != nil {
				n.hd.OnSyncerStatus(n.ctx, *x)
			}
		}
	}
}

// Close leaves the topics and stops the host. It is safe to call twice.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.cancel()
		for _, s := range n.subs {
			s.Cancel()
		}
		for _, t := range n.topics {
			_ = t.Close()
		}
		err = n.h.Close()
		n.wg.Wait()
	})
	if err != nil {
		return fmt.Errorf("gossip: close host: %w", err)
	}
	return nil
}

// PeerID returns the node's libp2p peer ID.
func (n *Node) PeerID() string { return n.h.ID().String() }

// Addrs returns the node's listen addresses as full multiaddrs with
// /p2p/<peer id>, ready to hand out as boot nodes.
func (n *Node) Addrs() []string {
	addrs, err := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()})
	if err != nil {
		return nil
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}

// Connect dials a peer given its full multiaddr (with /p2p/<peer id>).
func (n *Node) Connect(ctx context.Context, addr string) error {
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return fmt.Errorf("gossip: connect %q: want a multiaddr ending in /p2p/<peer id>: %w", addr, err)
	}
	if err := n.h.Connect(ctx, *ai); err != nil {
		return fmt.Errorf("gossip: connect %s: %w", ai.ID, err)
	}
	return nil
}

// TopicPeers lists the peers this node knows to be subscribed to topic.
func (n *Node) TopicPeers(topic string) []string {
	t, ok := n.topics[topic]
	if !ok {
		return nil
	}
	var out []string
	for _, p := range t.ListPeers() {
		out = append(out, p.String())
	}
	return out
}

// MeshPeers lists the peers in this node's gossipsub mesh for topic: the
// peers it forwards other nodes' messages to. It is empty until the first
// heartbeat after peers subscribe (about 100 ms after start, then every
// second); the node's own messages do not wait for it (see TopicPeers).
func (n *Node) MeshPeers(topic string) []string { return n.mesh.peers(topic) }

// ConnectedPeers is the number of peers this node has a connection to.
func (n *Node) ConnectedPeers() int { return len(n.h.Network().Peers()) }

// Stats returns the node's counters.
func (n *Node) Stats() Stats {
	return Stats{
		Accepted: n.c.accepted.Load(), Rejected: n.c.rejected.Load(), Ignored: n.c.ignored.Load(),
		BlobsServed: n.c.blobsServed.Load(), BlobServeErrors: n.c.blobServeErrors.Load(),
		BlobsFetched: n.c.blobsFetched.Load(), BlobFetchErrors: n.c.blobFetchErrors.Load(),
		ReceiverSubmitted: n.c.receiverSubmitted.Load(), ReceiverSubmitFails: n.c.receiverSubmitFails.Load(),
		BlobBytesServed: n.c.blobBytesServed.Load(), BlobResumes: n.c.blobResumes.Load(),
	}
}

func (n *Node) publish(ctx context.Context, topic string, v any) error {
	b, err := encode(v)
	if err != nil {
		return err
	}
	// Publish runs our own validator first: an invalid message fails here.
	if err := n.topics[topic].Publish(ctx, b); err != nil {
		return fmt.Errorf("gossip: publish on %s: %w", topic, err)
	}
	return nil
}

// PublishSubmission announces a submission. The payload must be fetchable
// from this node (see Forwarder, or Handlers.Blob).
func (n *Node) PublishSubmission(ctx context.Context, a SubmissionAnnouncement) error {
	a.Type = TypeSubmission
	if err := a.Verify(n.maxBlob); err != nil {
		return fmt.Errorf("gossip: publish: %w", err)
	}
	return n.publish(ctx, TopicTraining, &a)
}

// PublishFragment announces a fragment's weights (signed with
// FragmentAnnouncement.Sign); they must be fetchable from this node.
func (n *Node) PublishFragment(ctx context.Context, f FragmentAnnouncement) error {
	if err := f.Verify(n.maxBlob); err != nil {
		return fmt.Errorf("gossip: publish: %w", err)
	}
	return n.publish(ctx, TopicTraining, &f)
}

// PublishSyncerStatus publishes a syncer status (signed with
// SyncerStatus.Sign).
func (n *Node) PublishSyncerStatus(ctx context.Context, s SyncerStatus) error {
	if err := s.Verify(); err != nil {
		return fmt.Errorf("gossip: publish: %w", err)
	}
	return n.publish(ctx, TopicSyncer, &s)
}

// BytesByProtocol is what this node's libp2p streams carried since it
// started, per protocol (gossip topics travel under the pubsub protocol,
// blobs under BlobProtocol): total bytes in and out.
func (n *Node) BytesByProtocol() map[string][2]int64 {
	out := map[string][2]int64{}
	for p, st := range n.bw.GetBandwidthByProtocol() {
		out[string(p)] = [2]int64{st.TotalIn, st.TotalOut}
	}
	return out
}
