package audit

import (
	"bytes"
	"encoding/json"
	"math/big"

	"github.com/gowebpki/jcs"
	"github.com/tenzro/train/wire"
)

// RoundCommitHash is SHA-256(Str(DomainRoundCommit) ‖ Bytes(JCS(commit JSON)))
// (CanonicalRoundCommit gives the JCS bytes).
func RoundCommitHash(rc *wire.RoundCommit) (wire.Hash, error) {
	canon, err := CanonicalRoundCommit(rc)
	if err != nil {
		return wire.Hash{}, err
	}
	return wire.NewCanon(wire.DomainRoundCommit).Bytes(canon).Sum(), nil
}

// ChallengeList is a receipt's challenge list blob (the JCS array of the
// entries, in order), its content hash and what the challenges added to the
// escrow.
func ChallengeList(entries []wire.ReceiptChallenge) ([]byte, wire.Hash, *big.Int, error) {
	if entries == nil {
		entries = []wire.ReceiptChallenge{}
	}
	var buf bytes.Buffer
	buf.WriteByte('[')
	sum := new(big.Int)
	for i := range entries {
		raw, err := json.Marshal(&entries[i])
		if err != nil {
			return nil, wire.Hash{}, nil, err
		}
		canon, err := jcs.Transform(raw)
		if err != nil {
			return nil, wire.Hash{}, nil, err
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(canon)
		sum.Add(sum, bigOf(entries[i].ToEscrow))
	}
	buf.WriteByte(']')
	return buf.Bytes(), BlobHash(buf.Bytes()), sum, nil
}

func orHashes(v []wire.Hash) []wire.Hash {
	if v == nil {
		return []wire.Hash{}
	}
	return v
}

func bigOf(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return new(big.Int)
	}
	return v
}
