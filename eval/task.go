package eval

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agentfleet/fleet/queue/wire"
)

// Instance is a task made concrete: the upstream file read from its source
// and checked against the suite's digest, and the input the agent gets.
type Instance struct {
	Task *Task
	// Upstream is the source file as Debian ships it; Input is it with the
	// defect applied: the file the job's workspace holds.
	Upstream string
	Input    string
	// Node is the job's node, in Input's numbering.
	Node wire.Node
	// Files is the job's workspace.
	Files map[string]string
	// LineLength is the suite's E501 limit.
	LineLength int
}

// Instance reads t's upstream file, checks its digest and applies the
// defect. A missing or changed file is an error wrapping ErrSource that
// names the Debian package to install.
func (s *Suite) Instance(t *Task) (*Instance, error) {
	src, ok := s.Source(t.Source)
	if !ok {
		return nil, fmt.Errorf("%w: %s: unknown source %q", ErrSource, t.ID, t.Source)
	}
	p := filepath.Join(src.Root, filepath.FromSlash(t.Path))
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (is %s installed?)", ErrSource, t.ID, err, src.Package)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != t.SHA256 {
		return nil, fmt.Errorf("%w: %s: %s is not the file the suite was built from (another %s version?): rebuild the suite",
			ErrSource, t.ID, p, src.Package)
	}
	up := string(b)
	in, err := ApplyEdits(up, t.Edits())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSource, t.ID, err)
	}
	inst := &Instance{Task: t, Upstream: up, Input: in, LineLength: s.Header.LineLength,
		Files: map[string]string{t.File: in}}
	if t.Op == OpTest || t.Op == OpSampleData {
		files, err := packageFiles(src)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrSource, t.ID, err)
		}
		files[t.File] = in
		inst.Files = files
	}
	inst.Node = inst.node()
	return inst, nil
}

// Edits are the task's defects: Defect, then Extra.
func (t *Task) Edits() []Edit {
	return append([]Edit{t.Defect}, t.Extra...)
}

// ApplyEdits applies edits given in the same (upstream) numbering, from the
// bottom of the file up so that no edit moves the lines of another. Edits
// must not overlap.
func ApplyEdits(text string, edits []Edit) (string, error) {
	es := slices.Clone(edits)
	sort.SliceStable(es, func(i, j int) bool { return es[i].Start > es[j].Start })
	for i := 1; i < len(es); i++ {
		if es[i].End >= es[i-1].Start {
			return "", fmt.Errorf("edits at lines %d-%d and %d-%d overlap", es[i].Start, es[i].End, es[i-1].Start, es[i-1].End)
		}
	}
	var err error
	for _, e := range es {
		if text, err = ApplyEdit(text, e); err != nil {
			return "", err
		}
	}
	return text, nil
}

// ApplyEdit applies e to text (see Edit).
func ApplyEdit(text string, e Edit) (string, error) {
	final := strings.HasSuffix(text, "\n")
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if e.Start < 1 || e.End < e.Start-1 || e.End > len(lines) || e.Start > len(lines)+1 {
		return "", fmt.Errorf("edit lines %d-%d outside the file's %d lines", e.Start, e.End, len(lines))
	}
	out := make([]string, 0, len(lines)+len(e.New))
	out = append(out, lines[:e.Start-1]...)
	out = append(out, e.New...)
	out = append(out, lines[e.End:]...)
	res := strings.Join(out, "\n")
	if final && !e.NoFinalNewline {
		res += "\n"
	}
	return res, nil
}

// node is the job's node in the input's numbering: the edit moves the
// lines below it by its change in line count.
func (in *Instance) node() wire.Node {
	t := in.Task
	n := wire.Node{FilePath: t.File}
	if t.Node.Name == "" {
		n.ID, n.Name, n.Type, n.Text = t.File, path.Base(t.File), "file", in.Input
		return n
	}
	start, end := t.Node.Start, t.Node.End
	for _, e := range t.Edits() {
		delta := len(e.New) - (e.End - e.Start + 1)
		if e.Start < t.Node.Start {
			start += delta
		}
		if e.Start <= t.Node.End+1 {
			end += delta
		}
	}
	lines := strings.Split(in.Input, "\n")
	if start < 1 {
		start = 1
	}
	if end > len(lines) {
		end = len(lines)
	}
	n.ID = t.File + "::" + t.Node.Name
	n.Name, n.Type = t.Node.Name, t.Node.Type
	n.Text = strings.Join(lines[start-1:end], "\n") + "\n"
	return n
}

// Request is the run request of the instance's job.
func (in *Instance) Request(jobID string, opts wire.RunOptions) *wire.RunRequest {
	files := make(map[string]string, len(in.Files))
	for k, v := range in.Files {
		files[k] = v
	}
	return &wire.RunRequest{
		Version: 1, JobID: jobID, Operation: in.Task.Op, Node: in.Node, Files: files, Options: opts,
		Project: "eval",
	}
}
