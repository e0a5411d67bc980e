// Package cairn implements fleet's copy-on-write workspaces (docs/MONTY.md
// §6, docs/TOOLS.md §4): a Stable workspace, the source of truth, and one
// Overlay per agent run, both SQLite files (pure-Go modernc.org/sqlite, WAL
// mode).
//
// Either can also be held in memory (NewMemoryStable, the InMemory overlay
// option; SQLite's memdb VFS) and handed over at the end as the bytes of
// its SQLite file (Image): for a run that only has to reach disk when it
// ends, this saves the file creation, locking, journaling and fsync each
// SQLite file costs while the run works. A closed in-memory database is
// emptied (checked, and zeroed) and serves the next one, with its
// connections and prepared statements (memory.go). Queries reuse prepared
// statements (stmt.go).
//
// # Files
//
// A workspace folder holds the overlays of the runs:
//
//	<dir>/agent-{operation}-{node}.db
//
// where operation matches [A-Za-z0-9_]{1,64} and node is the node id
// escaped into a safe, injective file name (OverlayID documents the
// mapping; "src/app.py::main" becomes "src~2Fapp.py~3A~3Amain"). The name
// without ".db" is the workspace id (Overlay.ID), reported as
// AgentResult.workspace_id.
//
// # Semantics
//
// Reads fall through overlay → stable; writes and deletes touch only the
// overlay; a delete of a stable file is a tombstone, and writing the path
// again cancels it. Directories are implied by file paths: a directory
// exists while a visible file lies below it, list_dir names it without a
// trailing slash, and a path cannot be a file and a directory at once
// (ErrIsDir / ErrNotDir). Each path the run touches has stable's sha256 at
// that moment recorded ("absent" when stable had none); Accept refuses to
// merge a path whose stable content has changed since (ErrStaleBase)
// unless forced, merges in one transaction and keeps an undo snapshot
// (Stable.Undo). Reject deletes the overlay file; Cleanup removes old ones.
//
// # Scripts
//
// Overlay.CallExternal serves the workspace functions of docs/TOOLS.md §4
// (see ExternalNames) to the Monty runner with the safety rules of its
// §4.1: paths pass CleanPath (relative only, no "..", no NUL, control
// characters or backslashes, length caps), content is capped at
// MaxContentBytes, regexes at MaxRegexBytes and MaxMatches. Every failure is an *Error whose
// PythonException method names the builtin exception to raise.
package cairn
