// Package gossip is the node's peer-to-peer layer (DESIGN §7): a libp2p host
// running gossipsub on two topics and a stream protocol for payloads.
//
//   - TopicTraining ("tenzro/training/1.0.0") carries SubmissionAnnouncement
//     and FragmentAnnouncement; TopicSyncer ("tenzro/training/syncer/1.0.0")
//     carries SyncerStatus. Messages are small strict JSON (MaxMessageSize).
//   - Topic validators decode, check shape and verify the DID signature of
//     every message before it is delivered or forwarded; invalid messages are
//     rejected and counted (Stats).
//   - Payloads (outer gradients, fragment weights) never ride on gossip: they
//     move by content hash (wire.ContentHash, BLAKE3-256) over BlobProtocol
//     ("/tenzro/blob/2.0.0": ranges, so a broken transfer resumes; served
//     from and fetched into the node's blob store), and the fetcher checks the
//     size limit and the hash.
//   - Forwarder and Receiver let a trainer's light-client node forward its
//     submissions to the syncer's node; RequestNonce asks the syncer's node
//     for a trainer's attestation nonce over NonceProtocol
//     ("/tenzro/attest-nonce/1.0.0", strict size-capped JSON request and
//     response), served where Handlers.Nonce is set.
//   - A node's own messages are flood-published: sent to every peer it knows
//     to be subscribed (TopicPeers), not only to its gossipsub mesh
//     (MeshPeers), which is empty until the first heartbeat after peers
//     subscribe. Messages of other nodes are forwarded over the mesh and by
//     gossip; one forwarded in the moment before a peer joins the mesh can
//     miss that peer. Delivery is best effort either way.
//
// The package holds no business rules: whether a submission is acceptable or
// a status comes from the elected syncer is decided by the handlers the node
// wires in. The wire format is specified in docs/protocol/gossip.md.
package gossip
