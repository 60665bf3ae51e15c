package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/tenzro/train/rpc/client"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// blobFile is a local file sent to the node as a blob: by reference when
// the node serves PUT /blobs (streamed from disk, never held in memory),
// inline (base64 in the JSON-RPC request) against a node that does not.
type blobFile struct {
	flag, path string
	hash       wire.Hash
	size       int64
}

// hashBlobFile hashes a file given with --flag, refusing files above limit.
func hashBlobFile(flag, path string, limit int64) (*blobFile, error) {
	if path == "" {
		return nil, usagef("--%s is required", flag)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	h, n, err := client.HashFile(path, limit)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
	}
	return &blobFile{flag: flag, path: path, hash: h, size: n}, nil
}

// send uploads the file with an upload intent signed by key for the run
// task ("" before the run exists); inline is nil when the node now holds it
// by hash, else the file's bytes for the inline form (a node without
// /blobs, or one that does not fund uploads from key).
func (b *blobFile) send(ctx context.Context, c *client.Client, key *did.Key, task string) (inline []byte, err error) {
	_, err = c.PutBlobFile(ctx, b.path, b.hash, b.size, client.BlobSigner{Key: key, Task: task})
	if err == nil {
		return nil, nil
	}
	if !client.UploadRefused(err) {
		return nil, fmt.Errorf("--%s %s: %w", b.flag, b.path, err)
	}
	raw, err := readInputFile(b.flag, b.path, b.size)
	if err != nil {
		return nil, err
	}
	if wire.ContentHash(raw) != b.hash {
		return nil, fmt.Errorf("--%s %s changed while it was being sent", b.flag, b.path)
	}
	return raw, nil
}

// getWeightsFile writes a fragment's current weights to path: streamed raw
// from GET /blobs/<weights_hash> (the hash from getRun) when the node holds
// the weights as a blob, else from tenzro_training_getWeights. The
// returned Weights has no Payload.
func getWeightsFile(ctx context.Context, c *client.Client, task string, fragment uint64, path string) (*wire.Weights, int64, error) {
	run, err := c.GetRun(ctx, task)
	if err == nil && fragment < uint64(len(run.Fragments)) && !run.Fragments[fragment].WeightsHash.IsZero() {
		h := run.Fragments[fragment].WeightsHash
		n, err := c.GetBlobFile(ctx, h, path, maxPayloadFile)
		if err == nil {
			return &wire.Weights{TaskID: task, Round: run.Round, FragmentIndex: fragment, WeightsHash: h}, n, nil
		}
		var e *client.Error
		if !errors.Is(err, client.ErrNoBlobEndpoint) && !(errors.As(err, &e) && e.HTTPStatus == 404) {
			return nil, 0, err
		}
	}
	w, err := c.GetWeights(ctx, wire.GetWeightsParams{TaskID: task, FragmentIndex: fragment})
	if err != nil {
		return nil, 0, err
	}
	if err := os.WriteFile(path, w.Payload, 0o644); err != nil {
		return nil, 0, fmt.Errorf("--out: %w", err)
	}
	n := int64(len(w.Payload))
	w.Payload = nil
	return w, n, nil
}
