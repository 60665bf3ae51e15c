package csvcorpus

import (
	"strings"
	"testing"
)

// TestParse: columns become series (empty cells skipped, Python's float
// syntax), and bad cells are refused with the line and column.
func TestParse(t *testing.T) {
	c, err := Parse(strings.NewReader("a, b\n1,2.5\n1_000,\n-3e-1,4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Names, ",") != "a,b" || len(c.Series[0]) != 3 || len(c.Series[1]) != 2 ||
		c.Series[0][1] != 1000 || c.Series[0][2] != -0.3 || c.Series[1][1] != 4 || c.Hash.IsZero() {
		t.Fatalf("%+v", c)
	}
	for in, want := range map[string]string{
		"":           "header row",
		"a\nx\n":     `line 2: column "a"`,
		"a\n0x1p3\n": "is not a number",
		"a\ninf\n":   "non-finite",
		"a\n1,2\n":   "2 cells, header has 1",
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
