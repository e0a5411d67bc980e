package looptest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/agentfleet/fleet/loop"
)

// Tools is a fake loop.ToolExecutor built from function fields. A nil
// ContextFunc provides no context; a nil ExecuteFunc answers {"ok":true}.
// It logs every call (see Log). It does not implement loop.ChangeLister; use
// ToolsWithChanges for that.
type Tools struct {
	ContextFunc func(ctx context.Context, tool string) ([]loop.ContextOutput, error)
	ExecuteFunc func(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error)

	mu  sync.Mutex
	log []string
}

var _ loop.ToolExecutor = (*Tools)(nil)

// Context implements loop.ToolExecutor.
func (t *Tools) Context(ctx context.Context, tool string) ([]loop.ContextOutput, error) {
	t.append("context " + tool)
	if t.ContextFunc == nil {
		return nil, nil
	}
	return t.ContextFunc(ctx, tool)
}

// Execute implements loop.ToolExecutor.
func (t *Tools) Execute(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
	t.append("execute " + tool + " " + string(args))
	if t.ExecuteFunc == nil {
		return json.RawMessage(`{"ok":true}`), nil
	}
	return t.ExecuteFunc(ctx, tool, args)
}

// Log returns the calls so far, in order: "context <tool>" and
// "execute <tool> <canonical args>".
func (t *Tools) Log() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.log...)
}

func (t *Tools) append(s string) {
	t.mu.Lock()
	t.log = append(t.log, s)
	t.mu.Unlock()
}

// ToolsWithChanges is Tools plus loop.ChangeLister. A nil ChangedFilesFunc
// reports no changes.
type ToolsWithChanges struct {
	Tools
	ChangedFilesFunc func(ctx context.Context) ([]string, error)
}

var (
	_ loop.ToolExecutor = (*ToolsWithChanges)(nil)
	_ loop.ChangeLister = (*ToolsWithChanges)(nil)
)

// ChangedFiles implements loop.ChangeLister.
func (t *ToolsWithChanges) ChangedFiles(ctx context.Context) ([]string, error) {
	if t.ChangedFilesFunc == nil {
		return nil, nil
	}
	return t.ChangedFilesFunc(ctx)
}
