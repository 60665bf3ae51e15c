package runroot_test

import (
	"fmt"

	"github.com/tenzro/train/syncer/runroot"
	"github.com/tenzro/train/wire"
)

func Example() {
	spec := wire.SHA256([]byte("spec"))
	round0 := wire.SHA256([]byte("round 0 commit"))
	final := wire.SHA256([]byte("final model"))
	leaves := [][]byte{spec[:], round0[:], final[:]}

	root := runroot.Root(leaves)
	path, err := runroot.InclusionProof(leaves, 1)
	if err != nil {
		panic(err)
	}
	// An auditor holding only the round commit, its index, the tree size,
	// the path and the root:
	fmt.Println(runroot.VerifyInclusion(round0[:], 1, 3, path, root) == nil, len(path))
	// Output: true 2
}
