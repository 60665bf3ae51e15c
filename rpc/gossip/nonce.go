package gossip

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/tenzro/train/wire"
)

// NonceProtocol wire format (docs/protocol/gossip.md):
//
//	request:  one JSON object, wire.NonceParams ({"task_id","did"}), at most
//	          MaxNonceMessage bytes; then the requester closes its write side.
//	response: one JSON object, at most MaxNonceMessage bytes, either
//	          {"result": wire.NonceResult} or {"error": {"kind", "message"}};
//	          then the server closes the stream.
//
// Both sides decode strictly: unknown members, trailing data, a missing or
// doubled answer and oversize messages are refused.

// MaxNonceMessage caps a NonceProtocol request and response.
const MaxNonceMessage = 4 << 10

// nonceTimeout bounds one nonce stream when the caller's context has no
// deadline (and always on the serving side).
const nonceTimeout = 30 * time.Second

// Refusal is a nonce request refused by the serving node: Kind is the
// serving node's refusal kind (syncer.Kind), Message its precise message.
type Refusal struct {
	Kind    int    `json:"kind"`
	Message string `json:"message"`
}

func (r *Refusal) Error() string { return r.Message }

// ErrNoNoncePeer: no connected peer serves NonceProtocol.
var ErrNoNoncePeer = errors.New("no connected peer serves attestation nonces (is the syncer's node among --boot-nodes?)")

type nonceResponse struct {
	Result *wire.NonceResult `json:"result,omitempty"`
	Error  *Refusal          `json:"error,omitempty"`
}

// readStrict reads at most MaxNonceMessage bytes from r (to EOF) and decodes
// them into v strictly.
func readStrict(r io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, MaxNonceMessage+1))
	if err != nil {
		return err
	}
	if len(b) > MaxNonceMessage {
		return fmt.Errorf("message over %d bytes", MaxNonceMessage)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return errors.New("decode: trailing data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("decode: trailing data after the JSON object")
	}
	return nil
}

func (n *Node) serveNonce(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(nonceTimeout))
	var p wire.NonceParams
	if err := readStrict(s, &p); err != nil {
		n.log.Debug("nonce request refused", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
		return
	}
	select {
	case n.ctrlSem <- struct{}{}:
		defer func() { <-n.ctrlSem }()
	default:
		n.writeNonce(s, nonceResponse{Error: &Refusal{Kind: 0, Message: "syncer node busy: too many streams in flight"}})
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, nonceTimeout)
	defer cancel()
	res, err := n.hd.Nonce(ctx, p)
	var resp nonceResponse
	switch {
	case err != nil:
		var r *Refusal
		if !errors.As(err, &r) {
			r = &Refusal{Message: err.Error()}
		}
		resp.Error = r
	case res == nil:
		resp.Error = &Refusal{Message: "no nonce issued"}
	default:
		resp.Result = res
	}
	n.writeNonce(s, resp)
}

func (n *Node) writeNonce(s network.Stream, resp nonceResponse) {
	b, err := json.Marshal(resp)
	if err == nil && len(b) > MaxNonceMessage {
		err = fmt.Errorf("response of %d bytes over %d", len(b), MaxNonceMessage)
	}
	if err != nil {
		n.log.Warn("nonce response not sent", "err", err)
		_ = s.Reset()
		return
	}
	if _, err := s.Write(b); err != nil {
		n.log.Debug("nonce response send failed", "peer", s.Conn().RemotePeer(), "err", err)
		_ = s.Reset()
	}
}

// RequestNonce asks the syncer's node for p's attestation nonce over
// NonceProtocol: the boot nodes first, then other connected peers; peers
// that do not serve the protocol are skipped. The first answer is final: a
// nonce, or the serving node's refusal as a *Refusal (wrapped).
func (n *Node) RequestNonce(ctx context.Context, p wire.NonceParams) (*wire.NonceResult, error) {
	var order []peer.ID
	seen := map[peer.ID]bool{}
	for _, ai := range n.boot {
		if !seen[ai.ID] {
			seen[ai.ID] = true
			order = append(order, ai.ID)
		}
	}
	for _, pid := range n.h.Network().Peers() {
		if !seen[pid] {
			seen[pid] = true
			order = append(order, pid)
		}
	}
	var errs []error
	for _, pid := range order {
		res, err := n.requestNonce(ctx, pid, p)
		var r *Refusal
		if err == nil || errors.As(err, &r) || ctx.Err() != nil {
			if err != nil {
				return nil, fmt.Errorf("gossip: nonce from %s: %w", pid, err)
			}
			return res, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", pid, err))
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("gossip: nonce: %w", ErrNoNoncePeer)
	}
	return nil, fmt.Errorf("gossip: nonce: %w: %w", ErrNoNoncePeer, errors.Join(errs...))
}

func (n *Node) requestNonce(ctx context.Context, pid peer.ID, p wire.NonceParams) (*wire.NonceResult, error) {
	req, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	if len(req) > MaxNonceMessage {
		return nil, &Refusal{Kind: 1, Message: fmt.Sprintf("nonce request of %d bytes, limit %d", len(req), MaxNonceMessage)}
	}
	s, done, err := n.openStream(ctx, pid, NonceProtocol, nonceTimeout)
	if err != nil {
		return nil, err
	}
	defer done()
	if _, err := s.Write(req); err != nil {
		return nil, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	if err := s.CloseWrite(); err != nil {
		return nil, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	var resp nonceResponse
	if err := readStrict(s, &resp); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	switch {
	case resp.Error != nil && resp.Result == nil:
		return nil, resp.Error
	case resp.Result != nil && resp.Error == nil:
		return resp.Result, nil
	}
	return nil, errors.New("read response: want exactly one of result and error")
}
