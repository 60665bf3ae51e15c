package chain

// walk.go: a proven walk over the keys under a prefix in one query. A light
// client scans a prefix by proving each key's successor (a non-existence
// proof of key||0x00 carries the next key, proven adjacent): one proven
// query a key. QueryStateWalk answers a run of those same proofs at once,
// as one ics23 compressed batch (the inner nodes the proofs share are sent
// once); the client decompresses it and checks every entry exactly as it
// checks a single answer, so nothing is trusted that a per-key walk would
// not have proven.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	abci "github.com/cometbft/cometbft/abci/types"
	cmtcrypto "github.com/cometbft/cometbft/proto/tendermint/crypto"
	ics23 "github.com/cosmos/ics23/go"
)

// QueryStateWalk: with prove only; data is WalkRequest's encoding. The
// answer's first proof operation (ProofOpIAVLWalk) is an ics23 compressed
// batch of the proofs of from, then of each next key's successor
// (key||0x00), in walk order, until a key outside prefix, the end of the
// tree, or the answer's bounds; the second is ProofOpAppHash.
const QueryStateWalk = "/state/walk"

// ProofOpIAVLWalk is a compressed ics23 batch proof of a walk's keys.
const ProofOpIAVLWalk = "ics23:iavl-walk"

// Bounds of a walk answer (the client takes what fits and asks again).
const (
	maxWalkEntries = 256
	// walkValueBudget bounds the values one answer carries.
	walkValueBudget = 1 << 20
	// maxWalkProofBytes bounds the batch proof a client accepts.
	maxWalkProofBytes = 8 << 20
)

// EncodeWalkRequest is a walk query's data: prefix length (u16, big
// endian), prefix, then from (which starts with prefix).
func EncodeWalkRequest(prefix, from []byte) []byte {
	out := binary.BigEndian.AppendUint16(nil, uint16(len(prefix)))
	out = append(out, prefix...)
	return append(out, from...)
}

// parseWalkRequest is EncodeWalkRequest's strict inverse.
func parseWalkRequest(data []byte) (prefix, from []byte, err error) {
	if len(data) < 2 {
		return nil, nil, errf(CodeInvalid, "state walk: %d bytes, want a 2-byte prefix length first", len(data))
	}
	n := int(binary.BigEndian.Uint16(data))
	if len(data) < 2+n || n == 0 {
		return nil, nil, errf(CodeInvalid, "state walk: prefix of %d bytes in %d bytes of data", n, len(data))
	}
	prefix, from = data[2:2+n], data[2+n:]
	if len(from) > maxExportKey || !bytes.HasPrefix(from, prefix) {
		return nil, nil, errf(CodeInvalid, "state walk: from (%d bytes) must start with the prefix and be at most %d bytes", len(from), maxExportKey)
	}
	return prefix, from, nil
}

// proveWalk answers a QueryStateWalk at a provable height.
func (a *App) proveWalk(req *abci.RequestQuery, at provable) *abci.ResponseQuery {
	fail := func(err error) *abci.ResponseQuery {
		return &abci.ResponseQuery{Code: codeOf(err), Log: err.Error(), Height: at.height}
	}
	prefix, x, err := parseWalkRequest(req.Data)
	if err != nil {
		return fail(err)
	}
	if at.tree == nil {
		return &abci.ResponseQuery{Code: CodeNotFound, Log: "no committed state yet", Height: at.height}
	}
	var batch ics23.BatchProof
	budget := walkValueBudget
	for len(batch.Entries) < maxWalkEntries && budget > 0 {
		v, p, err := proveKey(at.tree, x)
		if err != nil {
			return &abci.ResponseQuery{Code: CodeInternal, Log: err.Error(), Height: at.height}
		}
		key := x
		if ep := p.GetExist(); ep != nil {
			batch.Entries = append(batch.Entries, &ics23.BatchEntry{Proof: &ics23.BatchEntry_Exist{Exist: ep}})
			budget -= len(v)
		} else {
			np := p.GetNonexist()
			batch.Entries = append(batch.Entries, &ics23.BatchEntry{Proof: &ics23.BatchEntry_Nonexist{Nonexist: np}})
			if np.Right == nil {
				break
			}
			key = np.Right.Key
			budget -= len(np.Right.Value)
		}
		if !bytes.HasPrefix(key, prefix) {
			break
		}
		x = append(append(make([]byte, 0, len(key)+1), key...), 0)
	}
	cp := ics23.Compress(&ics23.CommitmentProof{Proof: &ics23.CommitmentProof_Batch{Batch: &batch}})
	pb, err := cp.Marshal()
	if err != nil {
		return &abci.ResponseQuery{Code: CodeInternal, Log: err.Error(), Height: at.height}
	}
	step, _ := json.Marshal(AppHashStep{Height: at.height, LogSize: at.log.size, LogRoot: at.log.root})
	return &abci.ResponseQuery{Code: CodeOK, Key: req.Data, Height: at.height, ProofOps: &cmtcrypto.ProofOps{Ops: []cmtcrypto.ProofOp{
		{Type: ProofOpIAVLWalk, Key: req.Data, Data: pb},
		{Type: ProofOpAppHash, Data: step},
	}}}
}

// walkEntry is one checked answer of a walk: the key it proves.
type walkEntry struct {
	key []byte
	p   *proven
}

// checkWalk checks a walk answer for (prefix, from) against s: every
// entry, decompressed, is checked as checkProven checks a single answer
// (against s.appHash, with the answer's app-hash step); the first must be
// from's, each one under prefix.
func checkWalk(code uint32, log string, rkey []byte, height int64, ops *cmtcrypto.ProofOps, prefix, from []byte, s *lightState) ([]walkEntry, error) {
	if code != CodeOK {
		return nil, fmt.Errorf("light client: proven walk from %q at height %d refused by the full node: %w", from, s.height, &TxError{Code: code, Msg: log})
	}
	if height != s.height {
		return nil, fmt.Errorf("light client: asked for a walk from %q at height %d, the full node answered at height %d", from, s.height, height)
	}
	if want := EncodeWalkRequest(prefix, from); !bytes.Equal(rkey, want) {
		return nil, fmt.Errorf("light client: asked for a walk from %q, the full node answered another walk", from)
	}
	if ops == nil || len(ops.Ops) != maxProofOps || ops.Ops[0].Type != ProofOpIAVLWalk || len(ops.Ops[0].Data) > maxWalkProofBytes {
		return nil, fmt.Errorf("light client: walk from %q at height %d: the answer carries no well-formed walk proof", from, s.height)
	}
	var cp ics23.CommitmentProof
	if err := cp.Unmarshal(ops.Ops[0].Data); err != nil {
		return nil, fmt.Errorf("light client: walk from %q: %s: %w", from, ProofOpIAVLWalk, err)
	}
	comp := cp.GetCompressed()
	if comp == nil {
		return nil, fmt.Errorf("light client: walk from %q: %s is not a compressed batch proof", from, ProofOpIAVLWalk)
	}
	if err := checkCompressed(comp); err != nil {
		return nil, fmt.Errorf("light client: walk from %q: %w", from, err)
	}
	batch := ics23.Decompress(&cp).GetBatch()
	var out []walkEntry
	for i, e := range batch.Entries {
		var single ics23.CommitmentProof
		var key, value []byte
		if ep := e.GetExist(); ep != nil {
			single.Proof = &ics23.CommitmentProof_Exist{Exist: ep}
			key, value = ep.Key, ep.Value
		} else {
			np := e.GetNonexist()
			single.Proof = &ics23.CommitmentProof_Nonexist{Nonexist: np}
			key = np.Key
		}
		if i == 0 && !bytes.Equal(key, from) {
			return nil, fmt.Errorf("light client: asked for a walk from %q, the full node's first proof is of %q", from, key)
		}
		if !bytes.HasPrefix(key, prefix) {
			return nil, fmt.Errorf("light client: walk under %q: the full node's proof %d is of %q", prefix, i, key)
		}
		raw, err := single.Marshal()
		if err != nil {
			return nil, fmt.Errorf("light client: walk from %q: entry %d: %w", from, i, err)
		}
		p, err := checkProven(CodeOK, "", key, value, height, &cmtcrypto.ProofOps{Ops: []cmtcrypto.ProofOp{
			{Type: ProofOpIAVL, Key: key, Data: raw}, ops.Ops[1]}}, key, s)
		if err != nil {
			return nil, fmt.Errorf("walk from %q, entry %d: %w", from, i, err)
		}
		out = append(out, walkEntry{key: key, p: p})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("light client: walk from %q: the answer proves no key", from)
	}
	return out, nil
}

// checkCompressed checks what ics23.Decompress takes on trust: the number
// of entries, each entry's kind and every path step's index into the
// lookup table.
func checkCompressed(c *ics23.CompressedBatchProof) error {
	if len(c.Entries) == 0 || len(c.Entries) > maxWalkEntries {
		return fmt.Errorf("%s of %d entries, want 1..%d", ProofOpIAVLWalk, len(c.Entries), maxWalkEntries)
	}
	steps := func(e *ics23.CompressedExistenceProof) error {
		if e == nil {
			return nil
		}
		for _, s := range e.Path {
			if s < 0 || int(s) >= len(c.LookupInners) {
				return fmt.Errorf("%s: path step %d outside the lookup table of %d", ProofOpIAVLWalk, s, len(c.LookupInners))
			}
		}
		return nil
	}
	for i, e := range c.Entries {
		if ex := e.GetExist(); ex != nil {
			if err := steps(ex); err != nil {
				return err
			}
			continue
		}
		ne := e.GetNonexist()
		if ne == nil {
			return fmt.Errorf("%s: entry %d is neither an existence nor a non-existence proof", ProofOpIAVLWalk, i)
		}
		if err := steps(ne.Left); err != nil {
			return err
		}
		if err := steps(ne.Right); err != nil {
			return err
		}
	}
	for i, op := range c.LookupInners {
		if op == nil {
			return fmt.Errorf("%s: lookup entry %d empty", ProofOpIAVLWalk, i)
		}
	}
	return nil
}

// errNoWalk marks a full node that does not answer walks (an older
// version): the light client walks key by key instead.
var errNoWalk = errors.New("the full node answers no proven walks")
