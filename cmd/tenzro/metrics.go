package main

import (
	"strconv"
	"strings"

	"github.com/tenzro/train/wire"
)

// parseMetrics turns --metrics name=number pairs into a checked metrics map.
func parseMetrics(kv map[string]string) (wire.SubmissionMetrics, error) {
	if len(kv) == 0 {
		return nil, nil
	}
	m := wire.SubmissionMetrics{}
	for k, v := range kv {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, usagef("--metrics %s=%s: not a number", k, v)
		}
		m[k] = f
	}
	if err := m.Validate(); err != nil {
		return nil, usagef("--metrics: %v", err)
	}
	return m, nil
}
