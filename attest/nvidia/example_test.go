package nvidia_test

import (
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/tenzro/train/attest/nvidia"
	"github.com/tenzro/train/attest/verdict"
)

// Verify NVIDIA's sample Hopper report: parse, chain and signature, nonce,
// then collateral (here: none, so revocation is unknown and refuses).
func Example() {
	rawReport, _ := os.ReadFile("testdata/hopperAttestationReport.txt")
	rawChain, _ := os.ReadFile("testdata/hopperCertChain.txt")
	r, err := nvidia.Parse(rawReport)
	if err != nil {
		panic(err)
	}
	chain, err := nvidia.ParseChain(rawChain)
	if err != nil {
		panic(err)
	}
	at := time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC)
	var checks verdict.Checks
	verified, err := nvidia.Verify(r, chain, nvidia.VerifyOptions{Now: at}, &checks)
	if err != nil {
		panic(err)
	}
	nonce, _ := hex.DecodeString("931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb")
	_ = nvidia.ValidateNonce(r, nonce, &checks)
	err = nvidia.CheckCollateral(r, verified, nvidia.CollateralOptions{Now: at}, nvidia.ClaimsOf(r, verified), &checks)
	for _, c := range checks.List {
		fmt.Println(c.Name, c.OK, c.Unknown)
	}
	fmt.Println("refused by:", verdict.FailedCheck(err))
	// Output:
	// nvidia.chain true false
	// nvidia.fwid true false
	// nvidia.signature true false
	// nvidia.nonce true false
	// nvidia.revocation false true
	// nvidia.rim.driver false true
	// nvidia.rim.vbios false true
	// nvidia.measurements false true
	// refused by: nvidia.revocation
}
