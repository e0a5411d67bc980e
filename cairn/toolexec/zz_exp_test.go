package toolexec_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
)

func TestZZExp(t *testing.T) {
	pool := montytest.Pool(t, monty.Config{Size: 1})
	f, err := pym.Load("../../agents/lint/tools/run_linter.pym")
	if err != nil {
		t.Fatal(err)
	}
	stock, _ := os.ReadFile("../../testdata/demo/src/inventory/stock.py")
	pp, _ := os.ReadFile("../../testdata/demo/pyproject.toml")
	files := map[string]string{"src/inventory/stock.py": string(stock), "pyproject.toml": string(pp)}
	ext := func(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
		p := args[0].(string)
		switch name {
		case "read_file":
			return files[p], nil
		case "file_exists":
			_, ok := files[p]
			return ok, nil
		}
		return nil, nil
	}
	in := map[string]any{"target_file": "src/inventory/stock.py", "file_path": "src/inventory/stock.py"}
	defsOnly := *f.Script
	i := strings.LastIndex(defsOnly.Code, "output = await main()")
	defsOnly.Code = defsOnly.Code[:i] + "1\n"
	trivial := monty.Script{Name: "t", Code: "1\n"}
	for _, c := range []struct {
		name string
		s    *monty.Script
	}{{"full", f.Script}, {"defs", &defsOnly}, {"trivial", &trivial}} {
		var wall, interp, tot time.Duration
		susp := 0
		const n = 200
		for i := 0; i < n; i++ {
			t0 := time.Now()
			out, err := pool.Run(context.Background(), c.s, in, ext)
			tot += time.Since(t0)
			if err != nil {
				t.Fatal(err)
			}
			wall += out.Wall
			interp += out.InterpreterTime
			susp = out.Suspensions
		}
		t.Logf("%s: total %v wall %v interp %v susp %d len %d stats %+v", c.name, tot/n, wall/n, interp/n, susp, len(c.s.Code), pool.Stats())
	}
}

func TestZZStats(t *testing.T) {
	TestZZExp(t)
}
