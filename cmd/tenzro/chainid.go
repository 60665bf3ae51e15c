package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// Every request and submission is signed for one chain (PROTOCOL §3): the
// CLI asks the node it talks to for that chain's id before it signs.

// nodeChainID is the chain id of the --rpc node (tenzro_node_info).
func nodeChainID(cmd *cobra.Command) (string, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	info, err := nodeClient(cmd).Info(ctx)
	if err != nil {
		return "", fmt.Errorf("ask the node for its chain id (tenzro_node_info): %w", err)
	}
	if info.ChainID == "" {
		return "", errors.New("the node did not say which chain it follows (tenzro_node_info has no chain_id): it is older than this CLI")
	}
	return info.ChainID, nil
}

// cometChainID is the chain id of the --node CometBFT endpoint.
func cometChainID(cmd *cobra.Command) (string, error) {
	c, err := chainClient(cmd)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return "", fmt.Errorf("ask the chain node for its chain id: %w", err)
	}
	return st.ChainID, nil
}
