package pym_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/cairn/monty"
	"github.com/agentfleet/fleet/cairn/monty/montytest"
	"github.com/agentfleet/fleet/cairn/pym"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestPreprocessedRunKeepsLines runs a preprocessed file on the real Monty:
// inputs arrive through Input(), the external is awaited, and an exception
// reports the .pym line.
func TestPreprocessedRunKeepsLines(t *testing.T) {
	t.Parallel()
	src := `from grail import external, Input

name: str = Input("name")
count: int = Input("count", default=2)

@external
async def read_file(path: str) -> str:
    """Docstring."""
    ...

text = await read_file(name)
if count > 5:
    raise ValueError(f"count {count} too big")
{"text": text * count}
`
	f, err := pym.Parse("agents/x/tools/t.pym", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := montytest.Pool(t, monty.Config{Size: 1})
	ext := func(_ context.Context, name string, args []any, _ map[string]any) (any, error) {
		return "<" + args[0].(string) + ">", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := p.Run(ctx, f.Script, map[string]any{"name": "a"}, ext)
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Value) != `{"text":"<a><a>"}` {
		t.Fatalf("value %s", out.Value)
	}
	_, err = p.Run(ctx, f.Script, map[string]any{"name": "a", "count": 9}, ext)
	var se *monty.ScriptError
	if !errors.As(err, &se) || se.Line != 13 || se.Type != "ValueError" || se.Traceback[0].Filename != "agents/x/tools/t.pym" {
		t.Fatalf("err %#v", err)
	}
}
