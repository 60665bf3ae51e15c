// Package tenzro is the Go SDK for Tenzro Train rule plugins; it builds only
// for GOOS=wasip1 (see tenzro.go).
package tenzro
