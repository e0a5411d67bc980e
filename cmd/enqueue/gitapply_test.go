package main

import (
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The differential test of accept: random edits of real files (the
// repository's own), diffed by the workers' real diff (cairn), applied by
// accept (go-gitdiff) and by `git apply`; both trees must be byte for byte
// the edited files. A local file changed after the job was enqueued must be
// refused with nothing written.

var (
	gitapplyCases = flag.Int("gitapply.cases", 120, "random edit sets to apply")
	gitapplySeed  = flag.Uint64("gitapply.seed", 1, "seed of the random edits")
)

// corpus is the text of real files of this repository, as lines.
func corpus(t *testing.T) [][]string {
	t.Helper()
	var out [][]string
	for _, pat := range []string{"../../docs/*.md", "../../cmd/*/*.go", "../../agents/*/tools/*.pym", "../../testdata/demo/*/*.py"} {
		paths, _ := filepath.Glob(pat)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strings.SplitAfter(string(b), "\n"))
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d corpus files", len(out))
	}
	return out
}

// names has what git quotes or ends with a tab: spaces, a quote, non-ASCII.
var names = []string{"src/app.py", "src/pkg/mod.py", "README.md", "tests/test_app.py", "my dir/with space.py",
	`q"uote.txt`, "é/ünïcode.py", "a.go", "deep/er/still/x.pym", "conftest.py"}

type gen struct {
	r      *rand.Rand
	corpus [][]string
}

// text is a run of lines of a corpus file; maybe without its last newline.
func (g *gen) text(maxLines int) string {
	f := g.corpus[g.r.IntN(len(g.corpus))]
	from := g.r.IntN(len(f))
	to := min(len(f), from+1+g.r.IntN(maxLines))
	s := strings.Join(f[from:to], "")
	if g.r.IntN(5) == 0 {
		s = strings.TrimSuffix(s, "\n")
	}
	return s
}

// edit changes, inserts and deletes runs of lines, and sometimes adds or
// drops the final newline or empties the file.
func (g *gen) edit(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for range 1 + g.r.IntN(6) {
		at := g.r.IntN(len(lines) + 1)
		n := min(len(lines)-at, 1+g.r.IntN(4))
		switch g.r.IntN(4) {
		case 0: // change
			lines = slices.Replace(lines, at, at+n, strings.SplitAfter(g.text(3)+"\n", "\n")...)
		case 1: // insert
			lines = slices.Insert(lines, at, strings.SplitAfter(g.text(5)+"\n", "\n")...)
		case 2: // delete
			lines = slices.Delete(lines, at, at+n)
		case 3: // the final newline
			out := strings.Join(lines, "")
			if strings.HasSuffix(out, "\n") {
				out = strings.TrimSuffix(out, "\n")
			} else {
				out += "\n"
			}
			lines = strings.SplitAfter(out, "\n")
		}
	}
	if g.r.IntN(40) == 0 {
		return ""
	}
	return strings.Join(lines, "")
}

// edits builds a base project and the job's version of it: files changed,
// deleted, kept, and created.
func (g *gen) edits() (base, next map[string]string) {
	base, next = map[string]string{}, map[string]string{}
	perm := g.r.Perm(len(names))
	k := 1 + g.r.IntN(4)
	for _, i := range perm[:k] {
		base[names[i]] = g.text(60)
		switch g.r.IntN(7) {
		case 0: // deleted
		case 1:
			next[names[i]] = base[names[i]]
		default:
			next[names[i]] = g.edit(base[names[i]])
		}
	}
	for _, i := range perm[k : k+g.r.IntN(3)] {
		if g.r.IntN(6) == 0 {
			next[names[i]] = ""
		} else {
			next[names[i]] = g.text(20)
		}
	}
	return base, next
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		abs := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(abs, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".fleet") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gitApply(t *testing.T, dir, diff string) {
	t.Helper()
	patch := filepath.Join(t.TempDir(), "job.diff")
	if err := os.WriteFile(patch, []byte(diff), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"apply", "--whitespace=nowarn", patch}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s\n%s", args, err, out, diff)
		}
	}
}

func TestAcceptMatchesGitApply(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIPPED: no git on this machine to compare with (apt-get install git)")
	}
	g := &gen{r: rand.New(rand.NewPCG(*gitapplySeed, 16)), corpus: corpus(t)}
	var applied, stale, created, deleted, noEOL int
	for c := range *gitapplyCases {
		base, next := g.edits()
		diff := cairnDiff(t, base, next)
		if diff == "" {
			continue
		}
		name := fmt.Sprintf("case %d (seed %d)", c, *gitapplySeed)
		created += strings.Count(diff, "\nnew file mode")
		deleted += strings.Count(diff, "\ndeleted file mode")
		noEOL += strings.Count(diff, "\n\\ No newline at end of file")

		fleetDir, gitDir := t.TempDir(), t.TempDir()
		writeTree(t, fleetDir, base)
		writeTree(t, gitDir, base)
		rec := &jobRecord{JobID: "j", Files: map[string]string{}}
		for p, c := range base {
			rec.Files[p] = sha(c)
		}
		patches, err := readDiff(diff)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, diff)
		}
		changes, conflicts := planAccept(fleetDir, rec, patches, false)
		if len(conflicts) > 0 {
			t.Fatalf("%s: conflicts %v\n%s", name, conflicts, diff)
		}
		if _, err := writeChanges(changes); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		gitApply(t, gitDir, diff)
		fleetTree, gitTree := readTree(t, fleetDir), readTree(t, gitDir)
		if !maps.Equal(fleetTree, gitTree) || !maps.Equal(fleetTree, next) {
			t.Fatalf("%s: trees differ\nfleet %q\ngit   %q\nwant  %q\n%s", name, fleetTree, gitTree, next, diff)
		}
		applied++

		// The same job on a project where a file it changes was edited
		// since: refused, nothing written.
		for p := range base {
			if n, ok := next[p]; !ok || n == base[p] {
				continue
			}
			staleDir := t.TempDir()
			local := maps.Clone(base)
			local[p] += "# edited after the job was enqueued\n"
			writeTree(t, staleDir, local)
			_, conflicts := planAccept(staleDir, rec, patches, false)
			if len(conflicts) != 1 || !strings.Contains(conflicts[0], p+": changed locally since the job was enqueued") {
				t.Fatalf("%s: stale %s: conflicts %v", name, p, conflicts)
			}
			if got := readTree(t, staleDir); !maps.Equal(got, local) {
				t.Fatalf("%s: the refused accept wrote files", name)
			}
			stale++
			break
		}
	}
	t.Logf("GITAPPLY seed=%d diffs=%d byte-identical=%d (created %d, deleted %d, no-newline markers %d) stale refused=%d",
		*gitapplySeed, applied, applied, created, deleted, noEOL, stale)
	if applied < *gitapplyCases/2 || created == 0 || deleted == 0 || noEOL == 0 || stale == 0 {
		t.Fatalf("the generator missed a kind of change: applied %d created %d deleted %d noEOL %d stale %d", applied, created, deleted, noEOL, stale)
	}
}
