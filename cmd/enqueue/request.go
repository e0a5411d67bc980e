package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/fleet/agents"
	"github.com/agentfleet/fleet/cairn/pym/pynode"
	"github.com/agentfleet/fleet/queue/wire"
)

// configFiles are the project files sent with every job when they exist at
// the project root.
var configFiles = []string{"pyproject.toml", "ruff.toml", ".ruff.toml", "setup.cfg", "pytest.ini", "tox.ini", "conftest.py"}

// testExts are the file types sent from tests/ for the test and sample_data
// operations.
var testExts = []string{".py", ".json", ".yaml", ".yml", ".csv", ".txt", ".toml", ".cfg", ".ini"}

// maxPayload keeps the encoded request under NATS's 1 MiB limit, with room
// for the JSON framing.
const maxPayload = wire.MaxRequestBytes - 64<<10

// nodeSpec says which part of the file the job is about.
type nodeSpec struct {
	name string // --node
	line int    // --line
}

// projectRoot is the nearest folder at or above dir holding pyproject.toml
// or .git, else dir.
func projectRoot(dir string) string {
	for d := dir; ; {
		for _, marker := range []string{"pyproject.toml", ".git"} {
			if _, err := os.Stat(filepath.Join(d, marker)); err == nil {
				return d
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		d = parent
	}
}

// buildRequest reads file and builds the run request for op: the node, the
// workspace files (relative to the project root) and the options. It
// returns notes for the user, each a line of its own (files skipped, a file
// that does not parse).
func buildRequest(op, file string, spec nodeSpec, opts wire.RunOptions) (*wire.RunRequest, []string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, nil, err
	}
	if !utf8.Valid(data) {
		return nil, nil, fmt.Errorf("%s is not UTF-8 text", file)
	}
	src := string(data)
	root := projectRoot(filepath.Dir(abs))
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return nil, nil, err
	}
	rel = filepath.ToSlash(rel)

	node := agents.Node{ID: rel, Name: filepath.Base(rel), Type: "file", FilePath: rel, Text: src}
	var notes []string
	if spec.name != "" || spec.line > 0 {
		py, err := pynode.Parse(data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		if w := py.Warning(); w != "" {
			notes = append(notes, fmt.Sprintf("warning: %s %s", file, w))
		}
		var picked *pynode.Node
		if spec.name != "" {
			if picked, err = py.Find(spec.name); err != nil {
				return nil, notes, fmt.Errorf("%s: %w", file, err)
			}
		} else {
			if n := py.Lines(); spec.line > n {
				return nil, notes, fmt.Errorf("%s has %d lines; --line %d is past the end", file, n, spec.line)
			}
			picked = py.At(spec.line)
		}
		if picked != nil {
			node = agents.Node{ID: rel + "::" + picked.Name, Name: picked.Name, Type: string(picked.Kind), FilePath: rel, Text: py.Text(picked)}
		}
	}

	files, wnotes := workspaceFiles(op, root, abs, rel, src, len(node.Text))
	notes = append(notes, wnotes...)
	req := &wire.RunRequest{Version: wire.ProtocolVersion, Operation: op, Node: wire.Node(node), Files: files, Options: opts,
		Project: projectName(root)}
	return req, notes, nil
}

// workspaceFiles is the workspace a job on the file at abs (rel to root,
// content src) sends: the file, the project's config files, the conftest.py
// files between the root and the file, and tests/ for the test and
// sample_data operations, as long as the request stays under its size limit
// (extra bytes are taken by the node's text). notes say what was skipped.
func workspaceFiles(op, root, abs, rel, src string, extra int) (map[string]string, []string) {
	var notes []string
	files := map[string]string{rel: src}
	size := len(src) + extra
	add := func(p string) {
		r, err := filepath.Rel(root, p)
		if err != nil {
			return
		}
		r = filepath.ToSlash(r)
		if _, dup := files[r]; dup || wire.ValidatePath(r) != nil {
			return
		}
		b, err := os.ReadFile(p)
		if err != nil || !utf8.Valid(b) {
			return
		}
		if size+len(b) > maxPayload || len(files) >= wire.MaxFiles {
			notes = append(notes, fmt.Sprintf("note: skipped %s: the request would exceed its size limit", r))
			return
		}
		files[r] = string(b)
		size += len(b)
	}
	for _, name := range configFiles {
		add(filepath.Join(root, name))
	}
	// conftest.py files between the root and the file.
	for d := filepath.Dir(abs); strings.HasPrefix(d, root) && d != root; d = filepath.Dir(d) {
		add(filepath.Join(d, "conftest.py"))
	}
	if op == "test" || op == "sample_data" {
		var found []string
		_ = filepath.WalkDir(filepath.Join(root, "tests"), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if n := d.Name(); n == "__pycache__" || (strings.HasPrefix(n, ".") && p != filepath.Join(root, "tests")) {
					return filepath.SkipDir
				}
				return nil
			}
			if slices.Contains(testExts, filepath.Ext(p)) {
				found = append(found, p)
			}
			return nil
		})
		slices.Sort(found)
		for _, p := range found {
			add(p)
		}
	}
	return files, notes
}

// projectName is the request's default project (the key agents' memory is
// kept under, docs/PROTOCOL.md §15): the project root's folder name with
// every character outside [A-Za-z0-9_-] made "_", cut to 64 characters;
// "" (the protocol's default project) when nothing is left.
func projectName(root string) string {
	b := []byte(filepath.Base(root))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	name := string(b[:min(len(b), wire.MaxProjectLength)])
	if strings.Trim(name, "_") == "" {
		return ""
	}
	return name
}
