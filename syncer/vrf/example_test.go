package vrf_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"

	"github.com/tenzro/train/syncer/vrf"
)

func Example() {
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	sk := ed25519.NewKeyFromSeed(seed)
	pi, err := vrf.Prove(sk, nil)
	if err != nil {
		panic(err)
	}
	beta, err := vrf.Verify(sk.Public().(ed25519.PublicKey), pi, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(hex.EncodeToString(pi[:16]))
	fmt.Println(hex.EncodeToString(beta[:16]))
	// Output:
	// 8657106690b5526245a92b003bb079cc
	// 90cf1df3b703cce59e2a35b925d41116
}
