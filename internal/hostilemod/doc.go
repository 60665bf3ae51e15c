// Package hostilemod builds small hostile aggregation plugins (valid ABI v1
// modules whose entry points loop or bomb memory) for the tests that
// reproduce attacks on a node: it owns nothing else.
package hostilemod
