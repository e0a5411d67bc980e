package memory

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/internal/textcut"
	"github.com/agentfleet/fleet/loop"
	"github.com/agentfleet/fleet/queue/wire"
)

// RunConfig is one run's memory: who remembers, on what.
type RunConfig struct {
	// Store is the bucket. Required.
	Store *Store
	// Agent is the run's operation; Memory its agent's memory: settings
	// (zero fields take their defaults). Required.
	Agent  string
	Memory *agents.Memory
	// Project is the request's project (wire.ProjectOf).
	Project string
	// Node is the node the run works on; JobID the job.
	Node  agents.Node
	JobID string
	// Logger receives the warnings; nil = slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil = time.Now.
	Now func() time.Time
}

// Run is one run's memory: it recalls the entries for the first turn and
// collects the run's remember() calls until Flush writes them. It is safe
// for concurrent use.
type Run struct {
	cfg RunConfig
	buf *buffer
}

// NewRun checks cfg and returns the run's memory.
func NewRun(cfg RunConfig) (*Run, error) {
	switch {
	case cfg.Store == nil || cfg.Memory == nil:
		return nil, fmt.Errorf("memory: RunConfig.Store and Memory are required")
	case !wire.ValidOperation(cfg.Agent):
		return nil, fmt.Errorf("memory: agent %q is not a valid operation", cfg.Agent)
	case !wire.ValidProject(cfg.Project):
		return nil, fmt.Errorf("memory: project %q must be 1-%d characters of [A-Za-z0-9_-]", cfg.Project, wire.MaxProjectLength)
	}
	resolved := cfg.Memory.Resolved()
	cfg.Memory = &resolved
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Run{cfg: cfg, buf: newBuffer(cfg.Memory.MaxEntries)}, nil
}

// Recall reads the agent's entries on the project and returns the most
// relevant ones (Select) as the first turn's context, or nil when there
// are none. A failure to read is logged and recalls nothing: a run without
// its memory still runs. A nil Run recalls nothing.
func (r *Run) Recall(ctx context.Context) []loop.ContextOutput {
	if r == nil {
		return nil
	}
	m := r.cfg.Memory
	entries, _, err := r.cfg.Store.List(ctx, Filter{Agent: r.cfg.Agent, Project: r.cfg.Project})
	if err != nil {
		r.cfg.Logger.Warn("memory: recall failed; the run starts without it", "agent", r.cfg.Agent, "project", r.cfg.Project, "err", err)
		return nil
	}
	picked := Select(entries, r.cfg.Node, m.Recall, m.RecallBytes, r.cfg.Now())
	if len(picked) == 0 {
		return nil
	}
	return []loop.ContextOutput{{Provider: Provider, Text: Render(r.cfg.Project, picked)}}
}

// Remember serves a tool's remember(key, text): it checks the key and the
// text and keeps the entry until Flush. A later call with the same key in
// the run replaces the earlier one. Errors are *monty.PythonError
// *RememberError, raised in the script as ValueError.
func (r *Run) Remember(_ context.Context, key, text string) error {
	m := r.cfg.Memory
	switch {
	case !wire.ValidMemoryKey(key):
		return &RememberError{fmt.Sprintf(
			"remember: key %q must be 1-%d characters of [A-Za-z0-9_-]", clip(key), wire.MaxMemoryKeyLength)}
	case strings.TrimSpace(text) == "":
		return &RememberError{"remember: text is empty"}
	case !utf8.ValidString(text):
		return &RememberError{"remember: text is not valid UTF-8"}
	case len(text) > m.MaxBytes:
		return &RememberError{fmt.Sprintf(
			"remember: text is %d bytes; this agent's memory.max_bytes is %d", len(text), m.MaxBytes)}
	}
	now := r.cfg.Now().UTC()
	e := wire.MemoryEntry{
		Version: wire.MemoryEntryVersion, Agent: r.cfg.Agent, Project: r.cfg.Project, Key: key, Text: text,
		NodeID: r.cfg.Node.ID, FilePath: r.cfg.Node.FilePath, JobID: r.cfg.JobID,
		UpdatedAt: now, ExpiresAt: now.Add(m.TTL),
	}
	if !r.buf.put(e) {
		return &RememberError{fmt.Sprintf(
			"remember: this run already remembered %d entries, the agent's memory.max_entries", m.MaxEntries)}
	}
	return nil
}

// Pending returns the entries remembered so far, in the order of their
// first remember() call.
func (r *Run) Pending() []wire.MemoryEntry { return r.buf.entries() }

// Flush writes the remembered entries (docs/PROTOCOL.md §15: when the run
// has ended with a result) and trims the agent's entries on the project to
// memory.max_entries.
func (r *Run) Flush(ctx context.Context) error {
	return r.cfg.Store.Write(ctx, r.buf.entries(), r.cfg.Memory.TTL, r.cfg.Memory.MaxEntries)
}

func clip(s string) string { return textcut.Clip(s, 80, "…") }

// RememberError is a remember() call refused: a malformed key, empty, not
// UTF-8 or too long text, or one entry too many for the run. The sandbox
// raises it in the script as ValueError with the message.
type RememberError struct{ Message string }

// Error returns the message.
func (e *RememberError) Error() string { return e.Message }

// PythonException names the exception the script sees: ValueError.
func (e *RememberError) PythonException() string { return "ValueError" }
