// Package dataset owns the node's IPFS side: datasets stored as UnixFS DAGs
// in the node's Pebble store (through store.Blocks), published and fetched
// over bitswap on the node's libp2p host, served by an IPFS path gateway
// (boxo's gateway package) and a small HTTP API on the node's HTTP port.
//
// Every block that enters the store is checked against its CID; a dataset
// counts as held (pinned) only once its whole DAG has been walked within the
// limits (size, depth, links per node, blocks) and its record has been
// written. A refused import or fetch deletes the blocks it wrote.
//
// It also holds the layout options of `tenzro dataset add` (chunker, CID
// version, raw leaves), the CARv1 stream the CLI uploads, and the canonical
// corpus hash of a CSV dataset (the spec's dataset_hash), which the Python
// trainer computes identically (testdata/corpus_vectors.json).
package dataset
