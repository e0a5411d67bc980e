package eval

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
// builder (eval/py). The zero value uses DefaultPython.
type Python struct {
	// Path is the python3 interpreter; "" = DefaultPython.
	Path string

	once sync.Once
	dir  string
	err  error
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

// Close removes the unpacked scripts.
func (p *Python) Close() error {
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

// run runs one evaltool command with req as its JSON input and decodes its
// answer into resp.
func (p *Python) run(ctx context.Context, cmd string, req, resp any) error {
	dir, err := p.unpack()
	if err != nil {
		return fmt.Errorf("eval: unpack evaltool: %w", err)
	}
	in, err := json.Marshal(req)
	if err != nil {
		return err
	}
	c := exec.CommandContext(ctx, p.interpreter(), "-B", filepath.Join(dir, "evaltool.py"), cmd)
	c.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	c.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0")
	err = c.Run()
	var ee *exec.ExitError
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		return &ToolMissingError{Package: "python3", Tool: p.interpreter()}
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		var m struct {
			Missing string `json:"missing"`
		}
		if json.Unmarshal(stdout.Bytes(), &m) == nil && m.Missing != "" {
			return &ToolMissingError{Package: m.Missing, Tool: strings.TrimPrefix(m.Missing, "python3-")}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("eval: evaltool %s: %v: %s", cmd, err, lastLines(stderr.String(), 6))
	}
	if err := json.Unmarshal(stdout.Bytes(), resp); err != nil {
		return fmt.Errorf("eval: evaltool %s: bad answer: %v", cmd, err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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
