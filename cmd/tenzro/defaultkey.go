package main

import (
	"errors"
	"fmt"
	"github.com/tenzro/train/wire/did"
	"io/fs"
	"os"
	"path/filepath"
)

// envKey names the environment variable that points at the default key file.
const envKey = "TENZRO_KEY"

// defaultKeyPath is where a command looks for its signing key when --key is
// not given: $TENZRO_KEY, then ~/.tenzro/key.json (what "tenzro key
// generate" writes when it is given no --out). The seed's tutorials type
// their commands without --key; this is what makes them work as written.
func defaultKeyPath() (string, error) {
	if p := os.Getenv(envKey); p != "" {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("default key: no home directory (%v): pass --key or set $%s", err, envKey)
	}
	return filepath.Join(home, ".tenzro", "key.json"), nil
}

// resolveKeyPath returns flagValue when set, else the default key path, and
// says which one it chose so errors can name it.
func resolveKeyPath(flagValue string) (path string, fromDefault bool, err error) {
	if flagValue != "" {
		return flagValue, false, nil
	}
	p, err := defaultKeyPath()
	return p, true, err
}

// loadKeyFile reads a key file made by "tenzro key generate": the --key
// value when given, else the default key ($TENZRO_KEY, ~/.tenzro/key.json).
func loadKeyFile(flagValue string) (*did.Key, error) {
	path, fromDefault, err := resolveKeyPath(flagValue)
	if err != nil {
		return nil, usageError{err}
	}
	k, err := did.Load(path)
	if err == nil {
		return k, nil
	}
	if fromDefault && errors.Is(err, fs.ErrNotExist) {
		return nil, usageError{fmt.Errorf("no key: --key not given and the default key %s does not exist "+
			"(create it with 'tenzro key generate', point $%s at a key file, or pass --key FILE)", path, envKey)}
	}
	if fromDefault {
		return nil, usageError{fmt.Errorf("default key %s: %w", path, err)}
	}
	return nil, usageError{fmt.Errorf("--key: %w", err)}
}
