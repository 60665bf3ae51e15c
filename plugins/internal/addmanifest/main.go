// Command addmanifest appends a plugin manifest (JSON, canonicalised with
// RFC 8785) as the "tenzro.manifest" custom section of a Wasm module.
//
//	addmanifest IN.wasm MANIFEST.json OUT.wasm
package main

import (
	"fmt"
	"os"

	"github.com/tenzro/train/plugins/abi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "addmanifest:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: addmanifest IN.wasm MANIFEST.json OUT.wasm")
	}
	mod, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	man, err := os.ReadFile(args[1])
	if err != nil {
		return err
	}
	out, err := abi.AppendManifest(mod, man)
	if err != nil {
		return fmt.Errorf("%s: %w", args[1], err)
	}
	return os.WriteFile(args[2], out, 0o644)
}
