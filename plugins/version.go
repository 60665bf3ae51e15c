package plugins

import (
	"runtime/debug"
)

// wazeroModule is the module path whose version the engine profile names.
const wazeroModule = "github.com/tetratelabs/wazero"

// wazeroPinned is the version go.mod pins. It is used only when the binary
// carries no build information (TestWazeroVersionMatchesGoMod keeps it equal
// to go.mod, so the two sources can never disagree silently).
const wazeroPinned = "v1.12.0"

// WazeroVersion is the wazero version linked into this binary, read from its
// build information (go.mod's pin, or a replace directive's target): receipts
// commit to it through the engine profile, so it must name the code that ran.
var WazeroVersion = linkedVersion(wazeroModule, wazeroPinned)

// linkedVersion returns the version of module path linked into the running
// binary, or fallback when the binary has no build information.
func linkedVersion(path, fallback string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fallback
	}
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		return d.Version
	}
	return fallback
}
