package dataset

import (
	"io"

	"github.com/tenzro/train/dataset/csvcorpus"
	"github.com/tenzro/train/wire"
)

// MaxCorpusBytes bounds a CSV corpus (the trainer's MAX_CSV_BYTES).
const MaxCorpusBytes = csvcorpus.MaxBytes

// DomainDataset is the corpus hash's domain tag.
const DomainDataset = csvcorpus.Domain

// CorpusHashCSV is the spec's dataset_hash of a CSV corpus, computed exactly
// as the reference trainer does (trainer/src/tenzro_trainer/data.py): a
// header row names the series, one series per column, empty cells skipped,
// every other cell a finite decimal number; then
//
//	SHA-256( Str("tenzro/train/dataset/v1") ‖ U64(series) ‖
//	         for each series: Str(name) ‖ Bytes(values as float64 LE) )
//
// with PROTOCOL §1's length-prefixed fields (csvcorpus.Parse).
func CorpusHashCSV(r io.Reader) (wire.Hash, error) {
	c, err := csvcorpus.Parse(r)
	if err != nil {
		return wire.Hash{}, err
	}
	return c.Hash, nil
}
