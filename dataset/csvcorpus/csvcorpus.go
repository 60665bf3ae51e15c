package csvcorpus

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

// MaxBytes bounds a CSV corpus (the trainer's MAX_CSV_BYTES).
const MaxBytes = 256 << 20

// Domain is the corpus hash's domain tag.
const Domain = "tenzro/train/dataset/v1"

// Corpus is a parsed CSV corpus: its series in column order (the values as
// float64, empty cells skipped) and its dataset_hash.
type Corpus struct {
	Names  []string
	Series [][]float64
	Hash   wire.Hash
}

// Parse parses a CSV corpus as CorpusHashCSV does and returns its
// series with its hash (the evaluator's windows come from them).
func Parse(r io.Reader) (*Corpus, error) {
	lr := &io.LimitedReader{R: r, N: MaxBytes + 1}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF || (err == nil && len(header) == 0) {
		return nil, errors.New("corpus: want a header row naming the series")
	}
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
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
			return nil, fmt.Errorf("corpus: %w", err)
		}
		if len(row) > len(names) {
			return nil, fmt.Errorf("corpus: line %d: %d cells, header has %d", ln, len(row), len(names))
		}
		for j, cell := range row {
			s := strings.TrimSpace(cell)
			if s == "" {
				continue
			}
			x, err := parsePyFloat(s)
			if err != nil {
				return nil, fmt.Errorf("corpus: line %d: column %q: %q is not a number", ln, names[j], cell)
			}
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return nil, fmt.Errorf("corpus: line %d: column %q: non-finite value", ln, names[j])
			}
			cols[j] = binary.LittleEndian.AppendUint64(cols[j], math.Float64bits(x))
		}
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("corpus: larger than %d bytes", MaxBytes)
	}
	c := wire.NewCanon(Domain).U64(uint64(len(names)))
	for i, n := range names {
		c.Str(n).Bytes(cols[i])
	}
	out := &Corpus{Names: names, Series: make([][]float64, len(cols)), Hash: c.Sum()}
	for i, col := range cols {
		v := make([]float64, len(col)/8)
		for k := range v {
			v[k] = math.Float64frombits(binary.LittleEndian.Uint64(col[8*k:]))
		}
		out.Series[i] = v
	}
	return out, nil
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
