package queue

import (
	"cmp"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestEngineTestsStartNoServer: none of this package's Test and Example
// functions starts a NATS server, directly or through a helper of its test
// files: the engine's tests run on ledger.Memory (docs/ARCHITECTURE.md,
// "Queue tests that start a NATS server", lists the counts it logs). A
// function starts one when it names a server starter (StartEmbedded,
// natstest's, a ledger test cluster) or calls a function or method of the
// test files that does. With FLEET_COUNT_DIR set to another checkout's
// queue folder it only counts there (how the "before" row was made).
func TestEngineTestsStartNoServer(t *testing.T) {
	dir := cmp.Or(os.Getenv("FLEET_COUNT_DIR"), ".")
	tests, starting := serverTests(t, dir)
	t.Logf("%s: %d Test/Example functions, %d start a NATS server: %v", dir, len(tests), len(starting), starting)
	if dir == "." && len(starting) > 0 {
		t.Errorf("engine tests that start a NATS server: %v (run them on ledger.Memory, or move them to the JetStream broker's tests in queue/ledger)", starting)
	}
}

// serverTests parses dir's test files and returns its Test and Example
// functions and those of them that start a server, sorted.
func serverTests(t *testing.T, dir string) (tests, starting []string) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Functions and methods of the test files by name (methods of any
	// receiver under one name: a call through a value is matched by name).
	bodies := map[string][]*ast.BlockStmt{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				bodies[fd.Name.Name] = append(bodies[fd.Name.Name], fd.Body)
				if fd.Recv == nil && (strings.HasPrefix(fd.Name.Name, "Test") && fd.Name.Name != "TestMain" ||
					strings.HasPrefix(fd.Name.Name, "Example")) {
					tests = append(tests, fd.Name.Name)
				}
			}
		}
	}
	memo := map[string]bool{}
	var starts func(name string) bool
	starts = func(name string) bool {
		if v, ok := memo[name]; ok {
			return v
		}
		memo[name] = false // a cycle adds nothing
		found := false
		for _, body := range bodies[name] {
			ast.Inspect(body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.Ident); ok && isServerStarter(id.Name, x.Sel.Name) {
						found = true
					}
					if _, local := bodies[x.Sel.Name]; local && starts(x.Sel.Name) {
						found = true
					}
				case *ast.Ident:
					if _, local := bodies[x.Name]; local && x.Name != name && starts(x.Name) {
						found = true
					}
				}
				return !found
			})
		}
		memo[name] = found
		return found
	}
	for _, name := range tests {
		if starts(name) {
			starting = append(starting, name)
		}
	}
	slices.Sort(tests)
	return tests, starting
}

// isServerStarter reports whether pkg.name starts a NATS server.
func isServerStarter(pkg, name string) bool {
	switch pkg {
	case "embedded":
		return name == "StartEmbedded"
	case "natstest":
		return true
	case "ledger":
		return name == "SingleNode" || name == "R3Cluster"
	case "server":
		return name == "NewServer"
	}
	return false
}
