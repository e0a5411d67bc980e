package cairn_test

import (
	"reflect"
	"testing"
)

// python_nodes gives the tools the nodes cairn/pym/pynode finds: qualified
// names, 1-based lines, the header's colon and the body's first line.
func TestPythonNodes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	src := "class Shop:\n    @property\n    def price(self,\n              x): return 1\n\nasync def f():\n    '''Doc.'''\n    pass\n"
	got := b.call(t, "python_nodes", src)
	want := []any{
		map[string]any{"name": "Shop", "kind": "class", "async": false, "start": int64(1), "line": int64(1),
			"header_end": int64(1), "colon_col": int64(10), "body_start": int64(2), "end": int64(4)},
		map[string]any{"name": "Shop.price", "kind": "method", "async": false, "start": int64(2), "line": int64(3),
			"header_end": int64(4), "colon_col": int64(16), "body_start": int64(4), "end": int64(4)},
		map[string]any{"name": "f", "kind": "function", "async": true, "start": int64(6), "line": int64(6),
			"header_end": int64(6), "colon_col": int64(13), "body_start": int64(7), "end": int64(8)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("python_nodes = %#v", got)
	}
	if got := b.call(t, "python_nodes", "def broken(:\n"); got == nil {
		t.Fatal("a file that does not parse: nil")
	}
}
