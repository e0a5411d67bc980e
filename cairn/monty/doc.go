// Package monty runs .pym tools on the Monty sandboxed Python interpreter
// (@pydantic/monty-linux-x64-gnu 0.0.23) over its subprocess protocol
// (docs/MONTY.md).
//
// A Pool keeps warm `monty subprocess` children, each in its own process
// group with an empty environment. Run executes one Script in a fresh Monty
// session: Input() calls are answered from the run's inputs, the script's
// declared externals are served by an ExternalFunc (awaited ones through
// futures), undeclared names are NameErrors and OS calls are denied except
// the clock. The ctx deadline bounds the run's wall-clock time; memory,
// recursion and interpreter time are Monty limits; host round trips are
// counted in Go. Processes are replaced after crashes, limit errors,
// deadlines and Config.MaxRunsPerProcess runs. Later runs of a script start
// from a snapshot of its session at its first suspension instead of parsing
// it again (snapshot.go).
//
// The protocol codec is hand-written on protowire and pinned to 0.0.23 by
// golden frames; Start verifies the binary's sha256 and self-tests it.
package monty
