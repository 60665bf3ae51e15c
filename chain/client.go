package chain

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	rpchttp "github.com/cometbft/cometbft/rpc/client/http"

	"github.com/tenzro/train/audit"
	"github.com/tenzro/train/wire"
)

// Client talks to a chain node's CometBFT RPC: it broadcasts transactions
// and waits for their commit, and reads committed state.
type Client struct {
	rpc *rpchttp.HTTP
}

// DefaultNodeURL is CometBFT's default RPC address.
const DefaultNodeURL = "http://127.0.0.1:26657"

// NewClient connects to a node's RPC (http://host:port).
func NewClient(url string) (*Client, error) {
	c, err := rpchttp.NewWithTimeout(url, "/websocket", 90)
	if err != nil {
		return nil, fmt.Errorf("chain client %s: %w", url, err)
	}
	return &Client{rpc: c}, nil
}

// Committed is a committed transaction's outcome.
type Committed struct {
	Height int64           `json:"height"`
	Hash   string          `json:"tx_hash"`
	Result json.RawMessage `json:"result"`
}

// Broadcast submits tx, waits until it is committed in a block and returns
// the height and result. A refusal (at CheckTx or in the block) is a
// *TxError with the application's code and reason.
func (c *Client) Broadcast(ctx context.Context, tx []byte) (*Committed, error) {
	res, err := c.rpc.BroadcastTxCommit(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("broadcast: %w", err)
	}
	if res.CheckTx.Code != CodeOK {
		return nil, &TxError{Code: res.CheckTx.Code, Msg: res.CheckTx.Log}
	}
	if res.TxResult.Code != CodeOK {
		return nil, &TxError{Code: res.TxResult.Code, Msg: res.TxResult.Log}
	}
	out := &Committed{Height: res.Height, Hash: res.Hash.String()}
	if len(res.TxResult.Data) > 0 {
		out.Result = json.RawMessage(res.TxResult.Data)
	}
	return out, nil
}

// Query reads path/arg from the node's last committed state; it returns the
// value and the height it was read at.
func (c *Client) Query(ctx context.Context, path, arg string) ([]byte, int64, error) {
	res, err := c.rpc.ABCIQuery(ctx, path, []byte(arg))
	if err != nil {
		return nil, 0, fmt.Errorf("query %s: %w", path, err)
	}
	if res.Response.Code != CodeOK {
		return nil, res.Response.Height, &TxError{Code: res.Response.Code, Msg: res.Response.Log}
	}
	return res.Response.Value, res.Response.Height, nil
}

// Balance returns a DID's committed balance (attoTNZO) and the height.
func (c *Client) Balance(ctx context.Context, d string) (*wire.Balance, int64, error) {
	v, h, err := c.Query(ctx, QueryBalance, d)
	if err != nil {
		return nil, h, err
	}
	return &wire.Balance{DID: d, Balance: string(v)}, h, nil
}

// Status is a node's view of the chain.
type Status struct {
	ChainID string    `json:"chain_id"`
	Moniker string    `json:"moniker"`
	Height  int64     `json:"height"`
	AppHash wire.Hash `json:"app_hash"`
	// CatchingUp is true while the node replays blocks it missed.
	CatchingUp bool `json:"catching_up"`
}

// Status reports the node's chain id, last committed height and app hash.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	st, err := c.rpc.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	info, err := c.rpc.ABCIInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("abci info: %w", err)
	}
	s := &Status{ChainID: st.NodeInfo.Network, Moniker: st.NodeInfo.Moniker, Height: info.Response.LastBlockHeight, CatchingUp: st.SyncInfo.CatchingUp}
	copy(s.AppHash[:], info.Response.LastBlockAppHash)
	return s, nil
}

// AppHashAfter returns the app hash of the state after height h, from the
// header of block h+1 (waiting, up to ctx, for that block).
func (c *Client) AppHashAfter(ctx context.Context, h int64) (wire.Hash, error) {
	next := h + 1
	for {
		b, err := c.rpc.Block(ctx, &next)
		if err == nil && b.Block != nil {
			var out wire.Hash
			if len(b.Block.AppHash) != len(out) {
				return out, fmt.Errorf("block %d: app hash of %d bytes", next, len(b.Block.AppHash))
			}
			copy(out[:], b.Block.AppHash)
			return out, nil
		}
		select {
		case <-ctx.Done():
			return wire.Hash{}, fmt.Errorf("block %d: %w (last error %v)", next, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CheckReceipt verifies a receipt against the chain (the TRAINING_VERIFY
// semantics, 0x1008, with the chain as the root of trust):
// syncer.CheckReceiptAgainst with this node as the anchor (the receipt
// verifies on its own, its run is sealed on chain with the same run root,
// its syncers are the chain's election entrants at their tickets), and it is
// signed by the syncer whose signature the chain took (signReceipt). It says
// why not; nil means valid (1).
func (c *Client) CheckReceipt(ctx context.Context, receipt []byte) error {
	run, err := audit.CheckReceiptAgainst(ctx, c, receipt)
	if err != nil {
		return err
	}
	rc, err := audit.ParseReceipt(receipt)
	if err != nil {
		return err
	}
	v, _, err := c.Query(ctx, QueryReceipt, rc.TaskID)
	if err != nil {
		return fmt.Errorf("run %s on chain (height %d): %w", rc.TaskID, run.Height, err)
	}
	var onChain wire.Receipt
	if err := json.Unmarshal(v, &onChain); err != nil {
		return fmt.Errorf("receipt of %s on chain: %w", rc.TaskID, err)
	}
	if onChain.SyncerDID != rc.SyncerDID {
		return fmt.Errorf("receipt is signed by %s; the chain took run %s's receipt signature from its syncer %s", rc.SyncerDID, rc.TaskID, onChain.SyncerDID)
	}
	return nil
}

// VerifiedAppHashAfter returns the app hash of the state after height h
// from the header of block h+1, verified as a light client does against the
// genesis validator set: the header's validators hash is the genesis set's
// (the chain's application never changes its validators) and more than two
// thirds of that voting power signed the header's commit. The node asked
// need not be trusted: a forged header fails.
func (c *Client) VerifiedAppHashAfter(ctx context.Context, genesisPath string, h int64) (wire.Hash, error) {
	gen, err := LoadGenesis(genesisPath)
	if err != nil {
		return wire.Hash{}, err
	}
	sh, err := c.SignedHeaderAfter(ctx, h)
	if err != nil {
		return wire.Hash{}, err
	}
	return VerifySignedHeader(gen, sh, h)
}
