package layers

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/agentfleet/fleet"

// layer is one row of the table: its number, its name and the packages it
// names (a path, or a path ending in "/..." for it and everything below).
type layer struct {
	n        int
	name     string
	patterns []string
}

// readLayers parses the rows of the "## Layers" table of
// docs/ARCHITECTURE.md: "| <n> <name> | `pkg`, `pkg/...` | ... |".
func readLayers(t *testing.T, path string) []layer {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| *([0-9]+) +([^|]+?) *\\|([^|]*)\\|")
	pkg := regexp.MustCompile("`([^`]+)`")
	var ls []layer
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## Layers"
			continue
		}
		m := row.FindStringSubmatch(line)
		if !in || m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		l := layer{n: n, name: m[2]}
		for _, p := range pkg.FindAllStringSubmatch(m[3], -1) {
			l.patterns = append(l.patterns, p[1])
		}
		ls = append(ls, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ls) == 0 {
		t.Fatalf("%s: no layer table under \"## Layers\"", path)
	}
	return ls
}

// imports lists every package of the module with the module's packages it
// imports (test files left out: a test may use a harness of any layer),
// with and without the llama build tag.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, tags := range []string{"", "llama"} {
		cmd := exec.Command("go", "list", "-tags", tags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
		cmd.Dir = root
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list (tags %q): %v", tags, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			fs := strings.Fields(line)
			p := strings.TrimPrefix(strings.TrimPrefix(fs[0], module), "/")
			if _, ok := out[p]; !ok {
				out[p] = nil
			}
			for _, imp := range fs[1:] {
				if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
					out[p] = append(out[p], rel)
				}
			}
		}
	}
	for p, imps := range out {
		sort.Strings(imps)
		out[p] = slices.Compact(imps)
	}
	return out
}

// place finds pkg's layer: the row with the most specific pattern that
// matches it (the longest path; a package's own path before its tree).
func place(ls []layer, pkg string) (layer, string, bool) {
	var best layer
	bestPat, bestScore := "", -1
	for _, l := range ls {
		for _, p := range l.patterns {
			score := -1
			if base, tree := strings.CutSuffix(p, "/..."); tree {
				if pkg == base || strings.HasPrefix(pkg, base+"/") {
					score = 2 * len(base)
				}
			} else if p == pkg {
				score = 2*len(p) + 1
			}
			if score > bestScore {
				best, bestPat, bestScore = l, p, score
			}
		}
	}
	return best, bestPat, bestScore >= 0
}

// TestNoPackageImportsALayerAbove: every package sits in a layer of
// docs/ARCHITECTURE.md and imports only packages of its layer or below.
func TestNoPackageImportsALayerAbove(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ls := readLayers(t, filepath.Join(root, "docs", "ARCHITECTURE.md"))
	deps := imports(t, root)
	used := map[string]bool{}
	var pkgs []string
	for p := range deps {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		l, pat, ok := place(ls, p)
		if !ok {
			t.Errorf("%s has no layer: add it to the table in docs/ARCHITECTURE.md", p)
			continue
		}
		used[pat] = true
		for _, imp := range deps[p] {
			il, _, ok := place(ls, imp)
			if ok && il.n > l.n {
				t.Errorf("%s (layer %d, %s) imports %s (layer %d, %s), a layer above it", p, l.n, l.name, imp, il.n, il.name)
			}
		}
	}
	for _, l := range ls {
		for _, p := range l.patterns {
			if !used[p] {
				t.Errorf("docs/ARCHITECTURE.md: layer %d names %s, which is no package", l.n, p)
			}
		}
	}
}

// TestPlace checks the matching rule on a made-up table.
func TestPlace(t *testing.T) {
	ls := []layer{{0, "a", []string{"x/...", "y"}}, {1, "b", []string{"x/z"}}}
	for pkg, want := range map[string]string{"x": "0", "x/q": "0", "x/z": "1", "x/z/w": "0", "y": "0", "y/q": "", "xx": ""} {
		l, _, ok := place(ls, pkg)
		got := ""
		if ok {
			got = fmt.Sprint(l.n)
		}
		if got != want {
			t.Errorf("place(%s) = %q, want %q", pkg, got, want)
		}
	}
}
