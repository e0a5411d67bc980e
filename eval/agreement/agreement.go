// Package agreement measures the lint agent's run_linter against the real
// linters: it runs the .pym tool on Monty over Python files (the whole
// standard library in `make eval-agreement`) and pycodestyle and pyflakes
// on the same files, and counts, per code run_linter claims, the (code,
// line) reports both make and those only one makes.
package agreement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"sync"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn"
	"github.com/agentfleet/fleet/cairn/toolexec"
	"github.com/agentfleet/fleet/eval"
)

// Codes are the codes run_linter claims.
var Codes = []string{"E501", "W291", "W293", "W191", "W292", "E701", "E702", "E703", "E704", "F401"}

// File is one file to lint.
type File struct {
	Path string
	Text string
}

// Config says what to measure.
type Config struct {
	// Agent is the lint agent (agents/lint). Required.
	Agent *agents.Definition
	// Sandbox runs run_linter (a Monty pool). Required.
	Sandbox toolexec.Sandbox
	// Files are linted by both. Required.
	Files []File
	// LineLength is the E501 limit for both; default 88 (run_linter's
	// default without a project config).
	LineLength int
	// Python runs the real linters; nil = a default eval.Python.
	Python *eval.Python
	// Parallel files at once; default 1.
	Parallel int
	// Progress, when set, is called after each file.
	Progress func(done, total int)
}

// Row is one code's counts.
type Row struct {
	Code string `json:"code"`
	// Both: reported by run_linter and by the real linter on the same line.
	Both int `json:"both"`
	// ToolOnly: run_linter only (false positives against the reference).
	ToolOnly int `json:"tool_only"`
	// RefOnly: the real linter only (what run_linter misses).
	RefOnly int `json:"ref_only"`
	// Examples of disagreements, "path:line" (at most 5 each).
	ToolOnlyAt []string `json:"tool_only_at,omitempty"`
	RefOnlyAt  []string `json:"ref_only_at,omitempty"`
}

// Precision is Both/(Both+ToolOnly) (1 when run_linter reported none).
func (r Row) Precision() float64 { return ratio(r.Both, r.Both+r.ToolOnly) }

// Recall is Both/(Both+RefOnly) (1 when the reference reported none).
func (r Row) Recall() float64 { return ratio(r.Both, r.Both+r.RefOnly) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// Table is the measurement.
type Table struct {
	Files int `json:"files"`
	// Failed lists files run_linter could not lint (tool errors), with
	// the reason; they count in no row.
	Failed map[string]string `json:"failed,omitempty"`
	Rows   []Row             `json:"rows"`
}

type key struct {
	code string
	line int
}

// Measure lints every file with both and compares.
func Measure(ctx context.Context, cfg Config) (*Table, error) {
	if cfg.Agent == nil || cfg.Sandbox == nil || len(cfg.Files) == 0 {
		return nil, errors.New("agreement: Agent, Sandbox and Files are required")
	}
	if cfg.LineLength <= 0 {
		cfg.LineLength = 88
	}
	if cfg.Python == nil {
		cfg.Python = &eval.Python{}
	}
	cfg.Parallel = max(cfg.Parallel, 1)
	rows := map[string]*Row{}
	for _, c := range Codes {
		rows[c] = &Row{Code: c}
	}
	t := &Table{Files: len(cfg.Files), Failed: map[string]string{}}
	var mu sync.Mutex
	var firstErr error
	done := 0
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	const chunk = 16
	for i := 0; i < len(cfg.Files); i += chunk {
		files := cfg.Files[i:min(i+chunk, len(cfg.Files))]
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := measureChunk(ctx, &cfg, files, func(f File, tool, ref map[key]bool, ferr string) {
				mu.Lock()
				defer mu.Unlock()
				done++
				if cfg.Progress != nil {
					cfg.Progress(done, len(cfg.Files))
				}
				if ferr != "" {
					t.Failed[f.Path] = ferr
					return
				}
				tally(rows, f.Path, tool, ref)
			})
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, c := range Codes {
		t.Rows = append(t.Rows, *rows[c])
	}
	return t, nil
}

func tally(rows map[string]*Row, p string, tool, ref map[key]bool) {
	for k := range tool {
		r := rows[k.code]
		if ref[k] {
			r.Both++
			continue
		}
		r.ToolOnly++
		if len(r.ToolOnlyAt) < 5 {
			r.ToolOnlyAt = append(r.ToolOnlyAt, fmt.Sprintf("%s:%d", p, k.line))
		}
	}
	for k := range ref {
		if !tool[k] {
			r := rows[k.code]
			r.RefOnly++
			if len(r.RefOnlyAt) < 5 {
				r.RefOnlyAt = append(r.RefOnlyAt, fmt.Sprintf("%s:%d", p, k.line))
			}
		}
	}
	for _, r := range rows {
		sort.Strings(r.ToolOnlyAt)
		sort.Strings(r.RefOnlyAt)
	}
}

func measureChunk(ctx context.Context, cfg *Config, files []File, each func(File, map[key]bool, map[key]bool, string)) error {
	items := make([]eval.LintItem, len(files))
	for i, f := range files {
		items[i] = eval.LintItem{Path: f.Path, Text: f.Text}
	}
	reps, err := cfg.Python.Reports(ctx, items, cfg.LineLength)
	if err != nil {
		return err
	}
	claimed := map[string]bool{}
	for _, c := range Codes {
		claimed[c] = true
	}
	for i, f := range files {
		ref := map[key]bool{}
		for _, r := range reps[i] {
			if claimed[r.Code] {
				ref[key{r.Code, r.Line}] = true
			}
		}
		tool, ferr, err := runLinter(ctx, cfg, f)
		if err != nil {
			return err
		}
		each(f, tool, ref, ferr)
	}
	return nil
}

// runLinter runs the lint agent's run_linter on f in a workspace holding
// only f (no project config: line length 88).
func runLinter(ctx context.Context, cfg *Config, f File) (map[key]bool, string, error) {
	st, err := cairn.NewMemoryStable(ctx)
	if err != nil {
		return nil, "", err
	}
	defer st.Close()
	if _, err := st.LoadFiles(ctx, map[string][]byte{f.Path: []byte(f.Text)}); err != nil {
		return nil, "cairn refused the file: " + err.Error(), nil
	}
	dir, err := os.MkdirTemp("", "fleet-agreement-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	ov, err := st.NewOverlay(ctx, dir, "lint", f.Path, cairn.InMemory())
	if err != nil {
		return nil, "", err
	}
	defer ov.Close()
	ex, err := toolexec.New(toolexec.Config{Definition: cfg.Agent, Sandbox: cfg.Sandbox, Workspace: ov,
		Node: agents.Node{ID: f.Path, Name: path.Base(f.Path), Type: "file", FilePath: f.Path}})
	if err != nil {
		return nil, "", err
	}
	out, err := ex.Execute(ctx, "run_linter", json.RawMessage(`{}`))
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		return nil, err.Error(), nil
	}
	var res struct {
		Result struct {
			Issues []struct {
				Code string `json:"code"`
				Line int    `json:"line"`
			} `json:"issues"`
		} `json:"result"`
		Outcome string `json:"outcome"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, "bad result: " + err.Error(), nil
	}
	if res.Outcome != "ok" {
		return nil, "run_linter: " + res.Error, nil
	}
	tool := map[key]bool{}
	for _, is := range res.Result.Issues {
		tool[key{is.Code, is.Line}] = true
	}
	return tool, "", nil
}
