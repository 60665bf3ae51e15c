package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var txSeeds = []string{
	`{"type":"tenzro_ledger_transfer","params":{"from":"did:a","to":"did:b","amount":"1","nonce":1,"signature":"00"}}`,
	`{"type":"tenzro_ledger_faucet","params":{"did":"did:a","amount":"5","salt":7}}`,
	`{"type":"tenzro_training_postTask","params":{"spec":{"task_id":"t"},"init_weights_hash":"` + strings.Repeat("00", 32) + `","rule":{"name":"Mean","hash":"` + strings.Repeat("11", 32) + `","params":{}},"verifiers":[],"outer":{"name":"Nesterov","hash":"` + strings.Repeat("22", 32) + `","params":{}},"nonce":2,"signature":"00"}}`,
	`{"type":"tenzro_training_submitOuterGradient","params":{"task_id":"t","trainer_did":"did:a","round":0,"fragment_index":1,"payload_hash":"` + strings.Repeat("33", 32) + `","payload_size":4,"signature":"00","metrics":{"train_loss":0.5}}}`,
	`{"type":"tenzro_training_commitFragment","params":{"task_id":"t","round":0,"fragment":0,"commit":{"fragment":0,"status":"no_quorum","inputs":[],"rule":"Mean","rule_hash":"` + strings.Repeat("11", 32) + `","rule_params":{},"outer_hash":"` + strings.Repeat("22", 32) + `","aggregate_hash":"` + strings.Repeat("00", 32) + `","weights_before":"` + strings.Repeat("44", 32) + `","weights_after":"` + strings.Repeat("44", 32) + `","momentum_after":"` + strings.Repeat("00", 32) + `","fuel":0},"verdicts":[],"syncer_did":"did:s","nonce":3,"signature":"00"}}`,
	`{"type":"tenzro_training_signReceipt","params":{"task_id":"t","syncer_did":"did:s","engine":{},"signature":"00"}}`,
	`{"type":"tenzro_training_challenge","params":{"task_id":"t","round":2,"fragment":1,"challenger_did":"did:a","result_hash":"` + strings.Repeat("55", 32) + `","bond":"100","nonce":4,"signature":"00"}}`,
	`{"type":"tenzro_training_challengeVote","params":{"challenge":"` + strings.Repeat("66", 32) + `","result_hash":"` + strings.Repeat("00", 32) + `","unavailable":true,"validator":"` + strings.Repeat("77", 20) + `","signature":"00"}}`,
	`{"type":"tenzro_ledger_transfer","params":null}`,
}

// FuzzDecodeTx: the decoder never panics, refuses what it cannot decode
// with ErrDecode, and what it accepts re-encodes to a transaction that
// decodes to the same type and params.
func FuzzDecodeTx(f *testing.F) {
	for _, s := range txSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, err := DecodeTx(b)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("decode error without ErrDecode: %v", err)
			}
			return
		}
		re, err := EncodeTx(tx.Type, tx.Params())
		if err != nil {
			return // e.g. raw JSON members that do not re-encode compactly within the size cap
		}
		tx2, err := DecodeTx(re)
		if err != nil || tx2.Type != tx.Type {
			t.Fatalf("re-encoded %s does not decode: %v", tx.Type, err)
		}
		a, _ := json.Marshal(tx.Params())
		b2, _ := json.Marshal(tx2.Params())
		if string(a) != string(b2) {
			t.Fatalf("%s: params changed through a round trip:\n%s\n%s", tx.Type, a, b2)
		}
	})
}

func TestDecodeTxRefuses(t *testing.T) {
	big := `{"type":"tenzro_ledger_faucet","params":{"did":"` + strings.Repeat("x", MaxTxBytes) + `","amount":"1","salt":1}}`
	for name, in := range map[string]string{
		"empty":            "",
		"too large":        big,
		"unknown type":     `{"type":"tenzro_mint","params":{}}`,
		"no params":        `{"type":"tenzro_ledger_faucet"}`,
		"null params":      `{"type":"tenzro_ledger_faucet","params":null}`,
		"unknown member":   `{"type":"tenzro_ledger_faucet","params":{"did":"a","amount":"1","salt":1,"x":1}}`,
		"duplicate member": `{"type":"tenzro_ledger_faucet","params":{"did":"a","did":"b","amount":"1","salt":1}}`,
		"trailing data":    `{"type":"tenzro_ledger_faucet","params":{"did":"a","amount":"1","salt":1}} {}`,
		"envelope member":  `{"type":"tenzro_ledger_faucet","params":{"did":"a","amount":"1","salt":1},"x":1}`,
	} {
		if _, err := DecodeTx([]byte(in)); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for i, s := range txSeeds[:len(txSeeds)-1] {
		if _, err := DecodeTx([]byte(s)); err != nil {
			t.Errorf("seed %d: %v", i, err)
		}
	}
}
