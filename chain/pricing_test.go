package chain

import (
	"math/big"
	"testing"

	"github.com/tenzro/train/machine"
	"github.com/tenzro/train/wire"
	"github.com/tenzro/train/wire/did"
)

// TestPricingFigures measures what block space costs at the default
// parameters with real encoded transactions (bench/results/pricing.md):
// transfers of a funded key until 1 MB, and the largest transactions the
// caps allow. It fails if a MB costs less than its bytes' share.
func TestPricingFigures(t *testing.T) {
	a, b := testKey(t, did.KindHuman, 1), testKey(t, did.KindHuman, 2)
	p := machine.DefaultParams()
	fee := func(tx []byte) *big.Int {
		d, err := wire.DecodeTx(tx)
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.TxFee(d.Type, len(tx))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	total, bytes := new(big.Int), 0
	n := 0
	for ; bytes < 1<<20; n++ {
		tx := must(TransferTx(ManualChainID, a, b.DID.String(), "1000000000000000000", uint64(1761350400000000000+n)))
		total.Add(total, fee(tx))
		bytes += len(tx)
	}
	perMB := new(big.Int).Div(new(big.Int).Mul(total, big.NewInt(1<<20)), big.NewInt(int64(bytes)))
	one := must(TransferTx(ManualChainID, a, b.DID.String(), "1000000000000000000", 1761350400000000000))
	t.Logf("transfer: %d bytes, fee %s attoTNZO", len(one), fee(one))
	t.Logf("1 MiB of transfers: %d transactions, fees %s attoTNZO (%s per MiB)", n, total, perMB)
	if floor := new(big.Int).Mul(machine.DefaultTxFeeByte, big.NewInt(1<<20)); perMB.Cmp(floor) < 0 {
		t.Fatalf("a MiB costs %s, less than its bytes (%s)", perMB, floor)
	}
	// Re-execution: the bond floor per payload byte each validator decodes.
	bond := machine.ReexecBond(machine.DefaultReexecBondByte, 4, 32<<20, "F32") // 4 inputs of 128 MiB
	t.Logf("challenge of a fragment with K=4 inputs of 128 MiB: bond floor %s attoTNZO", bond)
}
