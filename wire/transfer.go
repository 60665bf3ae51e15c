package wire

// MethodTransfer is tenzro_ledger_transfer: a signed transfer between two
// accounts. It exists on the replicated chain (chain/), where funds come only
// from genesis allocations and move by signed transfers.
const MethodTransfer = "tenzro_ledger_transfer"

// TransferParams is tenzro_ledger_transfer: From sends Amount (decimal
// attoTNZO) to To. Signed by From with method fields Str(to) ‖ Str(amount).
type TransferParams struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Amount string `json:"amount"`
	Signed
}

// Preimage is the signing preimage (PROTOCOL §3).
func (p *TransferParams) Preimage() []byte {
	return RequestPreimage(p.ChainID, MethodTransfer, p.From, p.Nonce, func(c *Canon) { c.Str(p.To).Str(p.Amount) })
}
