package testutil

import "os"

// DirNames lists the names of a folder's entries, failing the test when
// the folder cannot be read.
func DirNames(t TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}
