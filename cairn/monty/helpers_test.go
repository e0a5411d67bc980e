package monty_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentfleet/fleet/cairn/monty"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ctxT returns a context bounded by d, cancelled when the test ends.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func script(code string, externals ...monty.External) *monty.Script {
	return &monty.Script{Name: "tools/t.pym", Code: code, Externals: externals}
}

func async(names ...string) []monty.External {
	out := make([]monty.External, len(names))
	for i, n := range names {
		out[i] = monty.External{Name: n, Async: true}
	}
	return out
}

// recorder is an ExternalFunc that records calls and answers from a table.
type recorder struct {
	mu    sync.Mutex
	calls []string
	fn    func(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error)
}

func (r *recorder) call(ctx context.Context, name string, args []any, kwargs map[string]any) (any, error) {
	r.mu.Lock()
	r.calls = append(r.calls, fmt.Sprintf("%s%v%v", name, args, kwargs))
	r.mu.Unlock()
	if r.fn != nil {
		return r.fn(ctx, name, args, kwargs)
	}
	return args, nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func assertJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	if string(got) != want {
		t.Fatalf("value %s, want %s", got, want)
	}
}

func assertServes(t *testing.T, p *monty.Pool) {
	t.Helper()
	out, err := p.Run(ctxT(t, 10*time.Second), script("sum([1, 2, 3])"), nil, nil)
	if err != nil {
		t.Fatalf("the pool no longer serves: %v", err)
	}
	assertJSON(t, out.Value, "6")
}
