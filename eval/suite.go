// Package eval measures how often fleet's agents succeed, on real code no
// one here wrote, with graders that do not trust the agent.
//
// A suite (Build) is a versioned, deterministic JSONL file of tasks made at
// build time from Python sources Debian ships (the python3.11 standard
// library, python3-toolz, python3-boltons): each task is an upstream file,
// a node and a defect injected from a seed (a lint issue, a removed
// docstring). Tasks are split into train, dev and test by module or package,
// never by node. The suite stores where each file comes from and its
// sha256, not its text, so a suite is small and never holds copies of the
// sources.
//
// A grade (Grader) applies a job's diff to the task's input and checks the
// outcome with real tools: Python's ast and tokenize, pycodestyle, pyflakes
// and pytest from Debian (eval/py/evaltool.py). Every failed grade has a
// reason. The expert policies that measure the tools' ceiling are in
// eval/expert; docs/EVALS.md has the measured rates.
package eval

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// SuiteVersion is the version of the suite file format this package reads
// and writes.
const SuiteVersion = 1

const suiteKind = "fleet-eval-suite"

// The operations a suite has tasks for (the agents' folder names).
const (
	OpLint       = "lint"
	OpDocstring  = "docstring"
	OpTest       = "test"
	OpSampleData = "sample_data"
)

// Ops are the operations in the order reports list them.
var Ops = []string{OpLint, OpDocstring, OpTest, OpSampleData}

// The splits. A module or package (Task.Unit) is in exactly one.
const (
	SplitTrain = "train"
	SplitDev   = "dev"
	SplitTest  = "test"
)

// Splits are the splits in order.
var Splits = []string{SplitTrain, SplitDev, SplitTest}

// ErrBadSuite is wrapped by every error about a suite file that is
// corrupt, truncated or of another format version.
var ErrBadSuite = errors.New("eval: bad suite file")

// ErrSource is wrapped when a task's source file is missing or no longer
// the file the suite was built from.
var ErrSource = errors.New("eval: task source")

// Source is a tree of Python files a suite is built from.
type Source struct {
	// Name identifies the source in tasks ("stdlib", "toolz").
	Name string `json:"name"`
	// Root is the folder the files are read from.
	Root string `json:"root"`
	// Package is the Debian package that ships it (for messages).
	Package string `json:"package"`
	// Prefix is prepended to a file's path under Root to give its path in
	// the job's workspace ("toolz/" for a package's modules).
	Prefix string `json:"prefix,omitempty"`
	// Skip lists folder names not descended into (test suites, vendored
	// code).
	Skip []string `json:"skip,omitempty"`
	// Tests is the folder under Root with the project's own tests: test
	// and sample_data tasks are functions these tests name, and the tests
	// are never in the job's workspace.
	Tests string `json:"tests,omitempty"`
}

// Header is the first line of a suite file.
type Header struct {
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	// Name names the suite ("debian-py-v1").
	Name string `json:"name"`
	// Seed is the seed the defects and the choice of tasks come from.
	Seed uint64 `json:"seed"`
	// LineLength is the E501 limit the lint tasks are graded with (the
	// lint agent's default without a project config).
	LineLength int      `json:"line_length"`
	Sources    []Source `json:"sources"`
	// Tasks is the number of task lines that follow.
	Tasks int `json:"tasks"`
}

// Node is the node a task's job runs on, with its lines in the upstream
// file (1-based, inclusive). An empty Name means the whole file.
type Node struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

// Edit is the injected defect: upstream lines Start..End (1-based,
// inclusive; End = Start-1 inserts before Start) replaced by New, and with
// NoFinalNewline the file's last newline dropped.
type Edit struct {
	Code           string   `json:"code"`
	Start          int      `json:"start"`
	End            int      `json:"end"`
	New            []string `json:"new"`
	NoFinalNewline bool     `json:"no_final_newline,omitempty"`
}

// Task is one line of a suite: a file, a node, the defect and what must
// hold after the agent's run.
type Task struct {
	// ID is unique in the suite: <op>-<split>-<n>.
	ID    string `json:"id"`
	Op    string `json:"op"`
	Split string `json:"split"`
	// Source names the Source; Path is the file under its Root; File is
	// its path in the job's workspace.
	Source string `json:"source"`
	Path   string `json:"path"`
	File   string `json:"file"`
	// Unit is the module or package the split was chosen by.
	Unit string `json:"unit"`
	// SHA256 is the upstream file's digest (hex).
	SHA256 string `json:"sha256"`
	Node   Node   `json:"node"`
	Defect Edit   `json:"defect"`
	// Extra are more defects of other codes in the same file (suites built
	// with BuildConfig.Extra), in upstream numbering like Defect; no two
	// edits are within two lines of each other.
	Extra []Edit `json:"extra,omitempty"`
	// Expect says in words what the grader checks.
	Expect []string `json:"expect"`
}

// Suite is a loaded suite file.
type Suite struct {
	Header Header
	Tasks  []Task
}

// Source returns the suite's source named name.
func (s *Suite) Source(name string) (Source, bool) {
	i := slices.IndexFunc(s.Header.Sources, func(x Source) bool { return x.Name == name })
	if i < 0 {
		return Source{}, false
	}
	return s.Header.Sources[i], true
}

// Select returns the tasks of split (all when "") and of the given ops (all
// when none), at most limit of each operation (all when limit <= 0), in
// suite order.
func (s *Suite) Select(split string, ops []string, limit int) []Task {
	var out []Task
	per := map[string]int{}
	for _, t := range s.Tasks {
		if split != "" && t.Split != split {
			continue
		}
		if len(ops) > 0 && !slices.Contains(ops, t.Op) {
			continue
		}
		if limit > 0 && per[t.Op] >= limit {
			continue
		}
		per[t.Op]++
		out = append(out, t)
	}
	return out
}

// Write writes s as JSONL: the header, then one task per line. The same
// suite gives the same bytes.
func (s *Suite) Write(w io.Writer) error {
	h := s.Header
	h.Kind, h.Version, h.Tasks = suiteKind, SuiteVersion, len(s.Tasks)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return err
	}
	for i := range s.Tasks {
		if err := enc.Encode(&s.Tasks[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteFile writes the suite to path atomically (a temporary file renamed
// over it), so a failed build never leaves half a suite.
func (s *Suite) WriteFile(path string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := s.Write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// Read reads a suite written by Write. A file of another kind or version,
// a corrupt line, a task count that differs from the header's or a task
// that does not validate is an error wrapping ErrBadSuite, with the line.
func Read(r io.Reader) (*Suite, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadSuite, err)
		}
		return nil, fmt.Errorf("%w: empty file", ErrBadSuite)
	}
	var s Suite
	if err := json.Unmarshal(sc.Bytes(), &s.Header); err != nil {
		return nil, fmt.Errorf("%w: line 1: %v", ErrBadSuite, err)
	}
	if s.Header.Kind != suiteKind {
		return nil, fmt.Errorf("%w: line 1: not a suite file (kind %q)", ErrBadSuite, s.Header.Kind)
	}
	if s.Header.Version != SuiteVersion {
		return nil, fmt.Errorf("%w: suite format version %d, this fleet reads version %d: rebuild it (make eval-suite)",
			ErrBadSuite, s.Header.Version, SuiteVersion)
	}
	ids := map[string]bool{}
	for n := 2; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var t Task
		dec := json.NewDecoder(strings.NewReader(string(line)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadSuite, n, err)
		}
		if err := s.validTask(&t); err != nil {
			return nil, fmt.Errorf("%w: line %d: task %s: %v", ErrBadSuite, n, t.ID, err)
		}
		if ids[t.ID] {
			return nil, fmt.Errorf("%w: line %d: duplicate task id %s", ErrBadSuite, n, t.ID)
		}
		ids[t.ID] = true
		s.Tasks = append(s.Tasks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSuite, err)
	}
	if len(s.Tasks) != s.Header.Tasks {
		return nil, fmt.Errorf("%w: %d tasks, the header says %d (truncated file?)", ErrBadSuite, len(s.Tasks), s.Header.Tasks)
	}
	return &s, nil
}

// ReadFile reads the suite at path.
func ReadFile(path string) (*Suite, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func (s *Suite) validTask(t *Task) error {
	switch {
	case t.ID == "":
		return errors.New("no id")
	case !slices.Contains(Ops, t.Op):
		return fmt.Errorf("unknown op %q", t.Op)
	case !slices.Contains(Splits, t.Split):
		return fmt.Errorf("unknown split %q", t.Split)
	case t.File == "" || t.Path == "" || len(t.SHA256) != 64:
		return errors.New("file, path and sha256 are required")
	case t.Defect.Start < 1 || t.Defect.End < t.Defect.Start-1:
		return fmt.Errorf("bad defect lines %d-%d", t.Defect.Start, t.Defect.End)
	case len(t.Extra) > 0 && t.Op != OpLint:
		return fmt.Errorf("extra defects on a %s task", t.Op)
	}
	for _, e := range t.Extra {
		if e.Start < 1 || e.End < e.Start-1 || e.Code == "" {
			return fmt.Errorf("bad extra defect %s at lines %d-%d", e.Code, e.Start, e.End)
		}
	}
	if _, ok := s.Source(t.Source); !ok {
		return fmt.Errorf("unknown source %q", t.Source)
	}
	return nil
}
