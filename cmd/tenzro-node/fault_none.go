//go:build !faultinject || production

package main

import (
	"github.com/spf13/pflag"

	"github.com/tenzro/train/syncer"
)

// Builds without the faultinject tag (production included) have no fault
// flags and never set syncer.Config.Fault.

func addFaultFlags(*pflag.FlagSet) {}

func faultFromFlags(*pflag.FlagSet) (*syncer.Fault, error) { return nil, nil }
