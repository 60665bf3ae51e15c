//go:build !production

package enclave_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tenzro/train/enclave"
)

// On a TEE without a local sealing primitive (TDX, Nitro; here a simulated
// one told to behave so), the syncer key is ephemeral: nothing is written
// and each start has a new DID.
func ExampleNewKeyCustody_ephemeral() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "custody")
	defer os.RemoveAll(dir)
	prov, err := enclave.NewSimulatedWith("tdx", dir, nil, enclave.SimulatedOptions{NoSealing: true})
	if err != nil {
		panic(err)
	}
	path := filepath.Join(dir, "syncer-key.sealed")
	a, err := enclave.NewKeyCustody(ctx, prov, path)
	if err != nil {
		panic(err)
	}
	b, _ := enclave.NewKeyCustody(ctx, prov, path)
	_, statErr := os.Stat(path)
	fmt.Println("sealed:", a.Sealed())
	fmt.Println("same DID after a restart:", a.DID() == b.DID())
	fmt.Println("sealed key written:", !os.IsNotExist(statErr))
	// Output:
	// sealed: false
	// same DID after a restart: false
	// sealed key written: false
}
