package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agentfleet/fleet/cairn/pym/pynode"
	"github.com/agentfleet/fleet/queue/wire"
)

// Node selections of a fan-out (--nodes).
const (
	nodesAll       = "all"       // every function, method and class
	nodesFunctions = "functions" // functions and methods
	nodesTop       = "top"       // module-level functions and classes
)

// planSpec is what a fan-out is asked for.
type planSpec struct {
	ops      []string
	paths    []string
	nodes    string
	changed  string // git revision for --changed; "" = every node
	excludes []string
	opts     wire.RunOptions
	project  string
}

// plan is a fan-out's jobs, ready to publish.
type plan struct {
	root  string
	reqs  []*wire.RunRequest
	files []string          // the files with at least one job, relative to root
	sent  map[string]string // every workspace path sent -> its content's sha256
	notes []string          // warnings for the user (files that do not parse)
}

// planError is a fan-out refused before anything is published.
type planError struct{ msg string }

func (e *planError) Error() string { return e.msg }

func planErr(format string, args ...any) error { return &planError{msg: fmt.Sprintf(format, args...)} }

// hasGlob reports whether p holds a glob pattern.
func hasGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

// skipDir reports whether a folder found while walking is left out.
func skipDir(name string) bool {
	return name == "__pycache__" || name == "node_modules" || (strings.HasPrefix(name, ".") && name != "." && name != "..")
}

// expandPaths turns files, folders (walked for *.py) and globs into a
// sorted list of absolute file paths.
func expandPaths(args []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	addFile := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	var walk func(p string, explicit bool) error
	walk = func(p string, explicit bool) error {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		info, err := os.Stat(abs)
		if err != nil {
			return planErr("%s: %v", p, errors.Unwrap(err))
		}
		if !info.IsDir() {
			if explicit || strings.HasSuffix(abs, ".py") {
				addFile(abs)
			}
			return nil
		}
		return filepath.WalkDir(abs, func(q string, d fs.DirEntry, err error) error {
			if err != nil {
				return planErr("%s: %v", q, err)
			}
			if d.IsDir() {
				if q != abs && skipDir(d.Name()) {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(q, ".py") && d.Type().IsRegular() {
				addFile(q)
			}
			return nil
		})
	}
	for _, a := range args {
		if !hasGlob(a) {
			if err := walk(a, true); err != nil {
				return nil, err
			}
			continue
		}
		matches, err := filepath.Glob(a)
		if err != nil {
			return nil, planErr("%s: bad pattern: %v", a, err)
		}
		if len(matches) == 0 {
			return nil, planErr("%s: matches no file", a)
		}
		for _, m := range matches {
			if err := walk(m, false); err != nil {
				return nil, err
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// commonDir is the deepest folder holding every path.
func commonDir(paths []string) string {
	dir := filepath.Dir(paths[0])
	for _, p := range paths[1:] {
		for !strings.HasPrefix(p, dir+string(filepath.Separator)) && dir != filepath.Dir(dir) {
			dir = filepath.Dir(dir)
		}
	}
	return dir
}

// excluded reports whether rel (slash-separated, relative to the root)
// matches one of the --exclude patterns: the whole path or any run of its
// parts ("b.py", "sub/*.py", "test" and "idlelib/idle_test" each match
// where they stand anywhere in the path; a folder leaves out what it holds).
func excluded(rel string, patterns []string) bool {
	parts := strings.Split(rel, "/")
	for _, pat := range patterns {
		pat = strings.TrimSuffix(filepath.ToSlash(pat), "/")
		for i := range parts {
			for j := i + 1; j <= len(parts); j++ {
				if ok, _ := filepath.Match(pat, strings.Join(parts[i:j], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

// keepNode reports whether the --nodes selection takes n.
func keepNode(sel string, n *pynode.Node) bool {
	switch sel {
	case nodesFunctions:
		return n.Kind == pynode.Function || n.Kind == pynode.Method
	case nodesTop:
		return n.Depth == 0
	}
	return true
}

// gitOld returns the file's content at revision rev, nil when the file did
// not exist there.
func gitOld(abs, rev string) ([]byte, error) {
	dir := filepath.Dir(abs)
	top, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return nil, planErr("--changed: %s is not in a git repository", abs)
	}
	rel, err := filepath.Rel(strings.TrimSpace(string(top)), abs)
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command("git", "-C", dir, "rev-parse", "--verify", "--quiet", rev+"^{commit}").Output(); err != nil || len(out) == 0 {
		return nil, planErr("--changed: %q is not a revision of the repository", rev)
	}
	out, err := exec.Command("git", "-C", dir, "show", rev+":"+filepath.ToSlash(rel)).Output()
	if err != nil {
		return nil, nil // not in that revision: every node is new
	}
	return out, nil
}

// makePlan finds the jobs of a fan-out: one per node and operation, over
// the files the paths name, with the workspace each job sends. Unreadable
// or binary files, and paths with no node at all, refuse the whole batch.
func makePlan(s planSpec) (*plan, error) {
	files, err := expandPaths(s.paths)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, planErr("no Python files under %s", strings.Join(s.paths, " "))
	}
	p := &plan{root: projectRoot(commonDir(files)), sent: map[string]string{}}
	project := s.project
	if project == "" {
		project = projectName(p.root)
	}
	var bad []string
	empty := 0
	for _, abs := range files {
		rel, err := filepath.Rel(p.root, abs)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rel, s.excludes) {
			continue
		}
		if err := wire.ValidatePath(rel); err != nil {
			return nil, planErr("%s: %v", abs, err)
		}
		data, err := os.ReadFile(abs)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: cannot read: %v", rel, errors.Unwrap(err)))
			continue
		}
		if !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0 {
			bad = append(bad, rel+": not UTF-8 text")
			continue
		}
		var nodes []pynode.Node
		var py *pynode.File
		if s.changed != "" {
			old, err := gitOld(abs, s.changed)
			if err != nil {
				return nil, err
			}
			changes, _, nf, err := pynode.Changed(old, data)
			if err != nil {
				return nil, planErr("%s: %v", rel, err)
			}
			py = nf
			for _, c := range changes {
				if c.Kind != pynode.Removed {
					nodes = append(nodes, c.Node)
				}
			}
		} else {
			if py, err = pynode.Parse(data); err != nil {
				return nil, planErr("%s: %v", rel, err)
			}
			nodes = py.Nodes
		}
		if w := py.Warning(); w != "" {
			p.notes = append(p.notes, fmt.Sprintf("warning: %s %s", rel, w))
		}
		src := string(data)
		added := false
		var picked []wire.Node
		for i := range nodes {
			if n := &nodes[i]; keepNode(s.nodes, n) {
				picked = append(picked, wire.Node{ID: rel + "::" + n.Name, Name: n.Name, Type: string(n.Kind), FilePath: rel, Text: py.Text(n)})
			}
		}
		for _, op := range s.ops {
			if len(picked) == 0 {
				break
			}
			ws, wnotes := workspaceFiles(op, p.root, abs, rel, src, len(src))
			p.notes = append(p.notes, wnotes...)
			for _, node := range picked {
				p.reqs = append(p.reqs, &wire.RunRequest{Version: wire.ProtocolVersion, Operation: op, Node: node, Files: ws,
					Options: s.opts, Project: project})
				added = true
			}
			for path, content := range ws {
				if _, ok := p.sent[path]; !ok {
					p.sent[path] = sha(content)
				}
			}
		}
		if added {
			p.files = append(p.files, rel)
		} else {
			empty++
		}
	}
	if empty > 0 && len(p.reqs) > 0 {
		p.notes = append(p.notes, fmt.Sprintf("note: %d file(s) have no selected node (--nodes %s)", empty, s.nodes))
	}
	if len(bad) > 0 {
		return nil, planErr("%d file(s) cannot be sent (nothing was published; --exclude them):\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	if len(p.reqs) == 0 {
		what := "no functions or classes"
		if s.changed != "" {
			what = "no node changed since " + s.changed
		}
		return nil, planErr("%s in %s (--nodes %s); nothing to publish", what, strings.Join(s.paths, " "), s.nodes)
	}
	return p, nil
}
