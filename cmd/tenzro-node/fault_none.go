//go:build !faultinject || production

package main

import (
	"github.com/spf13/pflag"

	"github.com/tenzro/train/syncer"
	"github.com/tenzro/train/wire"
)

// Builds without the faultinject tag (production included) have no fault
// flags and never set syncer.Config.Fault.

func addFaultFlags(*pflag.FlagSet) {}

func faultFromFlags(*pflag.FlagSet) (*syncer.Fault, error) { return nil, nil }

func holdWritesFromFlags(*pflag.FlagSet) (func(wire.Hash), error) { return nil, nil }
