package gossip_test

import (
	"context"
	"crypto/ed25519"
	"fmt"

	"github.com/tenzro/train/rpc/gossip"
	"github.com/tenzro/train/wire"
)

// A syncer's node receives submissions that a trainer's light node forwards.
func Example_forwarding() {
	ctx := context.Background()
	_, syncerKey, _ := ed25519.GenerateKey(nil)
	syncerNode, err := gossip.New(ctx, gossip.Config{Identity: syncerKey}, gossip.Handlers{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer syncerNode.Close()
	recv, _ := syncerNode.NewReceiver(func(ctx context.Context, g *wire.OuterGradient) error {
		fmt.Println("submit", g.TaskID, g.Round, g.FragmentIndex)
		return nil // the node's submitOuterGradient path goes here
	}, gossip.ReceiverOptions{})
	defer recv.Close()

	_, lightKey, _ := ed25519.GenerateKey(nil)
	light, err := gossip.New(ctx, gossip.Config{Identity: lightKey, BootNodes: syncerNode.Addrs()}, gossip.Handlers{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer light.Close()
	var g *wire.OuterGradient // signed by the trainer
	if g != nil {
		_, _ = gossip.NewForwarder(light).Forward(ctx, g)
	}
}
