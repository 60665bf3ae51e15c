// Package abi holds the plugin ABI v1 definitions shared by the host, the
// tools and the conformance suite: the manifest custom section (its schema,
// validation, and how it is attached to a module). See plugins/ABI.md.
package abi
