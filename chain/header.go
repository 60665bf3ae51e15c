package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	cmtjson "github.com/cometbft/cometbft/libs/json"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	"github.com/cometbft/cometbft/types"

	"github.com/tenzro/train/wire"
)

// MaxHeaderBytes bounds a signed header file.
const MaxHeaderBytes = 1 << 20

// SignedHeaderAfter returns the signed header (header and commit) of block
// h+1, whose app hash is that of the state after height h, waiting (up to
// ctx) for that block.
func (c *Client) SignedHeaderAfter(ctx context.Context, h int64) (*types.SignedHeader, error) {
	if _, err := c.AppHashAfter(ctx, h); err != nil { // waits for block h+1
		return nil, err
	}
	next := h + 1
	res, err := c.rpc.Commit(ctx, &next)
	if err != nil {
		return nil, fmt.Errorf("signed header %d: %w", next, err)
	}
	return &res.SignedHeader, nil
}

// EncodeSignedHeader is a signed header in CometBFT's JSON (as its /commit
// RPC result's signed_header), the form ParseSignedHeader reads.
func EncodeSignedHeader(sh *types.SignedHeader) (json.RawMessage, error) {
	return cmtjson.Marshal(sh)
}

// ParseSignedHeader reads a signed header in CometBFT's JSON: the
// signed_header object itself, a /commit result ({"signed_header": …}), or
// a whole /commit JSON-RPC response ({"result": {"signed_header": …}}).
func ParseSignedHeader(raw []byte) (*types.SignedHeader, error) {
	if len(raw) > MaxHeaderBytes {
		return nil, fmt.Errorf("signed header: %d bytes, limit %d", len(raw), MaxHeaderBytes)
	}
	var wrap struct {
		Result *struct {
			SignedHeader json.RawMessage `json:"signed_header"`
		} `json:"result"`
		SignedHeader json.RawMessage `json:"signed_header"`
	}
	if err := json.Unmarshal(raw, &wrap); err != nil {
		return nil, fmt.Errorf("signed header: %w", err)
	}
	switch {
	case wrap.Result != nil && len(wrap.Result.SignedHeader) > 0:
		raw = wrap.Result.SignedHeader
	case len(wrap.SignedHeader) > 0:
		raw = wrap.SignedHeader
	}
	var sh types.SignedHeader
	if err := cmtjson.Unmarshal(raw, &sh); err != nil {
		return nil, fmt.Errorf("signed header: %w", err)
	}
	if sh.Header == nil || sh.Commit == nil {
		return nil, fmt.Errorf("signed header: header or commit missing")
	}
	return &sh, nil
}

// LoadGenesis reads a network's genesis.json.
func LoadGenesis(path string) (*types.GenesisDoc, error) {
	gen, err := types.GenesisDocFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("genesis: %w", err)
	}
	return gen, nil
}

// VerifySignedHeader checks, as a light client does and without a node,
// that sh is block height+1 of the network of gen, signed by more than two
// thirds of the genesis validators' voting power (the application never
// changes its validators, so the header's validators hash must be the
// genesis set's), and returns its app hash: that of the state after height.
func VerifySignedHeader(gen *types.GenesisDoc, sh *types.SignedHeader, height int64) (wire.Hash, error) {
	next := height + 1
	if sh.Header == nil || sh.Commit == nil {
		return wire.Hash{}, fmt.Errorf("signed header: header or commit missing")
	}
	if sh.Height != next {
		return wire.Hash{}, fmt.Errorf("signed header is of block %d; the proof's app hash is in block %d", sh.Height, next)
	}
	vals := make([]*types.Validator, len(gen.Validators))
	for i, v := range gen.Validators {
		vals[i] = types.NewValidator(v.PubKey, v.Power)
	}
	set := types.NewValidatorSet(vals)
	if err := sh.ValidateBasic(gen.ChainID); err != nil {
		return wire.Hash{}, fmt.Errorf("signed header %d: %w", next, err)
	}
	if !bytes.Equal(sh.ValidatorsHash, set.Hash()) {
		return wire.Hash{}, fmt.Errorf("signed header %d: validators hash %X is not the genesis validator set's %X", next, sh.ValidatorsHash, set.Hash())
	}
	if err := set.VerifyCommitLight(gen.ChainID, sh.Commit.BlockID, next, sh.Commit); err != nil {
		return wire.Hash{}, fmt.Errorf("signed header %d: commit: %w", next, err)
	}
	return HeaderAppHash(sh, height)
}

// HeaderAppHash is the app hash a signed header of block height+1 carries
// (the caller trusts the header).
func HeaderAppHash(sh *types.SignedHeader, height int64) (wire.Hash, error) {
	var out wire.Hash
	if sh.Header == nil {
		return out, fmt.Errorf("signed header: header missing")
	}
	if sh.Height != height+1 {
		return out, fmt.Errorf("signed header is of block %d; the proof's app hash is in block %d", sh.Height, height+1)
	}
	if len(sh.AppHash) != len(out) {
		return out, fmt.Errorf("signed header %d: app hash of %d bytes", sh.Height, len(sh.AppHash))
	}
	copy(out[:], sh.AppHash)
	return out, nil
}

// QueryAt reads path/arg at exactly height (the node serves its last
// committed height only: a query at another height is refused).
func (c *Client) QueryAt(ctx context.Context, path, arg string, height int64) ([]byte, int64, error) {
	res, err := c.rpc.ABCIQueryWithOptions(ctx, path, []byte(arg), rpcclient.ABCIQueryOptions{Height: height})
	if err != nil {
		return nil, 0, fmt.Errorf("query %s: %w", path, err)
	}
	if res.Response.Code != CodeOK {
		return nil, res.Response.Height, &TxError{Code: res.Response.Code, Msg: res.Response.Log}
	}
	return res.Response.Value, res.Response.Height, nil
}
