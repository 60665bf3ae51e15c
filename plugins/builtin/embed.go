// Package builtin holds the built-in plugins — rules, codecs and the
// evaluators of the TimesFM-class, Granite-TTM and Chronos-Bolt families
// (timesfmscore.c, granitettmscore.c, chronosboltscore.c) —: C sources under
// src/, built reproducibly by build.sh into the committed .wasm files embedded here.
package builtin

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed wasm/*.wasm
var modules embed.FS

// Names lists the embedded modules by file stem (e.g. "krum"), sorted.
func Names() []string {
	ents, _ := fs.ReadDir(modules, "wasm")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".wasm"))
	}
	sort.Strings(out)
	return out
}

// Module returns the bytes of an embedded module by file stem.
func Module(stem string) ([]byte, error) { return modules.ReadFile("wasm/" + stem + ".wasm") }
