//go:build faultinject && !production

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Fault injection for the challenge tests (build tag faultinject only: a
// production or default build has neither these flags nor a way to set
// syncer.Config.Fault).

func addFaultFlags(f *pflag.FlagSet) {
	f.String("fault-wrong-aggregate", "", "TEST BUILD ONLY: as syncer, commit a wrong aggregate hash for ROUND:FRAGMENT of every run")
	f.String("fault-wrong-score", "", "TEST BUILD ONLY: as syncer, commit an inverted pay verdict on the first scored input of ROUND:FRAGMENT of every scored run")
	f.String("fault-wrong-stale", "", "TEST BUILD ONLY: as syncer, name the first kept input of ROUND:FRAGMENT (ROUND ≥ 1) a replay of its trainer's round ROUND−1 input")
	f.String("fault-hold-state-writes", "", "TEST BUILD ONLY: hold every deferred blob write (a syncer's new weights and momentum) before it starts: create DIR/<hash>.held, then wait until a writer opens the fifo DIR/release (crash tests of the window between a commit and its durable write)")
	f.String("fault-withhold", "", "TEST BUILD ONLY: as syncer, withhold the payloads of ROUND:FRAGMENT once committed")
}

func faultFromFlags(fs *pflag.FlagSet) (*syncer.Fault, error) {
	var out *syncer.Fault
	for _, name := range []string{"fault-wrong-aggregate", "fault-withhold", "fault-wrong-score", "fault-wrong-stale"} {
		v, _ := fs.GetString(name)
		if v == "" {
			continue
		}
		at, err := parseFaultAt(v)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
		if out == nil {
			out = &syncer.Fault{}
		}
		switch name {
		case "fault-wrong-aggregate":
			out.WrongAggregate = at
		case "fault-wrong-score":
			out.WrongScore = at
		case "fault-wrong-stale":
			if at.Round == 0 {
				return nil, fmt.Errorf("--%s: round 0 has no earlier round to replay", name)
			}
			out.WrongStale = at
		default:
			out.Withhold = at
		}
	}
	return out, nil
}

func parseFaultAt(s string) (*syncer.FaultAt, error) {
	r, f, ok := strings.Cut(s, ":")
	round, err1 := strconv.ParseUint(r, 10, 64)
	frag, err2 := strconv.Atoi(f)
	if !ok || err1 != nil || err2 != nil || frag < 0 {
		return nil, fmt.Errorf("%q: want ROUND:FRAGMENT", s)
	}
	return &syncer.FaultAt{Round: round, Fragment: frag}, nil
}

// holdWritesFromFlags is --fault-hold-state-writes DIR: each deferred write
// announces itself with DIR/<hash>.held, then blocks opening the fifo
// DIR/release for reading (until a writer opens it; forever when the test
// kills the node instead).
func holdWritesFromFlags(fs *pflag.FlagSet) (func(wire.Hash), error) {
	dir, _ := fs.GetString("fault-hold-state-writes")
	if dir == "" {
		return nil, nil
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--fault-hold-state-writes %s: not a directory", dir)
	}
	return func(h wire.Hash) {
		if err := os.WriteFile(filepath.Join(dir, h.String()+".held"), nil, 0o644); err != nil {
			return
		}
		if f, err := os.OpenFile(filepath.Join(dir, "release"), os.O_RDONLY, 0); err == nil {
			f.Close()
		}
	}, nil
}
