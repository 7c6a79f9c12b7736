// Package structure holds no code: its tests check the rules of Kaon's
// package structure (docs/DESIGN.md §2) on the module's import graph, as
// `go list` reports it, and on its sources, so that a change breaking one
// fails `go test ./...` naming the package and the import at fault.
package structure
