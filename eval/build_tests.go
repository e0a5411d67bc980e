package eval

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

func (b *builder) wants(op, split string) bool {
	return slices.Contains(b.cfg.Ops, op) && b.opOpen(op, split)
}

var identRe = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// testedNames are the identifiers the source's own tests use (read once
// per source).
func (b *builder) testedNames(src Source) map[string]bool {
	if b.tested == nil {
		b.tested = map[string]map[string]bool{}
	}
	if m, ok := b.tested[src.Name]; ok {
		return m
	}
	m := map[string]bool{}
	_ = filepath.WalkDir(filepath.Join(src.Root, src.Tests), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".py") {
			return nil
		}
		t, err := os.ReadFile(p)
		if err == nil {
			for _, w := range identRe.FindAllString(string(t), -1) {
				m[w] = true
			}
		}
		return nil
	})
	b.tested[src.Name] = m
	return m
}

// runCandidates are the test and sample_data tasks of a file: its public
// module-level functions that the project's own tests use (the tests are
// not in the job's workspace). A test task needs a function that returns a
// value (the grader replaces its body by `return None`); a sample_data task
// one with parameters.
func (b *builder) runCandidates(f srcFile, sf surveyFile, text string) []candidate {
	if f.src.Tests == "" || strings.HasSuffix(f.path, "__init__.py") {
		return nil
	}
	tested := b.testedNames(f.src)
	var fns []funcInfo
	for _, fn := range sf.Funcs {
		if !fn.Method && !strings.HasPrefix(fn.Name, "_") && tested[fn.Name] {
			fns = append(fns, fn)
		}
	}
	b.rng.Shuffle(len(fns), func(i, j int) { fns[i], fns[j] = fns[j], fns[i] })
	var out []candidate
	for _, op := range []string{OpTest, OpSampleData} {
		n := 0
		for _, fn := range fns {
			if n == 3 || !b.wants(op, f.split) {
				break
			}
			if (op == OpTest && !fn.Returns) || (op == OpSampleData && len(fn.Params) == 0) {
				continue
			}
			t := b.newTask(f, text, op, Edit{Code: op, Start: 1, End: 0})
			t.Node = nodeOf(sf.Funcs, fn.Name)
			if op == OpTest {
				t.Expect = []string{"only new files are written; the test files parse",
					"pytest runs them against the module and they pass (at least one test passed)",
					fmt.Sprintf("they fail when %s's body is replaced by return None", fn.Name)}
			} else {
				t.Expect = []string{"only new files are written: a JSON fixture naming the function",
					"its kwargs bind to the signature of " + fn.Name + " when the module is imported"}
			}
			out = append(out, candidate{task: t, input: text})
			n++
		}
	}
	return out
}

// packageFiles are the source's Python files outside its tests and
// skipped folders, by workspace path: the workspace of a test or
// sample_data job (the module imports its package).
func packageFiles(src Source) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(src.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != src.Root && (slices.Contains(src.Skip, d.Name()) || d.Name() == src.Tests) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".py") {
			return nil
		}
		rel, err := filepath.Rel(src.Root, p)
		if err != nil {
			return err
		}
		t, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[src.Prefix+filepath.ToSlash(rel)] = string(t)
		return nil
	})
	return files, err
}
