// Package audit is what an auditor needs to check a run's receipt without a
// node: the receipt's canonical forms (BuildReceipt, ReceiptPreimage,
// CanonicalRoundCommit, RunRoot, ChallengeList), the offline checks
// (CheckReceipt, CheckReceiptFull, CheckSettlement, CheckChallenges,
// CheckAttestations, InclusionProof) and the check against a chain's
// committed state through a RunAnchor (CheckReceiptAgainst).
//
// It depends only on wire, wire/did, crypto and the leaf packages
// syncer/runroot, syncer/vrf and syncer/election: `tenzro receipt verify`
// and replay link nothing of the node, the chain or the plugin host through
// it. The machine imports it to build the receipt it seals.
package audit
