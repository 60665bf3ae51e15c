package dataset

import (
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tenzro/train/wire"
)

// MaxCorpusBytes bounds a CSV corpus (the trainer's MAX_CSV_BYTES).
const MaxCorpusBytes = 256 << 20

// DomainDataset is the corpus hash's domain tag.
const DomainDataset = "tenzro/train/dataset/v1"

// CorpusHashCSV is the spec's dataset_hash of a CSV corpus, computed exactly
// as the reference trainer does (trainer/src/tenzro_trainer/data.py): a
// header row names the series, one series per column, empty cells skipped,
// every other cell a finite decimal number; then
//
//	SHA-256( Str("tenzro/train/dataset/v1") ‖ U64(series) ‖
//	         for each series: Str(name) ‖ Bytes(values as float64 LE) )
//
// with PROTOCOL §1's length-prefixed fields.
func CorpusHashCSV(r io.Reader) (wire.Hash, error) {
	lr := &io.LimitedReader{R: r, N: MaxCorpusBytes + 1}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF || (err == nil && len(header) == 0) {
		return wire.Hash{}, errors.New("corpus: want a header row naming the series")
	}
	if err != nil {
		return wire.Hash{}, fmt.Errorf("corpus: %w", err)
	}
	names := make([]string, len(header))
	for i, n := range header {
		names[i] = strings.TrimSpace(n)
	}
	cols := make([][]byte, len(names))
	for ln := 2; ; ln++ {
		row, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return wire.Hash{}, fmt.Errorf("corpus: %w", err)
		}
		if len(row) > len(names) {
			return wire.Hash{}, fmt.Errorf("corpus: line %d: %d cells, header has %d", ln, len(row), len(names))
		}
		for j, cell := range row {
			s := strings.TrimSpace(cell)
			if s == "" {
				continue
			}
			x, err := parsePyFloat(s)
			if err != nil {
				return wire.Hash{}, fmt.Errorf("corpus: line %d: column %q: %q is not a number", ln, names[j], cell)
			}
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return wire.Hash{}, fmt.Errorf("corpus: line %d: column %q: non-finite value", ln, names[j])
			}
			cols[j] = binary.LittleEndian.AppendUint64(cols[j], math.Float64bits(x))
		}
	}
	if lr.N <= 0 {
		return wire.Hash{}, fmt.Errorf("corpus: larger than %d bytes", MaxCorpusBytes)
	}
	c := wire.NewCanon(DomainDataset).U64(uint64(len(names)))
	for i, n := range names {
		c.Str(n).Bytes(cols[i])
	}
	return c.Sum(), nil
}

// parsePyFloat parses a decimal number as Python's float() does: an optional
// sign, digits with single underscores between them, an optional fraction and
// exponent, or inf/nan; never Go's hexadecimal forms.
func parsePyFloat(s string) (float64, error) {
	if strings.ContainsAny(s, "xXpP") {
		return 0, errors.New("not decimal")
	}
	if strings.Contains(s, "_") {
		b := []byte(s)
		for i, ch := range b {
			if ch == '_' && (i == 0 || i == len(b)-1 || !isDigit(b[i-1]) || !isDigit(b[i+1])) {
				return 0, errors.New("misplaced underscore")
			}
		}
		s = strings.ReplaceAll(s, "_", "")
	}
	return strconv.ParseFloat(s, 64)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
