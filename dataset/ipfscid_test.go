package dataset

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ipfs/go-cid"
)

// TestIpfsCidInterop: Debian's ipfs_cid (a Rust implementation nobody here
// wrote) and our importer with the classic layout compute the same CIDv0,
// and the same CIDv1 (ipfs_cid's CIDv1 names the same dag-pb root in CIDv1
// form). `make tools` installs it (apt-get install ipfs-cid).
func TestIpfsCidInterop(t *testing.T) {
	bin, err := exec.LookPath("ipfs_cid")
	if err != nil {
		t.Skip("ipfs_cid not installed: `make tools` (or apt-get install -y ipfs-cid) provides it")
	}
	rng := rand.New(rand.NewPCG(15, 15))
	for _, n := range []int{1, 100, 262144, 262145, 1_000_000, 3<<20 + 7} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		p := filepath.Join(t.TempDir(), "f.bin")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, p).Output()
		if err != nil {
			t.Fatalf("ipfs_cid %d bytes: %v", n, err)
		}
		var want struct{ CIDv0, CIDv1 string }
		if err := json.Unmarshal(out, &want); err != nil {
			t.Fatalf("ipfs_cid output %q: %v", out, err)
		}
		got, err := RootCID(context.Background(), p, KuboV0Layout)
		if err != nil {
			t.Fatal(err)
		}
		v1 := cid.NewCidV1(cid.DagProtobuf, got.Hash())
		if got.String() != want.CIDv0 || v1.String() != want.CIDv1 {
			t.Fatalf("%d bytes: ours %s / %s, ipfs_cid %s / %s", n, got, v1, want.CIDv0, want.CIDv1)
		}
	}
}
