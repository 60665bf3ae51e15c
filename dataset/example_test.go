package dataset_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tenzro/train/dataset"
)

// A CSV corpus's CID (the default layout: CIDv1, raw leaves, 1 MiB chunks)
// and the dataset_hash a task spec names with it.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "corpus.csv")
	_ = os.WriteFile(p, []byte("a,b\n1,2\n3,4\n"), 0o600)

	root, err := dataset.RootCID(context.Background(), p, dataset.DefaultLayout)
	if err != nil {
		panic(err)
	}
	h, err := dataset.CorpusHashCSV(strings.NewReader("a,b\n1,2\n3,4\n"))
	if err != nil {
		panic(err)
	}
	fmt.Println("dataset_ref: ipfs://" + root.String())
	fmt.Println("dataset_hash:", h)
	// Output:
	// dataset_ref: ipfs://bafkreifzjbiuqvdedgqpnkc6rvyizervk7av27z4pudy54p2p56a6v6vuu
	// dataset_hash: b79c2336fc624230ec67aef041cc33745efc1940fd5a547e741ad709c5c409f7
}
