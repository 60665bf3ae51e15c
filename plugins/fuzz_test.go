package plugins

import (
	"testing"

	"github.com/tenzro/train/plugins/abi"
	"github.com/tenzro/train/plugins/builtin"
)

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"Mean", "TrimmedMean{alpha_bps=2500}", "MultiKrum{f=1, m=3}", "sha256:" + string(make([]byte, 64)), "X{a=1e5,b=true}", "{}", "A{=}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err == nil && r.Name == "" && !r.ByHash {
			t.Fatal("accepted a reference without a name or hash")
		}
	})
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(testManifest))
	f.Add([]byte(`{"abi":1,"id":"K","version":"1.0.0","kind":"aggregate","dtypes":["F32"],"params":[{"name":"f","type":"int","min":0,"max":3}],"min_k":{"param":"f","mul":2,"add":3}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = abi.ParseManifest(b)
	})
}

// FuzzInstrument feeds arbitrary bytes (seeded with the built-ins) to the
// instrumenter: it must refuse or produce a module, never panic.
func FuzzInstrument(f *testing.F) {
	for _, stem := range builtin.Names() {
		m, _ := builtin.Module(stem)
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<20 {
			return
		}
		_, _ = Instrument(b, DefaultCostTable)
		_, _, _ = abi.FindCustomSection(b, abi.ManifestSection)
	})
}
