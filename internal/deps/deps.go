//go:build tools

// Package deps pins, in go.mod, the modules that this round of work builds on
// before any package imports them: CometBFT (the replicated state, DESIGN §12),
// boxo (IPFS datasets), BLAKE3 (the bulk content hash) and goxmldsig (NVIDIA
// RIM signatures). The build tag keeps it out of every binary; `go mod tidy`
// still sees it, so the pinned versions stay put. Delete a line here once a real
// package imports that module.
package deps

import (
	_ "github.com/cometbft/cometbft/abci/types"
	_ "github.com/cometbft/cometbft/node"
	_ "github.com/ipfs/boxo/bitswap"
	_ "github.com/ipfs/boxo/blockservice"
	_ "github.com/ipfs/boxo/gateway"
	_ "github.com/ipfs/boxo/ipld/unixfs/importer"
	_ "lukechampine.com/blake3"
)
