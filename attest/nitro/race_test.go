//go:build race

package nitro

// The race detector slows the differential test down tenfold; it samples
// fewer byte positions then.
func init() { raceEnabled = true }
