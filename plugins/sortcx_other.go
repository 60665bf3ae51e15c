//go:build !amd64

package plugins

func compareExchange(a, b []int32) { compareExchangeGo(a, b) }
