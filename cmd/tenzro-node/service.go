package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// nodeService is what the daemon serves over JSON-RPC: the state machine,
// plus what only the daemon knows (its libp2p identity and addresses) and,
// in the light role, relaying submissions to the syncer over gossip.
type nodeService struct {
	*syncer.Node
	gn  *gossip.Node
	fwd *gossip.Forwarder // set in the light role
}

// Info adds the node's peer id and full listen multiaddrs (what other nodes
// pass as --boot-nodes).
func (s nodeService) Info(ctx context.Context) wire.NodeInfo {
	i := s.Node.Info(ctx)
	i.PeerID, i.Listen = s.gn.PeerID(), s.gn.Addrs()
	return i
}

// Submit judges a submission locally, or in the light role checks its hash
// and signature, keeps the payload for the syncer to fetch by hash, and
// announces it on tenzro/training/1.0.0.
func (s nodeService) Submit(ctx context.Context, g *wire.OuterGradient) (*wire.SubmitResult, error) {
	if s.fwd == nil {
		return s.Node.Submit(ctx, g)
	}
	if len(g.GradientPayload) == 0 {
		// By reference: the trainer uploaded the payload to this node with
		// PUT /blobs/<payload_hash>, which hashed it as it arrived.
		if ok, err := s.Node.Blobs().Has(ctx, g.PayloadHash); err != nil {
			return nil, err
		} else if !ok {
			return nil, syncer.Errf(syncer.KindNotFound, "payload %s is not stored on this node: upload it first (PUT /blobs/%s on the RPC port) or send gradient_payload", g.PayloadHash, g.PayloadHash)
		}
	} else {
		got, ok := g.CheckPayloadHash()
		if !ok {
			return nil, syncer.Errf(syncer.KindInvalid, "payload_hash mismatch: payload hashes to %s, request says %s", got, g.PayloadHash)
		}
		g.MarkPayloadHashed() // Forward checks it again: hashed once
	}
	if err := did.Verify(g.TrainerDID, g.Preimage(), g.Signature); err != nil {
		return nil, syncer.Errf(syncer.KindUnauthorized, "submission signature: %v", err)
	}
	if _, err := s.fwd.Forward(ctx, g); err != nil {
		return nil, syncer.Errf(syncer.KindInvalid, "forward: %v", err)
	}
	return &wire.SubmitResult{Forwarded: true, Round: g.Round, FragmentIndex: g.FragmentIndex, PayloadHash: g.PayloadHash}, nil
}

// AttestNonce issues the nonce locally, or in the light role asks the
// syncer's node for it over gossip.NonceProtocol: the nonce is single-use in
// the syncer's store, where the relayed submission is checked. A refusal by
// the syncer reaches the caller with its kind and message.
func (s nodeService) AttestNonce(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
	if s.fwd == nil {
		return s.Node.AttestNonce(ctx, p)
	}
	res, err := s.gn.RequestNonce(ctx, p)
	var r *gossip.Refusal
	switch {
	case errors.As(err, &r):
		return nil, syncer.Errf(syncer.Kind(r.Kind), "%s", r.Message)
	case errors.Is(err, gossip.ErrNoNoncePeer):
		return nil, syncer.Errf(syncer.KindDisabled, "light node: %v", err)
	case err != nil:
		return nil, fmt.Errorf("light node: attestation nonce from the syncer: %w", err)
	}
	return res, nil
}
