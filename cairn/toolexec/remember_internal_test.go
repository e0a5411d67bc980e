package toolexec

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentfleet/fleet/cairn/monty"
)

// remember(key, text) binds like a Python function of two str parameters;
// anything else is a TypeError naming the problem.
func TestRememberArgs(t *testing.T) {
	for _, c := range []struct {
		args   []any
		kwargs map[string]any
		err    string
	}{
		{[]any{"k", "t"}, nil, ""},
		{[]any{"k"}, map[string]any{"text": "t"}, ""},
		{nil, map[string]any{"text": "t", "key": "k"}, ""},
		{[]any{"k"}, nil, "missing required argument: 'text'"},
		{[]any{"k", "t", "x"}, nil, "takes 2 positional arguments but 3 were given"},
		{[]any{"k", "t"}, map[string]any{"key": "k"}, "multiple values for argument 'key'"},
		{[]any{"k", "t"}, map[string]any{"ttl": "1h"}, "unexpected keyword argument 'ttl'"},
		{[]any{"k", int64(3)}, nil, "argument 'text' must be str"},
	} {
		key, text, err := rememberArgs(c.args, c.kwargs)
		if c.err == "" {
			if err != nil || key != "k" || text != "t" {
				t.Errorf("%v %v: %q %q %v", c.args, c.kwargs, key, text, err)
			}
			continue
		}
		var pe *monty.PythonError
		if !errors.As(err, &pe) || pe.Type != "TypeError" || !strings.Contains(pe.Message, c.err) {
			t.Errorf("%v %v: %v, want TypeError %q", c.args, c.kwargs, err, c.err)
		}
	}
}
