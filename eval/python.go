package eval

import (
	"context"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

//go:embed py/*.py
var pyFiles embed.FS

// DefaultPython is the interpreter the graders run: Debian's python3, whose
// dist-packages hold the Debian linters (a pyenv or venv python3 on PATH
// usually does not see them).
const DefaultPython = "/usr/bin/python3"

// ToolMissingError says that a grader tool is not installed and which Debian
// package provides it.
type ToolMissingError struct {
	// Package is the Debian package to install (apt-get install -y Package).
	Package string
	// Tool is what was looked for.
	Tool string
}

func (e *ToolMissingError) Error() string {
	return fmt.Sprintf("eval: %s is not installed: apt-get install -y %s", e.Tool, e.Package)
}

// Python runs evaltool.py, the Python side of the graders and the suite
// builder (eval/py). It keeps the interpreters it starts (evaltool's serve
// mode), one per concurrent caller, so a request pays for its own work and
// not for starting Python and importing the linters (about 0.15 s each).
// The zero value uses DefaultPython; Close stops the interpreters. Safe for
// concurrent use.
type Python struct {
	// Path is the python3 interpreter; "" = DefaultPython.
	Path string

	once sync.Once
	dir  string
	err  error

	mu     sync.Mutex
	idle   []*pyServer
	closed bool
}

func (p *Python) interpreter() string {
	if p.Path != "" {
		return p.Path
	}
	return DefaultPython
}

// unpack writes the embedded scripts to a private temporary folder, once.
func (p *Python) unpack() (string, error) {
	p.once.Do(func() {
		dir, err := os.MkdirTemp("", "fleet-evaltool-")
		if err != nil {
			p.err = err
			return
		}
		ents, err := pyFiles.ReadDir("py")
		if err != nil {
			p.err = err
			return
		}
		for _, e := range ents {
			b, err := pyFiles.ReadFile("py/" + e.Name())
			if err != nil {
				p.err = err
				return
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
				p.err = err
				return
			}
		}
		p.dir = dir
	})
	return p.dir, p.err
}

// Close stops the idle interpreters (one in use stops when it is given
// back) and removes the unpacked scripts.
func (p *Python) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, s := range idle {
		s.stop()
	}
	if p.dir == "" {
		return nil
	}
	return os.RemoveAll(p.dir)
}

// Check fails with a *ToolMissingError when python3 or a grader tool
// (pycodestyle, pyflakes, pytest) is missing.
func (p *Python) Check(ctx context.Context) error {
	var out struct{}
	return p.run(ctx, "check", map[string]any{"items": []any{}, "line_length": 88, "probe": true}, &out)
}

// LintItem is one text for Reports.
type LintItem struct {
	Path string `json:"path"`
	Text string `json:"text"`
}

// Reports runs pycodestyle (its default checks plus E704) and pyflakes on
// each item, with lineLength as the E501 limit, and returns each item's
// reports in order.
func (p *Python) Reports(ctx context.Context, items []LintItem, lineLength int) ([][]Report, error) {
	var resp struct {
		Reports [][]Report `json:"reports"`
	}
	if err := p.run(ctx, "check", map[string]any{"items": items, "line_length": lineLength}, &resp); err != nil {
		return nil, err
	}
	if len(resp.Reports) != len(items) {
		return nil, fmt.Errorf("eval: evaltool check answered %d texts for %d", len(resp.Reports), len(items))
	}
	return resp.Reports, nil
}
