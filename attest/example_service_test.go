package attest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tenzro/train/attest"
	"github.com/tenzro/train/wire"
)

// mapStore is an in-memory EvidenceStore for the example (the node uses
// attest.KVEvidence on its database).
type mapStore map[wire.Hash]*attest.EvidenceRecord

func (m mapStore) PutEvidence(_ context.Context, d wire.Hash, r *attest.EvidenceRecord) error {
	m[d] = r
	return nil
}

func (m mapStore) GetEvidence(_ context.Context, d wire.Hash) (*attest.EvidenceRecord, error) {
	return m[d], nil
}

func ExampleService() {
	ctx := context.Background()
	s := attest.NewService(attest.NewNonceStore(nil, time.Minute, nil), mapStore{}, nil)
	nonce, _ := s.Nonce(ctx, "task-1", "did:tenzro:machine:example")
	d, _ := s.SubmitEvidence(ctx, "task-1", "did:tenzro:machine:example", []byte(`{"vendor":"snp","evidence":"AAEC"}`))
	env, _ := s.GetEvidence(ctx, d)
	fmt.Println(len(nonce), string(env))
	// Output: 32 {"vendor":"snp","evidence":"AAEC"}
}
