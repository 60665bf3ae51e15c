// Package store is the node's persistent storage: one Pebble database per
// node, implementing syncer.KV.
//
// It owns the on-disk layout and nothing else:
//
//   - every syncer.Keyspace maps to a one-byte key prefix (see keyspacePrefix;
//     the numbers are part of the on-disk format and never change within a
//     FormatVersion), prefix 0x00 is reserved for the store's own metadata;
//   - a meta key written when the database is created records FormatVersion;
//     opening a database of another version, or a Pebble directory that is not
//     a Tenzro store, fails with a *FormatError or ErrNotStore;
//   - Commit writes a whole syncer.Batch as one Pebble batch with
//     pebble.Sync, so a state transition is either fully on disk or absent,
//     even after a crash or power loss;
//   - keys and values are bounded (MaxKeySize, MaxValueSize, MaxBatchSize).
//
// No Pebble type appears in the exported API; callers see only syncer.KV
// plus Open, OpenInMemory and Close.
//
// Bulk bytes (payloads, initial weights files, evidence) are not Pebble
// values: Blobs (blobs.go) keeps them as content-addressed files under
// <data-dir>/blobs, written through a hasher to a temporary file, fsynced and
// renamed, read back with ReadAt or mmap. It implements syncer.Blobs.
package store
