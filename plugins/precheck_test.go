package plugins

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tetratelabs/wabin/binary"
	"github.com/tetratelabs/wabin/leb128"
	"github.com/tetratelabs/wabin/wasm"
)

func wsec(id byte, payload ...[]byte) []byte {
	var body []byte
	for _, p := range payload {
		body = append(body, p...)
	}
	return append(append([]byte{id}, leb128.EncodeUint32(uint32(len(body)))...), body...)
}

func wmod(sections ...[]byte) []byte {
	out := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		out = append(out, s...)
	}
	return out
}

func u(v uint32) []byte { return leb128.EncodeUint32(v) }

const huge = 0xFFFFFFF0

var (
	i32Zero = []byte{0x41, 0x00, 0x0b}
	// a valid type, function and body, for modules that need code
	oneFunc = [][]byte{wsec(1, u(1), []byte{0x60, 0, 0}), wsec(3, u(1), u(0))}
)

// manyLocals: f functions, each declaring MaxLocals locals in 7 bytes.
func manyLocals(f int) []byte {
	var funcs, bodies []byte
	for i := 0; i < f; i++ {
		funcs = append(funcs, 0)
		bodies = append(bodies, u(6)...)
		bodies = append(bodies, 1)
		bodies = append(bodies, u(MaxLocals)...)
		bodies = append(bodies, 0x7f, 0x0b)
	}
	return wmod(wsec(1, u(1), []byte{0x60, 0, 0}), wsec(3, u(uint32(f)), funcs), wsec(10, u(uint32(f)), bodies))
}

// hostileStructures are small modules whose nested counts would make the
// decoder allocate gigabytes, or which the re-encoder cannot write back
// (it panics). Each is also a FuzzInstrument seed (testdata/fuzz).
var hostileStructures = []struct {
	name, want string
	mod        []byte
}{
	{"type-params", "params", wmod(wsec(1, u(1), []byte{0x60}, u(huge)))},
	{"type-results", "results", wmod(wsec(1, u(1), []byte{0x60, 0}, u(huge)))},
	{"import-module-name", "import module", wmod(wsec(2, u(1), u(huge), []byte("env")))},
	{"import-name", "import name", wmod(wsec(2, u(1), u(3), []byte("env"), u(huge)))},
	{"export-name", "export name", wmod(wsec(7, u(1), u(huge), []byte("x")))},
	{"data-size", "data bytes", wmod(wsec(11, u(1), u(0), i32Zero, u(huge), []byte{1, 2, 3}))},
	{"passive-data-size", "data bytes", wmod(wsec(11, u(1), u(1), u(huge)))},
	{"element-vector", "function indices", wmod(wsec(9, u(1), u(0), i32Zero, u(huge), u(0)))},
	{"element-passive", "not supported", wmod(append(oneFunc, wsec(9, u(1), u(1), []byte{0}, u(1), u(0)), wsec(10, u(1), u(2), []byte{0, 0x0b}))...)},
	{"element-exprs-null", "not supported", wmod(wsec(4, u(1), []byte{0x70, 0}, u(1)), wsec(9, u(1), u(4), i32Zero, u(1), []byte{0xd0, 0x70, 0x0b}))},
	{"custom-name-length", "custom section name", wmod(wsec(0, u(huge), []byte("abc")))},
	{"name-functions", "function names", wmod(wsec(0, u(4), []byte("name"), []byte{1}, u(6), u(huge), []byte{0}))},
	{"name-locals", "locals", wmod(wsec(0, u(4), []byte("name"), []byte{2}, u(7), u(1), u(0), u(huge)))},
	{"name-subsection-size", "name subsection", wmod(wsec(0, u(4), []byte("name"), []byte{1}, u(huge)))},
	{"vector-count", "types", wmod(wsec(1, u(huge), []byte{0x60, 0, 0}))},
	{"locals", "locals", wmod(append(oneFunc, wsec(10, u(1), u(8), u(1), u(huge), []byte{0x7f, 0x0b}))...)},
	{"local-groups", "local groups", wmod(append(oneFunc, wsec(10, u(1), u(6), u(huge), []byte{0x0b}))...)},
	{"local-groups-many", "local groups", wmod(append(oneFunc, wsec(10, u(1), append(u(2+2*(MaxLocalGroups+1)+1), append(u(MaxLocalGroups+1), append(bytes.Repeat([]byte{1, 0x7f}, MaxLocalGroups+1), 0x0b)...)...)))...)},
	{"module-locals", "module declares", manyLocals(MaxModuleLocals/MaxLocals + 1)},
	{"br-table", "br_table", wmod(append(oneFunc, wsec(10, u(1), u(12), u(0), []byte{0x02, 0x40, 0x41, 0x00, 0x0e}, u(huge), []byte{0x0b}))...)},
	{"const-expr", "constant expression", wmod(wsec(6, u(1), []byte{0x7f, 0x00, 0x41, 0x00, 0x41, 0x00, 0x0b}))},
	{"section-leftover", "left over", wmod(wsec(3, u(1), u(0), u(0)))},
}

// TestPrecheckNestedCounts: every hostile structure is refused by the
// pre-check (br_table targets, inside function bodies, by the body decoder),
// and Instrument refuses it without allocating more than a few MiB.
func TestPrecheckNestedCounts(t *testing.T) {
	for _, c := range hostileStructures {
		t.Run(c.name, func(t *testing.T) {
			perr := precheck(c.mod)
			if perr != nil && !strings.Contains(perr.Error(), c.want) {
				t.Fatalf("precheck: %v, want an error naming %q", perr, c.want)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Instrument(c.mod, DefaultCostTable)
			if err == nil || (perr == nil && !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Instrument: %v, want an error naming %q", err, c.want)
			}
			runtime.ReadMemStats(&after)
			if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
				t.Fatalf("Instrument allocated %d bytes on a %d-byte module", d, len(c.mod))
			}
		})
	}
	// The built-ins and a module with a name section still pass.
	named := wmod(append(oneFunc, wsec(10, u(1), u(2), []byte{0, 0x0b}),
		wsec(0, u(4), []byte("name"), []byte{0}, u(2), u(1), []byte("m"), []byte{1}, u(4), u(1), u(0), u(1), []byte("f"),
			[]byte{2}, u(3), u(1), u(0), u(0)))...)
	if err := precheck(named); err != nil {
		t.Fatalf("a well-formed name section: %v", err)
	}
	if _, err := binary.DecodeModule(named, wasm.CoreFeaturesV2); err != nil {
		t.Fatalf("the well-formed module does not decode: %v", err)
	}
}

// TestEncoderHazards documents why precheck refuses non-active element
// segments: wabin decodes them, then panics re-encoding them.
func TestEncoderHazards(t *testing.T) {
	for _, name := range []string{"element-passive", "element-exprs-null"} {
		for _, c := range hostileStructures {
			if c.name != name {
				continue
			}
			m, err := binary.DecodeModule(c.mod, wasm.CoreFeaturesV2)
			if err != nil {
				t.Fatalf("%s: wabin refuses it itself now (%v): the precheck rule may be relaxed", name, err)
			}
			panicked := func() (p bool) {
				defer func() { p = recover() != nil }()
				binary.EncodeModule(m)
				return false
			}()
			if !panicked {
				t.Fatalf("%s: wabin re-encodes it now: the precheck rule may be relaxed", name)
			}
		}
	}
}

// TestWriteFuzzSeeds keeps testdata/fuzz/FuzzInstrument in step with
// hostileStructures (TENZRO_WRITE_SEEDS=1 rewrites them).
func TestWriteFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzInstrument")
	for _, c := range hostileStructures {
		path := filepath.Join(dir, "hostile-"+c.name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", c.mod)
		if os.Getenv("TENZRO_WRITE_SEEDS") == "1" {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil || string(have) != want {
			t.Errorf("%s is missing or stale (run with TENZRO_WRITE_SEEDS=1)", path)
		}
	}
}
