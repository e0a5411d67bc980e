// Package layers keeps the layers docs/ARCHITECTURE.md draws: its test
// reads the document's layer table and fails when a package imports one of
// a layer above its own, when a package has no layer, and when the table
// names a package that does not exist. It has no code of its own.
package layers
