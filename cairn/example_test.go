package cairn_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentfleet/fleet/cairn"
)

// A run edits a file in its overlay; the diff is reviewed, then accepted
// into stable.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "cairn-example")
	defer os.RemoveAll(dir)

	stable, _ := cairn.OpenStable(ctx, filepath.Join(dir, "stable.db"))
	defer stable.Close()
	stable.LoadFiles(ctx, map[string][]byte{"app.py": []byte("x=1\n")})

	ov, _ := stable.NewOverlay(ctx, dir, "lint", "app.py::x")
	defer ov.Close()
	// What a .pym tool does through the Monty runner:
	src, _ := ov.CallExternal(ctx, "read_file", []any{"app.py"}, nil)
	fmt.Printf("read %q\n", src)
	ov.CallExternal(ctx, "write_file", []any{"app.py", "x = 1\n"}, nil)
	_, err := ov.CallExternal(ctx, "read_file", []any{"../etc/passwd"}, nil)
	fmt.Println(err.(interface{ PythonException() string }).PythonException()+":", err)

	changed, _ := ov.ChangedFiles(ctx)
	diff, _ := ov.Diff(ctx)
	fmt.Println(ov.ID(), changed)
	fmt.Print(diff)
	res, _ := ov.Accept(ctx, cairn.AcceptOptions{})
	c, _ := stable.ReadFile(ctx, "app.py")
	fmt.Printf("merged %d, stable now %q\n", res.FilesMerged, c)
	// Output:
	// read "x=1\n"
	// PermissionError: read_file "../etc/passwd": '..' segments are not allowed; the path must stay inside the workspace (PATH_TRAVERSAL)
	// agent-lint-app.py~3A~3Ax [app.py]
	// diff --git a/app.py b/app.py
	// --- a/app.py
	// +++ b/app.py
	// @@ -1 +1 @@
	// -x=1
	// +x = 1
	// merged 1, stable now "x = 1\n"
}
