package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtcrypto "github.com/cometbft/cometbft/proto/tendermint/crypto"
	rpcclient "github.com/cometbft/cometbft/rpc/client"
	"github.com/cometbft/cometbft/types"
	"github.com/cosmos/iavl"
	ics23 "github.com/cosmos/ics23/go"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
)

// Proof operation types of a proven query (docs/protocol/chain.md §7).
const (
	// ProofOpIAVL is an ics23 CommitmentProof (protobuf) of the op's key
	// (a state key) in the IAVL state tree: existence with the value, or
	// non-existence.
	ProofOpIAVL = "ics23:iavl"
	// ProofOpAppHash maps the state root to the app hash: its data is
	// AppHashStep JSON.
	ProofOpAppHash = "tenzro:apphash"
)

// QueryState: data is a state key (StateKey: "<keyspace>/<key>"); with
// prove the answer is its stored value and a proof.
const QueryState = "/state"

// Limits of a proof a client accepts.
const (
	maxProofOps   = 2
	maxProofBytes = 64 << 10
)

// AppHashStep is the data of a ProofOpAppHash: the rest of the app hash's
// preimage after the state root.
type AppHashStep struct {
	Height  int64     `json:"height"`
	LogSize uint64    `json:"log_size"`
	LogRoot wire.Hash `json:"log_root"`
}

// ProvableKey is the state key a query path and argument read: the key a
// proven answer's value and proof are about. Proven queries answer the
// stored bytes (a balance as a decimal string, a nonce as 8 bytes
// big-endian, records as JSON); an absent key answers an empty value and a
// non-existence proof.
func ProvableKey(path, arg string) ([]byte, error) {
	switch path {
	case QueryBalance:
		return StateKey(machine.KSLedger, []byte("bal/did:"+arg)), nil
	case QueryBalanceAcct:
		return StateKey(machine.KSLedger, []byte("bal/"+arg)), nil
	case QueryNonce:
		return StateKey(machine.KSLedger, []byte("nonce/"+arg)), nil
	case QueryRun:
		return StateKey(machine.KSRuns, []byte(arg)), nil
	case QueryCandidate:
		return StateKey(machine.KSMeta, []byte("cand/"+arg)), nil
	case QueryReceipt:
		return StateKey(machine.KSReceipts, []byte(arg)), nil
	case QueryCommit:
		task, round, ok := strings.Cut(arg, "/")
		r, err := strconv.ParseUint(round, 10, 64)
		if !ok || task == "" || err != nil {
			return nil, errf(CodeInvalid, "commit query %q: want <task_id>/<round>", arg)
		}
		return StateKey(machine.KSTranscript, append([]byte("c/"+task+"/"), bigEndian(r)...)), nil
	case QueryRunLogLeaf:
		i, err := strconv.ParseUint(arg, 10, 64)
		if err != nil {
			return nil, errf(CodeInvalid, "run log leaf query %q: want an index", arg)
		}
		return StateKey(machine.KSMeta, []byte(fmt.Sprintf("runlog/leaf/%020d", i))), nil
	case QueryState:
		if arg == "" || len(arg) > maxExportKey {
			return nil, errf(CodeInvalid, "state query: key of %d bytes", len(arg))
		}
		return []byte(arg), nil
	}
	return nil, errf(CodeInvalid, "query path %q cannot be proven (want %s, %s, %s, %s, %s, %s, %s, %s or %s)", path,
		QueryBalance, QueryBalanceAcct, QueryNonce, QueryRun, QueryCandidate, QueryReceipt, QueryCommit, QueryRunLogLeaf, QueryState)
}

// More query paths (provable only, or also plain).
const (
	// QueryCommit: data "<task_id>/<round>" → the round commit
	// (wire.RoundCommit JSON).
	QueryCommit = "/commit"
	// QueryRunLogLeaf: data a run-log index → the leaf (RunLogLeaf bytes).
	QueryRunLogLeaf = "/runlogleaf"
)

func bigEndian(v uint64) []byte {
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}

// recentProvable is how many of the last committed heights answer proven
// queries (a light client reads at the height below its newest verified
// header, which may be a few blocks behind the node's last).
const recentProvable = 64

// provable is a committed height's state tree and run log.
type provable struct {
	height int64
	tree   *iavl.ImmutableTree
	log    runLog
}

// remember keeps the committed height among the recent ones (write lock
// held).
func (a *App) remember() {
	if a.committed == nil {
		return
	}
	a.recent = append(a.recent, provable{height: a.height, tree: a.committed, log: a.runLog})
	if n := len(a.recent); n > recentProvable {
		a.recent = append(a.recent[:0:0], a.recent[n-recentProvable:]...)
	}
}

// proveQuery answers a query with prove=true at the last committed height
// (read lock held).
func (a *App) proveQuery(req *abci.RequestQuery) *abci.ResponseQuery {
	return a.proveAt(req, provable{height: a.height, tree: a.committed, log: a.runLog})
}

// proveQueryAt answers a query with prove=true at req.Height, one of the
// recent heights whose tree versions are not pruned (read lock held).
func (a *App) proveQueryAt(req *abci.RequestQuery) *abci.ResponseQuery {
	for _, p := range a.recent {
		if p.height == req.Height && (a.keep <= 0 || p.height > a.height-a.keep) {
			return a.proveAt(req, p)
		}
	}
	lo := a.height
	if len(a.recent) > 0 {
		lo = a.recent[0].height
	}
	return &abci.ResponseQuery{Code: CodeInvalid, Height: a.height,
		Log: fmt.Sprintf("height %d: proven queries are served at heights %d..%d only (the last %d committed)", req.Height, lo, a.height, recentProvable)}
}

func (a *App) proveAt(req *abci.RequestQuery, at provable) *abci.ResponseQuery {
	if req.Path == QueryStateWalk {
		return a.proveWalk(req, at)
	}
	key, err := ProvableKey(req.Path, string(req.Data))
	if err != nil {
		return &abci.ResponseQuery{Code: codeOf(err), Log: err.Error(), Height: at.height}
	}
	if at.tree == nil {
		return &abci.ResponseQuery{Code: CodeNotFound, Log: "no committed state yet", Height: at.height}
	}
	v, p, err := proveKey(at.tree, key)
	if err != nil {
		return &abci.ResponseQuery{Code: CodeInternal, Log: err.Error(), Height: at.height}
	}
	pb, err := p.Marshal()
	if err != nil {
		return &abci.ResponseQuery{Code: CodeInternal, Log: err.Error(), Height: at.height}
	}
	step, _ := json.Marshal(AppHashStep{Height: at.height, LogSize: at.log.size, LogRoot: at.log.root})
	return &abci.ResponseQuery{Code: CodeOK, Key: key, Value: v, Height: at.height, ProofOps: &cmtcrypto.ProofOps{Ops: []cmtcrypto.ProofOp{
		{Type: ProofOpIAVL, Key: key, Data: pb},
		{Type: ProofOpAppHash, Data: step},
	}}}
}

// VerifyStateProof checks that ops prove key = value (value nil: key
// absent) in the state after height, against appHash (from a header the
// caller trusts: block height+1's). It needs no chain.
func VerifyStateProof(ops *cmtcrypto.ProofOps, key, value []byte, height int64, appHash wire.Hash) error {
	if ops == nil || len(ops.Ops) != maxProofOps {
		return errors.New("state proof: want 2 proof operations (" + ProofOpIAVL + ", " + ProofOpAppHash + ")")
	}
	iv, ah := ops.Ops[0], ops.Ops[1]
	if iv.Type != ProofOpIAVL || ah.Type != ProofOpAppHash {
		return fmt.Errorf("state proof: operations %q, %q; want %q, %q", iv.Type, ah.Type, ProofOpIAVL, ProofOpAppHash)
	}
	if !bytes.Equal(iv.Key, key) {
		return fmt.Errorf("state proof: proves key %q, the answer's key is %q", iv.Key, key)
	}
	if len(iv.Data) > maxProofBytes || len(ah.Data) > maxProofBytes {
		return fmt.Errorf("state proof: operation of more than %d bytes", maxProofBytes)
	}
	var p ics23.CommitmentProof
	if err := p.Unmarshal(iv.Data); err != nil {
		return fmt.Errorf("state proof: %s: %w", ProofOpIAVL, err)
	}
	var root []byte
	var err error
	if value != nil {
		ep := p.GetExist()
		if ep == nil {
			return errors.New("state proof: the answer has a value but the proof is not an existence proof")
		}
		if root, err = ep.Calculate(); err != nil {
			return fmt.Errorf("state proof: %w", err)
		}
		if !ics23.VerifyMembership(ics23.IavlSpec, root, &p, key, value) {
			return fmt.Errorf("state proof: the existence proof does not prove %q = the answer's value", key)
		}
	} else {
		np := p.GetNonexist()
		if np == nil {
			return errors.New("state proof: the answer says absent but the proof is not a non-existence proof")
		}
		if root, err = np.Calculate(); err != nil {
			return fmt.Errorf("state proof: %w", err)
		}
		if !ics23.VerifyNonMembership(ics23.IavlSpec, root, &p, key) {
			return fmt.Errorf("state proof: the non-existence proof does not prove %q absent", key)
		}
	}
	var step AppHashStep
	dec := json.NewDecoder(bytes.NewReader(ah.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&step); err != nil {
		return fmt.Errorf("state proof: %s: %w", ProofOpAppHash, err)
	}
	if step.Height != height {
		return fmt.Errorf("state proof: for height %d, the answer is at height %d", step.Height, height)
	}
	if got := AppHash(step.Height, wire.Hash(root), step.LogSize, step.LogRoot); got != appHash {
		return fmt.Errorf("state proof: state root %X recomputes app hash %s at height %d, the header says %s", root, got, height, appHash)
	}
	return nil
}

// Proven is a value read with a proof that checked against a verified
// header.
type Proven struct {
	Key    []byte
	Value  []byte // nil: absent
	Height int64
}

// ProvenQuery reads path/arg with a proof at the node's last height h,
// fetches the signed header of block h+1, verifies it against gen's
// validators (VerifySignedHeader: the node asked need not be trusted) and
// the proof against its app hash.
func (c *Client) ProvenQuery(ctx context.Context, gen *types.GenesisDoc, path, arg string) (*Proven, error) {
	key, err := ProvableKey(path, arg)
	if err != nil {
		return nil, err
	}
	res, err := c.rpc.ABCIQueryWithOptions(ctx, path, []byte(arg), rpcclient.ABCIQueryOptions{Prove: true})
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", path, err)
	}
	r := res.Response
	if r.Code != CodeOK {
		return nil, &TxError{Code: r.Code, Msg: r.Log}
	}
	if !bytes.Equal(r.Key, key) {
		return nil, fmt.Errorf("query %s %q: the node answered key %q", path, arg, r.Key)
	}
	sh, err := c.SignedHeaderAfter(ctx, r.Height)
	if err != nil {
		return nil, err
	}
	appHash, err := VerifySignedHeader(gen, sh, r.Height)
	if err != nil {
		return nil, err
	}
	var v []byte
	if r.ProofOps != nil && len(r.ProofOps.Ops) > 0 {
		var p ics23.CommitmentProof
		if err := p.Unmarshal(r.ProofOps.Ops[0].Data); err == nil && p.GetExist() != nil {
			v = r.Value
			if v == nil {
				v = []byte{}
			}
		}
	}
	if err := VerifyStateProof(r.ProofOps, key, v, r.Height, appHash); err != nil {
		return nil, err
	}
	return &Proven{Key: key, Value: v, Height: r.Height}, nil
}

// ProvenBalance is a DID's balance read with a proof (0 when it has no
// account).
func (c *Client) ProvenBalance(ctx context.Context, gen *types.GenesisDoc, d string) (*big.Int, int64, error) {
	p, err := c.ProvenQuery(ctx, gen, QueryBalance, d)
	if err != nil {
		return nil, 0, err
	}
	if p.Value == nil {
		return new(big.Int), p.Height, nil
	}
	b, ok := new(big.Int).SetString(string(p.Value), 10)
	if !ok {
		return nil, 0, fmt.Errorf("balance of %s: stored value %q is not a decimal", d, p.Value)
	}
	return b, p.Height, nil
}
